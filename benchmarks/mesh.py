#!/usr/bin/env python
"""Actor-mesh benchmarks: meshrt vs Monarch (vs Ray's closest loop), same code.

    python benchmarks/mesh.py                          # meshrt, monarch, ray; 3 repeats
    python benchmarks/mesh.py --backend meshrt --repeat 1
    python benchmarks/mesh.py --markdown benchmarks/results/mesh.md

Each round runs each backend once, one after the other, in a fresh child process
(``benchmarks/mesh.py --child --backend X``); ratios are taken within a round and
the table shows their median and range. meshrt and Monarch run the very
same Monarch-style code (``from meshrt import Actor, endpoint, this_host`` or
``from monarch.actor import ...``); Ray runs the closest equivalent: a list of
actors, ``.remote()`` on each and ``ray.get``/``await`` on the refs.

Method:
  * spawn 4 processes + first call: in the fresh child, from the first runtime
    call (meshrt/Monarch: ``this_host().spawn_procs(per_host={"gpus": 4})``,
    Ray: ``ray.init()`` then 4 actors) until the first reply of a call to all 4.
  * call_one round trip: ``await one.ping.call_one()`` (awaited) and
    ``one.ping.call_one().get()`` (blocking) on a 1-actor slice; median latency
    over >= 1 s and >= 200 calls. Ray: ``await a.ping.remote()`` / ``ray.get``.
  * pipelined calls/s: 2000 ``call_one()`` issued, then all awaited.
  * call across 4 / 8 actors: ``await mesh.ping.call()`` (gathers a ValueMesh);
    median latency. Ray: ``ray.get([a.ping.remote() for a in actors])``.
  * 8 MiB echo: ``echo(b)`` of an 8 MiB ``bytes`` through one actor, median time.
  * 32 MiB tensor round trip: ``echo(t)`` of a 32 MiB float32 torch tensor, GB/s
    = 32 MiB / round-trip time, median.
  * meshrt alone: call to N actors (4, 8, 16, 32) on this host, and over 1, 2 and 4
    host agents (``meshrt agent`` processes on this machine, each its own host with
    its own store), N/A processes per agent; median call latency.
Endpoints are plain ``def`` (Monarch refuses to mix sync and async endpoints).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _benchlib as bl  # noqa: E402

perf = time.perf_counter
MIB = 1 << 20
BACKENDS = ("meshrt", "monarch", "ray")

# key, label, higher_is_better, target factor vs Monarch, target text
METRICS = [
    ("spawn4_s", "spawn 4 processes + first call (s)", False, 5.0, ">= 5x faster"),
    ("call_one_await_us", "awaited call_one round trip (us)", False, 4.0, ">= 4x faster"),
    ("call_one_block_us", "blocking call_one round trip (us)", False, 3.0, ">= 3x faster"),
    ("pipelined_per_s", "pipelined calls/s (2000)", True, 4.0, ">= 4x"),
    ("call4_ms", "call across 4 actors (ms)", False, 3.0, ">= 3x faster"),
    ("call8_ms", "call across 8 actors (ms)", False, 3.0, ">= 3x faster"),
    ("echo8_ms", "8 MiB echo (ms)", False, 4.0, ">= 4x faster"),
    ("tensor32_gbs", "32 MiB tensor round trip (GB/s)", True, 5.0, ">= 5x"),
]
SCALING = [4, 8, 16, 32]
AGENTS = [1, 2, 4]


# -- the actor, identical for meshrt and Monarch ------------------------------------------

def _actor_class(Actor, endpoint):
    class Echo(Actor):
        @endpoint
        def ping(self):
            return 1

        @endpoint
        def echo(self, x):
            return x

    return Echo


def _latency(fn, min_time=1.0, min_rounds=200):
    return statistics.median(bl.latency_rounds(fn, min_time, min_rounds))


async def _alatency(coro_fn, min_time=1.0, min_rounds=200):
    lat = []
    end = perf() + min_time
    while len(lat) < min_rounds or perf() < end:
        t0 = perf()
        await coro_fn()
        lat.append(perf() - t0)
    return statistics.median(lat)


async def run_mesh(backend: str, scaling: bool) -> dict:
    import torch

    if backend == "meshrt":
        from meshrt import Actor, endpoint, this_host
    else:
        from monarch.actor import Actor, endpoint, this_host
    Echo = _actor_class(Actor, endpoint)
    out: dict = {}
    t0 = perf()
    if backend == "meshrt" and scaling:
        import meshrt

        meshrt.init(address="127.0.0.1:0")  # listen for the agents of the scaling rows
    procs = this_host().spawn_procs(per_host={"gpus": 4})
    mesh = procs.spawn("echo", Echo)
    await mesh.ping.call()
    out["spawn4_s"] = perf() - t0
    one = mesh.slice(gpus=0)
    await one.ping.call_one()
    out["call_one_await_us"] = await _alatency(lambda: one.ping.call_one()) * 1e6
    out["call_one_block_us"] = await asyncio.to_thread(_latency, lambda: one.ping.call_one().get()) * 1e6
    rates = []
    for _ in range(3):
        t0 = perf()
        futures = [one.ping.call_one() for _ in range(2000)]
        for f in futures:
            await f
        rates.append(2000 / (perf() - t0))
    out["pipelined_per_s"] = statistics.median(rates)
    out["call4_ms"] = await _alatency(lambda: mesh.ping.call()) * 1e3
    procs8 = this_host().spawn_procs(per_host={"gpus": 8})
    mesh8 = procs8.spawn("echo8", Echo)
    await mesh8.ping.call()
    out["call8_ms"] = await _alatency(lambda: mesh8.ping.call()) * 1e3
    blob = os.urandom(8 * MIB)
    assert await one.echo.call_one(blob) == blob
    out["echo8_ms"] = await _alatency(lambda: one.echo.call_one(blob), 1.0, 20) * 1e3
    t = torch.randn(8 * MIB)  # 32 MiB float32
    assert torch.equal(await one.echo.call_one(t), t)
    out["tensor32_gbs"] = 32 * MIB / await _alatency(lambda: one.echo.call_one(t), 1.0, 20) / 1e9
    await procs8.stop()
    await procs.stop()
    if scaling:
        out.update(await _scaling(Echo))
    return out


async def _scaling(Echo) -> dict:
    """meshrt alone: a call to N actors, on this host and over A agents (A hosts)."""
    import meshrt

    out = {}
    for n in SCALING:
        pn = this_host_procs(n)
        mn = pn.spawn(f"scale{n}", Echo)
        await mn.ping.call()
        out[f"scale_{n}_0_ms"] = await _alatency(lambda mn=mn: mn.ping.call(), 1.0, 50) * 1e3
        await pn.stop()
    address = meshrt._private.state.core().controller.tcp_address.removeprefix("tcp:")
    agents = []
    try:
        for n_agents in AGENTS:
            while len(agents) < n_agents:
                agents.append(_start_agent(address))
                meshrt.hosts(min_hosts=len(agents), timeout=60)
            hosts = meshrt.hosts(min_hosts=n_agents).slice(hosts=slice(0, n_agents))
            for n in SCALING:
                if n < n_agents:
                    continue
                pn = hosts.spawn_procs(per_host={"gpus": n // n_agents})
                mn = pn.spawn(f"agents{n_agents}x{n}", Echo)
                await mn.ping.call()
                out[f"scale_{n}_{n_agents}_ms"] = await _alatency(lambda mn=mn: mn.ping.call(), 1.0, 50) * 1e3
                await pn.stop()
    finally:
        for agent in agents:
            agent.terminate()
    return out


def _start_agent(address: str):
    """A host agent process on this machine (its own zygote and store: another host)."""
    import subprocess

    return subprocess.Popen([sys.executable, "-m", "meshrt", "agent", "--address", address,
                             "--object-store-memory", str(256 << 20)], stderr=subprocess.DEVNULL)


def this_host_procs(n: int):
    from meshrt import this_host

    return this_host().spawn_procs(per_host={"gpus": n})


async def run_ray() -> dict:
    import ray
    import torch

    @ray.remote
    class Echo:
        def ping(self):
            return 1

        def echo(self, x):
            return x

    out: dict = {}
    t0 = perf()
    ray.init(num_cpus=4, log_to_driver=False)
    actors = [Echo.options(num_cpus=0).remote() for _ in range(4)]
    await asyncio.gather(*[a.ping.remote() for a in actors])
    out["spawn4_s"] = perf() - t0
    one = actors[0]
    out["call_one_await_us"] = await _alatency(lambda: one.ping.remote()) * 1e6
    out["call_one_block_us"] = await asyncio.to_thread(_latency, lambda: ray.get(one.ping.remote())) * 1e6
    rates = []
    for _ in range(3):
        t0 = perf()
        refs = [one.ping.remote() for _ in range(2000)]
        await asyncio.gather(*refs)
        rates.append(2000 / (perf() - t0))
    out["pipelined_per_s"] = statistics.median(rates)
    out["call4_ms"] = await _alatency(lambda: asyncio.gather(*[a.ping.remote() for a in actors])) * 1e3
    eight = [Echo.options(num_cpus=0).remote() for _ in range(8)]
    await asyncio.gather(*[a.ping.remote() for a in eight])
    out["call8_ms"] = await _alatency(lambda: asyncio.gather(*[a.ping.remote() for a in eight])) * 1e3
    blob = os.urandom(8 * MIB)
    out["echo8_ms"] = await _alatency(lambda: one.echo.remote(blob), 1.0, 20) * 1e3
    t = torch.randn(8 * MIB)
    out["tensor32_gbs"] = 32 * MIB / await _alatency(lambda: one.echo.remote(t), 1.0, 20) / 1e9
    ray.shutdown()
    return out


def child(backend: str, json_out: str, scaling: bool) -> None:
    if backend == "ray":
        result = asyncio.run(run_ray())
    else:
        result = asyncio.run(run_mesh(backend, scaling))
    with open(json_out, "w") as f:
        json.dump(result, f)
    sys.stdout.flush()
    os._exit(0)  # Monarch keeps background threads; do not wait for them


def version(backend: str) -> str | None:
    return bl.lib_version({"monarch": "torchmonarch"}.get(backend, backend))


def parent(args) -> dict:
    """Repetitions interleave the backends (meshrt, monarch, ray, meshrt, ...), so each
    round's runs are close in time and a ratio is taken within a round: this machine's
    speed drifts by tens of percent over minutes."""
    report = {"command": "python benchmarks/mesh.py " + " ".join(sys.argv[1:]), "machine": bl.machine_info(),
              "args": {"repeat": args.repeat, "quick": False}, "backends": {}}
    for backend in args.backend:
        report["backends"][backend] = {"version": version(backend), "runs": [],
                                       "runs_meta": [{"cpu_busy_before_pct": bl.foreign_cpu_busy()}]}
    for rep in range(args.repeat):
        for backend in args.backend:
            out = os.path.join("/tmp", f"mesh-bench-{os.getpid()}-{backend}-{rep}.json")
            cmd = [sys.executable, __file__, "--child", "--backend", backend, "--json-out", out]
            env = dict(os.environ, MESHRT_TOKEN=os.urandom(16).hex())  # for the agents
            if backend == "meshrt" and rep < args.scaling_rounds:
                cmd.append("--scaling")
            busy = bl.wait_until_idle()  # the previous backend's processes may still be exiting
            bl_log(f"round {rep + 1}/{args.repeat}: {backend} (CPU busy before: {busy}%)")
            proc = subprocess.run(cmd, timeout=args.timeout, stdout=sys.stderr, env=env)
            if proc.returncode != 0 or not os.path.exists(out):
                bl_log(f"{backend} failed (exit {proc.returncode})")
                continue
            with open(out) as f:
                run = json.load(f)
            os.unlink(out)
            run["round"] = rep
            if busy is not None:
                run["cpu_busy_before_pct"] = busy
            report["backends"][backend]["runs"].append(run)
    return report


def round_ratios(report: dict, key: str, higher: bool) -> list[float]:
    """meshrt's improvement over Monarch in each round where both ran."""
    by_round = {}
    for backend in ("meshrt", "monarch"):
        for run in report["backends"].get(backend, {}).get("runs") or []:
            if key in run and "round" in run:
                by_round.setdefault(run["round"], {})[backend] = run[key]
    ratios = []
    for pair in by_round.values():
        mine, theirs = pair.get("meshrt"), pair.get("monarch")
        if mine and theirs:
            ratios.append(mine / theirs if higher else theirs / mine)
    return ratios


def bl_log(msg: str) -> None:
    sys.stderr.write(f"[mesh {time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


def medians(report: dict, backend: str) -> dict:
    runs = report["backends"].get(backend, {}).get("runs") or []
    keys = {k for r in runs for k in r}
    return {k: statistics.median([r[k] for r in runs if k in r]) for k in keys}


def rows(report: dict) -> tuple[list[str], list[list[str]]]:
    m = {b: medians(report, b) for b in report["backends"]}
    header = ["metric", "meshrt", "monarch", "ray", "meshrt vs monarch, median of rounds (range)", "target"]
    out = []
    for key, label, higher, target, text in METRICS:
        vals = [m.get(b, {}).get(key) for b in BACKENDS]
        per_round = round_ratios(report, key, higher)
        r = statistics.median(per_round) if per_round else None
        if r is None and vals[0] and vals[1]:  # a report from before rounds were paired
            r = vals[0] / vals[1] if higher else vals[1] / vals[0]
        mark = "" if r is None else (" [ok]" if r >= target else " [MISS]")
        cell = "-" if r is None else bl.ratio_text(r)
        if len(per_round) > 1:
            cell += f" ({min(per_round):.2f}-{max(per_round):.2f})"
        out.append([label] + [_fmt(v) for v in vals] + [cell, text + mark])
    mine = m.get("meshrt", {})
    base = mine.get("scale_4_1_ms")
    for where, n_agents in [("this host", 0)] + [(f"{a} agent(s)", a) for a in AGENTS]:
        for n in SCALING:
            v = mine.get(f"scale_{n}_{n_agents}_ms")
            if v is None:
                continue
            target = "-"
            if (n, n_agents) == (32, 4) and base:
                target = "<= 3x the 4 actors / 1 agent latency" + (" [ok]" if v / base <= 3 else " [MISS]")
            out.append([f"meshrt alone: call to {n} actors over {where} (ms)", _fmt(v), "-", "-",
                        f"{v / base:.2f}x (4 actors, 1 agent)" if base else "-", target])
    return header, out


def _fmt(v) -> str:
    if v is None:
        return "-"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:,.2f}" if abs(v) >= 1 else f"{v:.3f}"


def render(report: dict) -> str:
    header, body = rows(report)
    widths = [max(len(header[i]), *(len(r[i]) for r in body)) for i in range(len(header))]
    lines = [" | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("-+-".join("-" * w for w in widths))
    lines += [" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in body]
    return "\n".join(lines)


def markdown(report: dict) -> str:
    header, body = rows(report)
    mi = report["machine"]
    versions = ", ".join(f"{b} {report['backends'][b]['version']}" for b in report["backends"])
    lines = [f"Command: `{report['command']}`", "",
             f"- Date: {mi['date']}",
             f"- Machine: {mi['cores']} cores ({mi['cpu']}), {mi['mem_gib']} GiB RAM, {mi['platform']}",
             f"- Python: {mi['python']}; {versions}",
             f"- Method: {report['args']['repeat']} rounds, each running every backend once in a fresh "
             "child process; values are medians over rounds, the ratio (>1 = meshrt better) is the "
             "median of the ratios within each round; see the docstring of benchmarks/mesh.py", "",
             "| " + " | ".join(header) + " |", "|---|--:|--:|--:|--:|---|"]
    for r in body:
        lines.append("| " + " | ".join(c.replace(">=", "≥").replace("[ok]", "✅").replace("[MISS]", "❌")
                                       for c in r) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", action="append", choices=BACKENDS)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--timeout", type=float, default=300)
    p.add_argument("--json", default=os.path.join(HERE, "results", "mesh.json"))
    p.add_argument("--markdown", nargs="?", const=os.path.join(HERE, "results", "mesh.md"))
    p.add_argument("--scaling-rounds", type=int, default=1,
                   help="rounds that also measure meshrt's scaling rows (their median is shown)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--json-out", help=argparse.SUPPRESS)
    p.add_argument("--scaling", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.backend[0], args.json_out, args.scaling)
        return
    args.backend = args.backend or list(BACKENDS)
    report = parent(args)
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(report, f, indent=1)
    print(render(report))
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown(report))


if __name__ == "__main__":
    main()
