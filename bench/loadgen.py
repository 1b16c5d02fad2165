#!/usr/bin/env python3
"""Load generator for `parspec serve` (or any OpenAI-compatible server).

Sends streamed requests with Poisson arrivals (exponential gaps) at each given
rate, prompts drawn in turn from bench/prompts/*.jsonl, and reports per rate:
throughput (generated tokens/s over the run), time to first token and time per
output token (p50/p99), errors, and the server's resident memory before and
after when --pid is given. Standard library only.

  bench/loadgen.py --url http://127.0.0.1:8080 --rates 2,8,32 --requests 1000 \
      --prompts code,math --max-tokens 64 [--chat] [--api-key K] [--pid PID] [--json out.json]

With --concurrency C instead of --rates, C clients each send their next request as
soon as the last one finished (closed loop: the batched throughput at C requests).
"""
import argparse
import http.client
import json
import os
import random
import statistics
import sys
import threading
import time
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_prompts(names):
    prompts = []
    for name in names.split(","):
        with open(os.path.join(ROOT, "bench", "prompts", name + ".jsonl")) as f:
            prompts += [json.loads(line)["prompt"] for line in f if line.strip()]
    return prompts


def percentile(values, p):
    if not values:
        return float("nan")
    values = sorted(values)
    k = (len(values) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def rss_mib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


class RssSampler:
    """The server's resident memory sampled every `period` seconds while a load runs:
    start, peak and end (MiB); all None without a pid."""

    def __init__(self, pid, period=0.5):
        self.pid, self.period = pid, period
        self.start = self.peak = self.end = None
        self._stop = threading.Event()
        self._thread = None

    def __enter__(self):
        if self.pid:
            self.start = self.peak = rss_mib(self.pid)
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def _run(self):
        while not self._stop.wait(self.period):
            v = rss_mib(self.pid)
            if v is not None:
                self.peak = max(self.peak or 0.0, v)

    def __exit__(self, *exc):
        if self._thread:
            self._stop.set()
            self._thread.join()
            self.end = rss_mib(self.pid)
            if self.end is not None:
                self.peak = max(self.peak or 0.0, self.end)


def one_request(url, args, prompt, result):
    """Streams one request; fills result with ttft, tpot, tokens or error."""
    u = urllib.parse.urlparse(url)
    body = {"max_tokens": args.max_tokens, "temperature": args.temperature, "stream": True,
            "stream_options": {"include_usage": True}}
    if args.ignore_eos:
        body["ignore_eos"] = True
    if args.chat:
        path = "/v1/chat/completions"
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        path = "/v1/completions"
        body["prompt"] = prompt
    headers = {"Content-Type": "application/json"}
    if args.api_key:
        headers["Authorization"] = "Bearer " + args.api_key
    start = time.perf_counter()
    first = last = None
    tokens = 0
    try:
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=args.timeout)
        conn.request("POST", path, json.dumps(body), headers)
        resp = conn.getresponse()
        if resp.status != 200:
            result["error"] = f"HTTP {resp.status}: {resp.read()[:200]!r}"
            return
        done = False
        for raw in resp:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                done = True
                break
            chunk = json.loads(data)
            if "error" in chunk:
                result["error"] = chunk["error"].get("message", "error")
                return
            if chunk.get("choices"):
                c = chunk["choices"][0]
                text = c.get("delta", {}).get("content") if args.chat else c.get("text")
                if text:
                    now = time.perf_counter()
                    first = first or now
                    last = now
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
        conn.close()
        if not done:
            result["error"] = "stream ended without [DONE]"
            return
    except Exception as e:  # noqa: BLE001 - every failure is an error of the run
        result["error"] = repr(e)
        return
    result["tokens"] = tokens
    result["ttft"] = (first - start) if first else None
    if first and last and tokens > 1:
        result["tpot"] = (last - first) / (tokens - 1)
    result["latency"] = time.perf_counter() - start


def rate_at(rate, elapsed, period):
    """The arrival rate at `elapsed` seconds: a number, or "LOW~HIGH" (fluctuating:
    LOW and HIGH alternate every `period` seconds, LOW first)."""
    if isinstance(rate, str) and "~" in rate:
        low, high = (float(x) for x in rate.split("~"))
        return low if int(elapsed // period) % 2 == 0 else high
    return float(rate)


def run_rate(args, rate, prompts):
    rng = random.Random(args.seed)
    results = [dict() for _ in range(args.requests)]
    threads = []
    with RssSampler(args.pid) as mem:
        t0 = time.perf_counter()
        next_at = t0
        for i in range(args.requests):
            next_at += rng.expovariate(rate_at(rate, next_at - t0, args.period))
            delay = next_at - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            t = threading.Thread(target=one_request,
                                 args=(args.url, args, prompts[i % len(prompts)], results[i]))
            t.start()
            threads.append(t)
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
    return summarize(args, f"{rate} req/s" if isinstance(rate, str) else f"{rate:g} req/s", results, wall, mem)


def run_closed(args, concurrency, prompts):
    """`concurrency` clients, each sending requests back to back, --requests in all."""
    results = [dict() for _ in range(args.requests)]
    counter = iter(range(args.requests))
    lock = threading.Lock()

    def client():
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            one_request(args.url, args, prompts[i % len(prompts)], results[i])

    with RssSampler(args.pid) as mem:
        t0 = time.perf_counter()
        threads = [threading.Thread(target=client) for _ in range(concurrency)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
    return summarize(args, f"C={concurrency}", results, wall, mem)


def summarize(args, label, results, wall, mem):
    ok = [r for r in results if "error" not in r]
    errors = [r["error"] for r in results if "error" in r]
    ttft = [r["ttft"] for r in ok if r.get("ttft") is not None]
    tpot = [r["tpot"] for r in ok if r.get("tpot") is not None]
    tokens = sum(r["tokens"] for r in ok)
    latency = [r["latency"] for r in ok if r.get("latency") is not None]
    return {
        "load": label, "requests": len(results), "ok": len(ok), "errors": len(errors),
        "rejected_429": sum(e.startswith("HTTP 429") for e in errors),
        "first_errors": errors[:3], "wall_s": wall, "tokens": tokens,
        "throughput_tok_s": tokens / wall,
        "ttft_p50_ms": percentile(ttft, 50) * 1e3, "ttft_p99_ms": percentile(ttft, 99) * 1e3,
        "tpot_p50_ms": percentile(tpot, 50) * 1e3, "tpot_p99_ms": percentile(tpot, 99) * 1e3,
        "latency_mean_ms": statistics.fmean(latency) * 1e3 if latency else float("nan"),
        "latency_p99_ms": percentile(latency, 99) * 1e3,
        "rss_start_mib": mem.start, "rss_peak_mib": mem.peak, "rss_end_mib": mem.end,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--rates", default="4", help="arrival rates in requests/s, comma-separated; LOW~HIGH fluctuates "
                         "between the two every --period seconds")
    ap.add_argument("--period", type=float, default=5.0,
                    help="seconds of each phase of a fluctuating rate")
    ap.add_argument("--concurrency", default="",
                    help="closed loop instead: client counts, comma-separated")
    ap.add_argument("--requests", type=int, default=100, help="requests per rate (or per concurrency)")
    ap.add_argument("--prompts", default="code,math,prose,chat", help="sets from bench/prompts")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--ignore-eos", action="store_true", help="every request generates max-tokens")
    ap.add_argument("--chat", action="store_true", help="use /v1/chat/completions")
    ap.add_argument("--api-key", default="")
    ap.add_argument("--pid", type=int, default=0, help="server process, for its memory")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", default="", help="write the results to this file")
    args = ap.parse_args()
    prompts = load_prompts(args.prompts)
    rows = []
    print("| load | requests | errors | tok/s | latency mean / p99 (ms) | TTFT p50 / p99 (ms) | TPOT p50 / p99 (ms) | RSS start / peak / end (MiB) |")
    print("|---|---|---|---|---|---|---|---|")
    loads = ([("closed", int(c)) for c in args.concurrency.split(",")] if args.concurrency
             else [("rate", r if "~" in r else float(r)) for r in args.rates.split(",")])
    for kind, value in loads:
        row = run_closed(args, value, prompts) if kind == "closed" else run_rate(args, value, prompts)
        rows.append(row)
        mem = (f"{row['rss_start_mib']:.0f} / {row['rss_peak_mib']:.0f} / {row['rss_end_mib']:.0f}"
               if None not in (row["rss_start_mib"], row["rss_peak_mib"], row["rss_end_mib"]) else "–")
        errors = f"{row['errors']}" + (f" ({row['rejected_429']} × 429)" if row["rejected_429"] else "")
        print(f"| {row['load']} | {row['requests']} | {errors} | {row['throughput_tok_s']:.1f} | "
              f"{row['latency_mean_ms']:.0f} / {row['latency_p99_ms']:.0f} | "
              f"{row['ttft_p50_ms']:.1f} / {row['ttft_p99_ms']:.1f} | "
              f"{row['tpot_p50_ms']:.2f} / {row['tpot_p99_ms']:.2f} | {mem} |", flush=True)
        for e in row["first_errors"]:
            print("  error:", e, file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "load": os.getloadavg(), "results": rows}, f, indent=2)
    sys.exit(1 if any(r["errors"] for r in rows) else 0)


if __name__ == "__main__":
    main()
