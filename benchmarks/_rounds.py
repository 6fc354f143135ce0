"""Side-by-side rounds for the small comparison scripts (pool.py, dag.py).

The script runs as parent and as child: the parent starts, every round, one fresh
child per backend (``<script> --backend X``), which prints its measurements as one JSON
line; the table gives each metric's median over rounds and meshrt's ratio to each
other backend, the median of the ratios taken within each round (these machines'
speed drifts between rounds more than within one).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
from collections.abc import Callable

NAMES = {"meshrt": "meshrt", "ray": "Ray", "multiprocessing": "multiprocessing"}


def main(doc: str, script: str, backends: tuple, child: Callable[[str], dict], rows: list, corner: str) -> None:
    """``rows``: (key, label, higher is better, format). ``corner``: the table's first header cell."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=backends)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--markdown")
    args = parser.parse_args()
    if args.backend:  # (the child)
        print(json.dumps(child(args.backend)))
        return
    rounds = [_one_round(script, backends) for _ in range(args.repeat)]
    others = [b for b in backends if b != "meshrt"]
    lines = [f"| {corner} | " + " | ".join(NAMES[b] for b in backends) + " | "
             + " | ".join(f"meshrt vs {NAMES[b]}" for b in others) + " |",
             "|---|" + "--:|" * (len(backends) + len(others))]
    for key, label, higher, fmt in rows:
        med = {b: statistics.median(r[b][key] for r in rounds) for b in backends}
        vs = {b: statistics.median(_ratio(r["meshrt"][key], r[b][key], higher) for r in rounds) for b in others}
        lines.append(f"| {label} | " + " | ".join(fmt.format(med[b]) for b in backends) + " | "
                     + " | ".join(f"{vs[b]:.2f}x" for b in others) + " |")
    table = "\n".join(lines)
    import ray

    name = script.split("/benchmarks/")[-1]
    note = (f"Command: `python benchmarks/{name} --repeat {args.repeat}`; {platform.machine()}, "
            f"Python {platform.python_version()}, ray {ray.__version__}; medians of {args.repeat} rounds, each "
            f"backend in a fresh process per round; ratios >1: meshrt better (median of per-round ratios).")
    print(table)
    print(note)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(note + "\n\n" + table + "\n")


def _one_round(script: str, backends: tuple) -> dict:
    got = {}
    for backend in backends:
        out = subprocess.run([sys.executable, script, "--backend", backend], capture_output=True, text=True,
                             timeout=600)
        lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
        if out.returncode or not lines:
            sys.exit(f"{backend} failed:\n{out.stderr[-3000:]}")
        got[backend] = json.loads(lines[-1])
    return got


def _ratio(mine: float, theirs: float, higher: bool) -> float:
    return mine / theirs if higher else theirs / mine
