#!/usr/bin/python3
"""What oversized prompts cost parspec: N parallel requests with a prompt of M bytes each
(completions and chat) to a `parspec serve` started here, loopback only, and a `generate -f`
of a big file. Prints each case's statuses, time and the process's peak RSS (VmHWM).

    /usr/bin/python3 bench/oversized_prompts.py [--parspec build/parspec]
        [-m models/target.gguf] [--clients 64] [--prompt-mib 1] [--file-mib 200]
        [--threads-http N]

Standard library only. The server gets --max-body just above the prompt size.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request


def peak_rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def reset_peak_rss(pid):
    """Starts VmHWM afresh at the current RSS (Linux: clear_refs 5), so each case's peak is its own."""
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")


def post(port, path, body):
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except OSError as e:
        return 0, str(e).encode()


def serve_case(args):
    prompt_bytes = int(args.prompt_mib * (1 << 20))
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    server = subprocess.Popen(
        [args.parspec, "serve", "-m", args.model, "--port", "0", "-t", "1",
         "--max-body", str(prompt_bytes + 4096), "--max-queue", str(args.clients),
         "--threads-http", str(args.threads_http)],
        stdout=log, stderr=subprocess.STDOUT)
    try:
        port = 0
        for _ in range(600):
            text = open(log.name).read()
            found = re.search(r"listening on http://127\.0\.0\.1:(\d+)", text)
            if found:
                port = int(found.group(1))
                break
            if server.poll() is not None:
                sys.exit("the server ended:\n" + text)
            time.sleep(0.1)
        if port == 0:
            sys.exit("the server did not start")
        base = rss_mib(server.pid)
        sentence = "hello world, the quick brown fox jumps over the lazy dog 12345. "
        text = (sentence * (prompt_bytes // len(sentence) + 1))[:prompt_bytes]
        for chat in (False, True):
            body = json.dumps({"messages": [{"role": "user", "content": text}]} if chat
                              else {"prompt": text}).encode()
            path = "/v1/chat/completions" if chat else "/v1/completions"
            statuses, threads = [], []
            lock = threading.Lock()

            def one():
                status, reply = post(port, path, body)
                with lock:
                    statuses.append((status, reply[:160]))

            base = rss_mib(server.pid)
            reset_peak_rss(server.pid)
            start = time.monotonic()
            for _ in range(args.clients):
                threads.append(threading.Thread(target=one))
                threads[-1].start()
            for t in threads:
                t.join()
            elapsed = time.monotonic() - start
            counts = {}
            for status, _ in statuses:
                counts[status] = counts.get(status, 0) + 1
            # One reply of each status.
            sample = " / ".join(sorted({f"{s}: {r.decode(errors='replace')[:100]}"
                                        for s, r in statuses}))
            print(f"| serve {path} | {args.clients} x {args.prompt_mib:g} MiB | "
                  f"{dict(sorted(counts.items()))} | {elapsed:.2f} s | "
                  f"RSS {base:.0f} MiB before, peak {peak_rss_mib(server.pid):.0f} MiB |")
            print(f"|   e.g. | {sample} |")
    finally:
        server.terminate()
        server.wait(timeout=60)
        os.unlink(log.name)


def file_case(args):
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "big.txt")
        sentence = b"hello world, the quick brown fox jumps over the lazy dog 12345.\n"
        block = sentence * ((1 << 20) // len(sentence))
        with open(path, "wb") as f:
            for _ in range(int(args.file_mib)):
                f.write(block)
        start = time.monotonic()
        run = subprocess.run(["/usr/bin/time", "-f", "%M", args.parspec, "generate", "-m",
                              args.model, "-f", path, "-n", "1"],
                             capture_output=True, text=True)
        elapsed = time.monotonic() - start
        lines = run.stderr.strip().splitlines()
        peak_kib = int(lines[-1]) if lines and lines[-1].isdigit() else 0
        message = next((line for line in lines if "error" in line), "")
        print(f"| generate -f | {args.file_mib:g} MiB file | exit {run.returncode} | "
              f"{elapsed:.2f} s | peak RSS {peak_kib / 1024:.0f} MiB |")
        print(f"|   message | {message[:200]} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parspec", default="build/parspec")
    parser.add_argument("-m", "--model", default="models/target.gguf")
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--prompt-mib", type=float, default=1.0)
    parser.add_argument("--file-mib", type=float, default=200.0)
    parser.add_argument("--threads-http", type=int, default=0,
                        help="serve's handler threads (0: its default, -np + --max-queue + 8)")
    args = parser.parse_args()
    print("| case | input | statuses / exit | time | memory |")
    print("|---|---|---|---|---|")
    serve_case(args)
    file_case(args)


if __name__ == "__main__":
    main()
