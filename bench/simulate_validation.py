#!/usr/bin/env python3
"""The simulator against real MPI runs (docs/simulate.md, "Validation").

For 2, 3 and 4 ranks, with and without an emulated link latency, runs pp, stpp and pipedec
for real (`mpirun -np R parspec generate ...`) and on the simulator (`parspec simulate
--ranks R ...`) with a cost profile measured at the start of the same run, on the same
prompts, and prints ms per token of both and the simulator's error.

Usage: /usr/bin/python3 bench/simulate_validation.py
Env:   TARGET, DRAFT (default: the inflated 1B-class Q8_0 pair of bench/make_pairs.sh q8_0),
       N (tokens per prompt, 32), RANKS ("2 3 4"), LATENCIES ("0 100", us), PARSPEC
Out:   out/sim-validation/{profile-target.json,profile-draft.json,results.json,table.md}
"""
import json
import os
import subprocess
import sys

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.chdir(root)
parspec = os.environ.get("PARSPEC", "build/parspec")
target = os.environ.get("TARGET", "out/zoo-target-1b-q8_0.gguf")
draft = os.environ.get("DRAFT", "out/zoo-draft-100m-q8_0.gguf")
if not (os.path.exists(target) and os.path.exists(draft)):
    subprocess.run(["bash", "bench/make_pairs.sh", "q8_0"], check=True)
n = os.environ.get("N", "32")
ranks_list = [int(r) for r in os.environ.get("RANKS", "2 3 4").split()]
latencies = [float(x) for x in os.environ.get("LATENCIES", "0 100").split()]
out = "out/sim-validation"
os.makedirs(out, exist_ok=True)
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")

prompts = []
for name in ("code", "prose"):
    with open(f"bench/prompts/{name}.jsonl") as f:
        prompts.append(json.loads(f.readline())["prompt"])
tree = ["--tree-depth", "3", "--tree-branch", "2", "--tree-width", "2"]
common = ["-m", target, "-md", draft, "-n", n, "--temp", "0", "-t", "1", "--ignore-eos", "--json"]


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-2000:]}")
    return json.loads(p.stdout)


# The cost profile, measured once here (one thread, as each rank runs).
profile = f"{out}/profile"
run([parspec, "simulate", "--ranks", "2", "-p", prompts[0], *common[:-1], "-n", "1", "--json",
     "--save-profiles", profile])

results = []
for ranks in ranks_list:
    for latency in latencies:
        link = ["--link-latency-us", str(latency)] if latency > 0 else []
        for strategy in ("pp", "stpp", "pipedec"):
            row = {"ranks": ranks, "latency_us": latency, "strategy": strategy}
            for kind in ("real", "sim"):
                total_ms, total_tokens, tokens = 0.0, 0, []
                for prompt in prompts:
                    shape = {"pp": [], "stpp": tree[:4], "pipedec": tree}[strategy]
                    args = ["--strategy", strategy, *shape, *link, "-p", prompt, *common]
                    if kind == "real":
                        mpi = ["mpirun", "-np", str(ranks)]
                        mpi += ["--bind-to", "core"] if ranks <= os.cpu_count() else [
                            "--oversubscribe", "--bind-to", "none"]
                        j = run([*mpi, parspec, "generate", *args])
                    else:
                        j = run([parspec, "simulate", "--ranks", str(ranks), *args,
                                 "--cost-profile", f"{profile}-target.json",
                                 "--draft-cost-profile", f"{profile}-draft.json"])
                    total_ms += j["t_gen_ms"]
                    total_tokens += j["n_gen"]
                    tokens.append(j["tokens"])
                row[kind] = total_ms / total_tokens
                row[kind + "_tokens"] = tokens
            assert row["real_tokens"] == row["sim_tokens"], row
            row["error"] = row["sim"] / row["real"] - 1
            del row["real_tokens"], row["sim_tokens"]
            results.append(row)
            print(json.dumps(row), flush=True)

with open(f"{out}/results.json", "w") as f:
    json.dump({"cpu_cores": os.cpu_count(), "n": int(n), "target": target, "draft": draft,
               "results": results}, f, indent=1)
lines = ["| ranks | link latency | strategy | real ms/token | simulated | error |",
         "|---|---|---|---|---|---|"]
for r in results:
    over = " (oversubscribed)" if r["ranks"] > os.cpu_count() else ""
    lines.append(f"| {r['ranks']}{over} | {r['latency_us']:g} us | {r['strategy']} | "
                 f"{r['real']:.1f} | {r['sim']:.1f} | {100 * r['error']:+.1f}% |")
open(f"{out}/table.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
