"""runtime_env ``pip``: meshrt and Ray side by side, each in a fresh process per round.

Per round and backend: ``init``, then the first result of a task whose runtime_env
installs a small package (its environment made from nothing: meshrt's under an empty
``MESHRT_RUNTIME_ENV_DIR``, Ray's in its new session), a second task in the same
environment, and an actor in it. Medians over the rounds, and the ratio (Ray's time over
meshrt's: > 1 is meshrt faster). Needs the package registry (pip downloads the package).

    python benchmarks/pip_env.py [--rounds 3] [--markdown benchmarks/results/pip_env.md]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

PACKAGE = "tomli-w==1.0.0"

ROUND = r"""
import json, sys, time
backend = sys.argv[1]
if backend == "ray":
    import ray
else:
    import meshrt as ray
ray.init(num_cpus=2)
env = {"pip": [sys.argv[2]]}

def dumps():
    import tomli_w
    return tomli_w.dumps({"a": 1})

task = ray.remote(dumps).options(runtime_env=env)

class Holder:
    def dumps(self):
        return dumps()

out = {}
t = time.perf_counter()
assert ray.get(task.remote()) == "a = 1\n"
out["first"] = time.perf_counter() - t
t = time.perf_counter()
assert ray.get(task.remote()) == "a = 1\n"
out["again"] = time.perf_counter() - t
t = time.perf_counter()
holder = ray.remote(Holder).options(runtime_env=env).remote()
assert ray.get(holder.dumps.remote()) == "a = 1\n"
out["actor"] = time.perf_counter() - t
ray.shutdown()
print("RESULT " + json.dumps(out))
"""

METRICS = [("first", "first result of a task in a new pip environment (s)"),
           ("again", "a second task in that environment (s)"),
           ("actor", "an actor in that environment, first result (s)")]


def one_round(backend: str) -> dict:
    with tempfile.TemporaryDirectory() as envs:
        env = dict(os.environ, MESHRT_RUNTIME_ENV_DIR=envs)
        done = subprocess.run([sys.executable, "-c", ROUND, backend, PACKAGE], capture_output=True, text=True,
                              env=env, timeout=600)
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"{backend} round failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--markdown", help="also write the table to this file")
    args = parser.parse_args()
    runs: dict = {"meshrt": [], "ray": []}
    for _ in range(args.rounds):
        for backend in runs:  # (interleaved: a noisy minute hits both)
            runs[backend].append(one_round(backend))
    lines = ["| metric | meshrt | ray | ratio (ray / meshrt, >1 = meshrt faster) |", "|---|--:|--:|--:|"]
    for key, label in METRICS:
        ours = statistics.median(r[key] for r in runs["meshrt"])
        theirs = statistics.median(r[key] for r in runs["ray"])
        lines.append(f"| {label} | {ours:.3f} | {theirs:.3f} | {theirs / ours:.1f}x |")
    table = "\n".join(lines)
    print(table)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(f"`python benchmarks/pip_env.py --rounds {args.rounds}` (medians)\n\n{table}\n")


if __name__ == "__main__":
    main()
