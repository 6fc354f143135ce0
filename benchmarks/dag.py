"""Ray's DAG API on meshrt and on Ray, side by side.

Each round runs both backends once, each in a fresh subprocess with 2 CPUs and the same
program on a chain of two actors (``second.forward(first.forward(x))``):

- ``dag.execute(x)`` + ``get`` of the chain (Ray's classic DAG);
- a diamond of three tasks, ``add(double(x), double(x + 1))``, ``execute`` + ``get``;
- ``experimental_compile()`` + the first execution;
- a compiled execution + ``get``, one at a time;
- compiled executions pipelined, 8 in flight (Ray's compiled graphs allow 10 by default);
- a 4 MiB numpy array through the compiled chain and back.

The table gives medians over rounds, and meshrt's ratio (>1: meshrt better), the median
of the ratios within each round.

    python benchmarks/dag.py [--repeat 5] [--markdown PATH]
"""

from __future__ import annotations

import os
import statistics
import time
import warnings

import _rounds
import numpy as np

BACKENDS = ("meshrt", "ray")


def _median_time(fn, seconds: float = 1.0, least: int = 20) -> float:
    times = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(times) < least:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def child(backend: str) -> dict:
    warnings.simplefilter("ignore")  # (Ray 2.60 marks DAGNode.execute() deprecated on every call)
    if backend == "meshrt":
        import meshrt as ray
        from meshrt.dag import InputNode

        ray.init(num_cpus=2)
    else:
        import ray
        from ray.dag import InputNode

        ray.init(num_cpus=2, logging_level="ERROR", include_dashboard=False)

    @ray.remote
    class Stage:
        def forward(self, x):
            return x

    @ray.remote
    def double(x):
        return 2 * x

    @ray.remote
    def add(a, b):
        return a + b

    out = {}
    try:
        first, second = Stage.remote(), Stage.remote()
        ray.get([first.forward.remote(0), second.forward.remote(0)])
        with InputNode() as inp:
            chain = second.forward.bind(first.forward.bind(inp))
        with InputNode() as inp:  # (its own input: Ray compiles all that shares one)
            diamond = add.bind(double.bind(inp[0]), double.bind(inp[1]))
        assert ray.get(chain.execute(1)) == 1 and ray.get(diamond.execute(1, 2)) == 6
        out["classic_chain_us"] = _median_time(lambda: ray.get(chain.execute(1))) * 1e6
        out["classic_diamond_us"] = _median_time(lambda: ray.get(diamond.execute(1, 2))) * 1e6
        t0 = time.perf_counter()
        compiled = chain.experimental_compile()
        assert ray.get(compiled.execute(1)) == 1
        out["compile_first_s"] = time.perf_counter() - t0
        try:
            out["compiled_chain_us"] = _median_time(lambda: ray.get(compiled.execute(1))) * 1e6
            rates = []
            for _ in range(5):
                t0 = time.perf_counter()
                for _ in range(50):
                    refs = [compiled.execute(i) for i in range(8)]
                    assert [ray.get(r) for r in refs][-1] == 7
                rates.append(400 / (time.perf_counter() - t0))
            out["compiled_pipelined_per_s"] = statistics.median(rates)
            array = np.ones(1 << 19)  # 4 MiB
            assert ray.get(compiled.execute(array)).sum() == 1 << 19
            out["compiled_4mib_ms"] = _median_time(lambda: ray.get(compiled.execute(array))) * 1e3
        finally:
            # (kill_actors: Ray 2.60's teardown otherwise waits for ever on this machine once a
            # 4 MiB array has gone through; with it, Ray kills the actors after its 30 s wait)
            compiled.teardown(kill_actors=True)
    finally:
        ray.shutdown()
    return out


ROWS = [  # key, label, higher is better, format
    ("classic_chain_us", "execute() + get, chain of 2 actors (µs)", False, "{:,.0f}"),
    ("classic_diamond_us", "execute() + get, diamond of 3 tasks (µs)", False, "{:,.0f}"),
    ("compile_first_s", "experimental_compile() + first execution (s)", False, "{:.3f}"),
    ("compiled_chain_us", "compiled execute + get, chain of 2 actors (µs)", False, "{:,.0f}"),
    ("compiled_pipelined_per_s", "compiled executions, 8 in flight (per s)", True, "{:,.0f}"),
    ("compiled_4mib_ms", "compiled, 4 MiB array through the chain (ms)", False, "{:.2f}"),
]



def main() -> None:
    _rounds.main(__doc__, os.path.abspath(__file__), BACKENDS, child, ROWS, "2 CPUs")


if __name__ == "__main__":
    main()
