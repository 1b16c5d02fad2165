#!/usr/bin/python3
"""Hostile clients against `parspec serve`, over loopback, bounded in time.

Runs four attacks and prints a table:
  chunked    a chunked request body of --chunked-mib MiB: the status, how long until it,
             and the server's RSS growth (sampled every 20 ms);
  slowloris  --slow connections that send their request header one byte every --interval
             seconds: /health latency (max, p99) from another address during the attack,
             when each slow connection was closed, and /health once they were;
  idle       --idle connections that send nothing: /health latency meanwhile;
  length     `Content-Length: -1`: the status and how long until it.

The attackers connect from other loopback addresses (127.0.0.2 ...) than the /health probe
(127.0.0.1): the server counts --max-connections-per-client per address, as it would for
separate hosts. The slow connections are spread over --slow-sources addresses.

Starts `parspec serve` on a free port (--parspec, --model, --serve-args), or attacks a
running one with --port (RSS then needs --pid). Standard library only.

  /usr/bin/python3 bench/http_abuse.py [--request-timeout 30] [--slow 200] [--idle 100]
"""
import argparse
import os
import re
import select
import socket
import subprocess
import sys
import threading
import time


def rss_mib(pid):
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


class RssSampler:
    """The server's peak RSS while a block runs."""

    def __init__(self, pid):
        self.pid, self.peak, self.stop = pid, None, threading.Event()

    def __enter__(self):
        self.start = rss_mib(self.pid)
        self.peak = self.start
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()
        return self

    def run(self):
        while not self.stop.is_set():
            r = rss_mib(self.pid)
            if r is not None and (self.peak is None or r > self.peak):
                self.peak = r
            time.sleep(0.02)

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        self.end = rss_mib(self.pid)


def connect(port, source="127.0.0.1", timeout=10.0):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    return s


def read_reply(s, timeout):
    """Reads until the server closes or `timeout` passes; the bytes."""
    data = b""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        ready, _, _ = select.select([s], [], [], max(0.0, end - time.monotonic()))
        if not ready:
            break
        try:
            chunk = s.recv(65536)
        except (ConnectionResetError, socket.timeout):
            break
        if not chunk:
            break
        data += chunk
    return data


def status_of(reply):
    m = re.match(rb"HTTP/1\.[01] (\d{3})", reply)
    return int(m.group(1)) if m else None


def health(port, timeout=10.0):
    """/health from 127.0.0.1: (status, seconds); status None if no answer in `timeout`."""
    start = time.monotonic()
    try:
        s = connect(port, timeout=timeout)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        reply = read_reply(s, timeout)
        s.close()
    except OSError:
        reply = b""
    return status_of(reply), time.monotonic() - start


def percentile(values, p):
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))]


def attack_chunked(port, pid, mib):
    s = connect(port, timeout=30)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Transfer-Encoding: chunked\r\n\r\n")
    chunk = b"a" * 65536
    frame = b"%x\r\n" % len(chunk) + chunk + b"\r\n"
    sent = [0]

    def send():
        try:
            s.sendall(b'10\r\n{"prompt": "aaaa\r\n')
            for _ in range(mib * 16):
                s.sendall(frame)
                sent[0] += len(chunk)
            s.sendall(b'2\r\n"}\r\n0\r\n\r\n')
        except OSError:
            pass  # the server answered and closed

    start = time.monotonic()
    with RssSampler(pid) as rss:
        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        select.select([s], [], [], 60)
        took, sent_then = time.monotonic() - start, sent[0]
        reply = read_reply(s, 60)
        sender.join(timeout=5)
    s.close()
    growth = (rss.peak - rss.start) if rss.start is not None else None
    return status_of(reply), took, sent_then / 2**20, growth


def attack_slowloris(port, n, sources, interval, deadline):
    header = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100000
    conns, refused = [], 0
    start = time.monotonic()
    for i in range(n):
        source = "127.0.0.%d" % (2 + i % sources)
        try:
            conns.append([connect(port, source), time.monotonic(), None])
        except OSError:
            refused += 1
    # Refused connections get a 429/503 at once and are closed: count them out.
    time.sleep(0.2)
    held = []
    for c in conns:
        r, _, _ = select.select([c[0]], [], [], 0)
        if r:
            reply = read_reply(c[0], 1.0)
            if status_of(reply) in (429, 503):
                refused += 1
                c[0].close()
                continue
        held.append(c)
    stop = threading.Event()

    def drip():
        i = 0
        while not stop.is_set() and any(c[2] is None for c in held):
            for c in held:
                if c[2] is not None:
                    continue
                try:
                    r, _, _ = select.select([c[0]], [], [], 0)
                    if r and c[0].recv(1, socket.MSG_DONTWAIT) == b"":
                        raise ConnectionResetError
                    c[0].send(header[i:i + 1])
                except OSError:
                    c[2] = time.monotonic() - c[1]
            i += 1
            stop.wait(interval)

    dripper = threading.Thread(target=drip, daemon=True)
    dripper.start()
    during = []
    while any(c[2] is None for c in held) and time.monotonic() - start < deadline + 10:
        status, took = health(port)
        during.append(took if status == 200 else float("inf"))
        time.sleep(0.1)
    stop.set()
    dripper.join()
    after = []
    for _ in range(20):
        status, took = health(port)
        after.append(took if status == 200 else float("inf"))
    closed = [c[2] for c in held if c[2] is not None]
    for c in held:
        c[0].close()
    return {"held": len(held), "refused": refused, "still_open": len(held) - len(closed),
            "closed_min": min(closed) if closed else float("nan"),
            "closed_max": max(closed) if closed else float("nan"),
            "during": during, "after": after}


def attack_idle(port, n):
    conns, refused = [], 0
    for i in range(n):
        try:
            conns.append(connect(port, "127.0.0.%d" % (10 + i % 4)))
        except OSError:
            refused += 1
    time.sleep(0.2)
    lat = []
    for _ in range(20):
        status, took = health(port)
        lat.append(took if status == 200 else float("inf"))
        time.sleep(0.05)
    for c in conns:
        c.close()
    return len(conns), lat


def attack_negative_length(port):
    start = time.monotonic()
    s = connect(port, timeout=30)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n{}")
    reply = read_reply(s, 30)
    s.close()
    return status_of(reply), time.monotonic() - start


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parspec", default="build/parspec")
    ap.add_argument("--model", default="models/target.gguf")
    ap.add_argument("--serve-args", default="-t 1 -c 256",
                    help="more flags for the server this script starts")
    ap.add_argument("--request-timeout", type=float, default=30.0,
                    help="the server's --request-timeout (passed to the server this script "
                         "starts; bounds the slowloris phase)")
    ap.add_argument("--port", type=int, help="attack a running server on this port")
    ap.add_argument("--pid", type=int, help="its process id (for RSS)")
    ap.add_argument("--chunked-mib", type=int, default=64)
    ap.add_argument("--slow", type=int, default=200)
    ap.add_argument("--slow-sources", type=int, default=4)
    ap.add_argument("--interval", type=float, default=0.5)
    ap.add_argument("--idle", type=int, default=100)
    a = ap.parse_args()

    server = None
    port, pid = a.port, a.pid
    if port is None:
        cmd = [a.parspec, "serve", "-m", a.model, "--port", "0", "--request-timeout",
               str(a.request_timeout)] + a.serve_args.split()
        server = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  text=True)
        pid = server.pid
        for line in server.stdout:
            m = re.search(r"listening on http://[^:]+:(\d+)", line)
            if m:
                port = int(m.group(1))
                break
        if port is None:
            sys.exit("http_abuse: the server did not start: " + " ".join(cmd))
        print("server:", " ".join(cmd))
    try:
        rows = []
        status, took, sent, growth = attack_chunked(port, pid, a.chunked_mib)
        rows.append(("chunked %d MiB body" % a.chunked_mib,
                     "status %s after %.3f s (%.1f MiB sent by then); RSS growth %s" %
                     (status, took, sent, "%.1f MiB" % growth if growth is not None else "n/a")))
        s = attack_slowloris(port, a.slow, a.slow_sources, a.interval, a.request_timeout)
        s["during"] = s["during"] or [float("nan")]
        rows.append(("%d slowloris (1 byte / %.1f s)" % (a.slow, a.interval),
                     "%d held, %d refused; closed after %.1f-%.1f s, %d still open" %
                     (s["held"], s["refused"], s["closed_min"], s["closed_max"],
                      s["still_open"])))
        rows.append(("  /health during (%d probes)" % len(s["during"]),
                     "max %.1f ms, p99 %.1f ms" % (1000 * max(s["during"]),
                                                   1000 * percentile(s["during"], 99))))
        rows.append(("  /health after they closed",
                     "max %.1f ms, p99 %.1f ms" % (1000 * max(s["after"]),
                                                   1000 * percentile(s["after"], 99))))
        n, lat = attack_idle(port, a.idle)  # probes /health 20 times
        rows.append(("%d idle connections (%d open)" % (a.idle, n),
                     "/health max %.1f ms, p99 %.1f ms" % (1000 * max(lat),
                                                          1000 * percentile(lat, 99))))
        status, took = attack_negative_length(port)
        rows.append(("Content-Length: -1", "status %s after %.3f s" % (status, took)))
        width = max(len(r[0]) for r in rows)
        print("%-*s  %s" % (width, "attack", "result"))
        for name, result in rows:
            print("%-*s  %s" % (width, name, result))
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=60)


if __name__ == "__main__":
    main()
