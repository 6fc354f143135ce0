"""Placement over the hosts of a cluster, meshrt and Ray side by side on this machine.

Two hosts of 2 CPUs each on loopback: meshrt's head plus one ``meshrt agent``
process, Ray's head plus one more raylet (``ray.cluster_utils.Cluster``). Each
backend runs in a fresh subprocess with the same program (``import meshrt as ray``):

- uneven tasks: 24 one-CPU tasks that sleep 0.3 s or 0.03 s, the long ones in an
  order that placing each task once, on arrival, would give one host most of them.
  Makespan against the ideal (the work over 4 CPUs): spillback moves queued tasks to
  the host that frees up first.
- default actors: 8 actors asking for nothing (Ray's default actor): how many land
  on each host.
- CPU actors: 4 actors of 1 CPU: per host.
- SPREAD tasks: 8 tasks of 0.5 CPU with ``scheduling_strategy="SPREAD"``, all running
  at once: per host.

    python benchmarks/cluster_spread.py [--repeat 5] [--markdown PATH]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import time

LONG, SHORT, TASKS = 0.3, 0.03, 24
DURATIONS = [LONG if i % 2 == 0 else SHORT for i in range(TASKS)]
IDEAL = sum(DURATIONS) / 4


def _start(backend: str):
    """The cluster and a function that stops it."""
    if backend == "ray":
        import ray
        from ray.cluster_utils import Cluster

        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
        cluster.add_node(num_cpus=2)
        ray.init(address=cluster.address, logging_level="ERROR")
        cluster.wait_for_nodes()
        return ray, lambda: (ray.shutdown(), cluster.shutdown())
    import meshrt as ray

    os.environ.setdefault("MESHRT_TOKEN", os.urandom(16).hex())
    info = ray.init(address="127.0.0.1:0", num_cpus=2)
    agent = subprocess.Popen([sys.executable, "-m", "meshrt", "agent", "--address", info["tcp_address"],
                              "--num-cpus", "2", "--object-store-memory", str(128 << 20)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ray.hosts(min_hosts=1, timeout=60)

    def stop():
        ray.shutdown()
        agent.wait(timeout=30)
    return ray, stop


def child(backend: str, repeat: int) -> dict:
    ray, stop = _start(backend)
    try:
        @ray.remote
        def work(seconds: float) -> str:
            time.sleep(seconds)
            return ray.get_runtime_context().get_node_id()

        @ray.remote
        class Where:
            def node(self) -> str:
                return ray.get_runtime_context().get_node_id()

        @ray.remote(num_cpus=0)
        class Barrier:
            def __init__(self, n: int) -> None:
                self.n, self.count = n, 0

            def arrive(self) -> None:
                self.count += 1

            def all_in(self) -> bool:
                return self.count >= self.n

        @ray.remote(num_cpus=0.5)
        def meet(barrier) -> str:
            barrier.arrive.remote()
            while not ray.get(barrier.all_in.remote()):
                time.sleep(0.005)
            return ray.get_runtime_context().get_node_id()

        ray.get([work.remote(0) for _ in range(8)])  # (workers up on both hosts)
        spans = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            ray.get([work.remote(d) for d in DURATIONS])
            spans.append(time.perf_counter() - t0)

        def per_host(nodes) -> list:
            return sorted(collections.Counter(nodes).values(), reverse=True) + [0] * (2 - len(set(nodes)))

        actors = [Where.remote() for _ in range(8)]
        default_actors = per_host(ray.get([a.node.remote() for a in actors]))
        cpu = [Where.options(num_cpus=1).remote() for _ in range(4)]
        cpu_actors = per_host(ray.get([a.node.remote() for a in cpu]))
        del actors, cpu
        barrier = Barrier.remote(8)
        spread = per_host(ray.get([meet.options(scheduling_strategy="SPREAD").remote(barrier) for _ in range(8)]))
        return {"makespan_s": statistics.median(spans), "spans": spans, "default_actors": default_actors,
                "cpu_actors": cpu_actors, "spread_tasks": spread}
    finally:
        stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["meshrt", "ray"])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--markdown")
    args = parser.parse_args()
    if args.backend:  # (the child)
        print(json.dumps(child(args.backend, args.repeat)))
        return
    results = {}
    for backend in ("meshrt", "ray"):
        out = subprocess.run([sys.executable, __file__, "--backend", backend, "--repeat", str(args.repeat)],
                             capture_output=True, text=True, timeout=600)
        lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
        if out.returncode or not lines:
            sys.exit(f"{backend} failed:\n{out.stderr[-3000:]}")
        results[backend] = json.loads(lines[-1])
    mr, ray = results["meshrt"], results["ray"]
    rows = [
        "| two hosts of 2 CPUs | meshrt | Ray | meshrt / Ray |",
        "|---|--:|--:|--:|",
        f"| 24 uneven tasks: makespan, s (ideal {IDEAL:.2f}) | {mr['makespan_s']:.2f} | {ray['makespan_s']:.2f} "
        f"| {mr['makespan_s'] / ray['makespan_s']:.2f}x |",
        f"| 8 default actors: per host | {mr['default_actors']} | {ray['default_actors']} | |",
        f"| 4 actors of 1 CPU: per host | {mr['cpu_actors']} | {ray['cpu_actors']} | |",
        f"| 8 SPREAD tasks of 0.5 CPU: per host | {mr['spread_tasks']} | {ray['spread_tasks']} | |",
    ]
    table = "\n".join(rows)
    print(table)
    print(f"(median of {args.repeat} makespans; each backend in a fresh process: python benchmarks/cluster_spread.py)")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table + "\n")


if __name__ == "__main__":
    main()
