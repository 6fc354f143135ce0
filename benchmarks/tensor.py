#!/usr/bin/env python
"""Tensor movement benchmarks: meshrt TensorBuffer beside this machine's limits,
Monarch's RDMABuffer and torch.distributed gloo send/recv, in one run.

    python benchmarks/tensor.py                      # everything, 3 repetitions
    python benchmarks/tensor.py --suite meshrt-host --repeat 1
    python benchmarks/tensor.py --markdown benchmarks/results/tensor.md

Each suite runs in fresh child processes (``--child SUITE``), ``--repeat`` times;
the table shows medians over repetitions of per-repetition medians.

Suites:
  * limits: single-thread memcpy (numpy.copyto, 64 MiB, pages already touched) and
    TCP loopback bulk (one socket between two processes, 4 MiB writes, 256 MiB).
  * meshrt-host: owner and reader are two processes of one host mesh; ``await
    buf.read_into(dst)`` / ``write_from(src)`` timed in the reader, dst reused.
  * meshrt-agents: the same between two host agents (``meshrt agent`` processes on
    this machine, each its own host). Both are on one machine, so meshrt takes the
    same-machine path (cross-memory attach), as it would between two agents in one
    box.
  * meshrt-ucx: two agents again, with MESHRT_TENSOR_TRANSPORT=ucx: UCX over tcp
    loopback, the path between machines without RDMA.
  * monarch: ``RDMABuffer`` between two processes of a Monarch proc mesh
    (``monarch.configure(rdma_allow_tcp_fallback=True)``: no RDMA NIC here).
  * gloo: ``torch.distributed`` send/recv between two processes, gloo over loopback.
Latency rows are medians of single transfers; GB/s = bytes / median time.
Not measured yet: the GPU rows (device-to-device, device-to-host, NCCL send/recv),
which need a GPU machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _benchlib as bl  # noqa: E402

perf = time.perf_counter
KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
SIZES = [4 * KIB, 64 * KIB, MIB, 16 * MIB, 64 * MIB, 256 * MIB, GIB]
SUITES = ["limits", "meshrt-host", "meshrt-agents", "meshrt-ucx", "monarch", "gloo"]
BIG = [s for s in SIZES if s >= 64 * MIB]


def _rounds(size: int) -> tuple[float, int]:
    """(minimum seconds, minimum rounds) per size: small sizes many times, 1 GiB thrice."""
    return (0.5, 200) if size <= MIB else (0.5, 5) if size <= 64 * MIB else (0.0, 3)


def size_name(n: int) -> str:
    return f"{n // GIB} GiB" if n >= GIB else f"{n // MIB} MiB" if n >= MIB else f"{n // KIB} KiB"


# -- limits --------------------------------------------------------------------------------

def run_limits() -> dict:
    import numpy as np

    src = np.random.randint(0, 255, 64 * MIB, dtype=np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    times = []
    for _ in range(20):
        t0 = perf()
        np.copyto(dst, src)
        times.append(perf() - t0)
    out = {"memcpy_gbs": 64 * MIB / statistics.median(times) / 1e9}
    out["tcp_gbs"] = _tcp_bulk(256 * MIB)
    return out


def _tcp_bulk(total: int) -> float:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    code = (f"import socket\ns = socket.create_connection(('127.0.0.1', {port}))\n"
            f"b = bytearray(4 << 20)\nfor _ in range(4):\n    left = {total}\n"
            "    while left:\n        left -= s.recv_into(b, min(len(b), left))\n"
            "    s.sendall(b'k')\n")
    child = subprocess.Popen([sys.executable, "-c", code])
    conn, _ = listener.accept()
    chunk = memoryview(bytearray(4 << 20))
    rates = []
    for _ in range(4):
        t0 = perf()
        for _ in range(total // len(chunk)):
            conn.sendall(chunk)
        conn.recv(1)
        rates.append(total / (perf() - t0) / 1e9)
    child.wait()
    conn.close()
    listener.close()
    return statistics.median(rates[1:])


# -- meshrt --------------------------------------------------------------------------------

def _meshrt_classes():
    import torch

    from meshrt import Actor, endpoint
    from meshrt.tensor import TensorBuffer

    class Owner(Actor):
        def __init__(self, nbytes):
            self.t = torch.ones(nbytes, dtype=torch.uint8)
            self.buf = TensorBuffer(self.t)

        @endpoint
        def handle(self):
            return self.buf

    class Reader(Actor):
        @endpoint
        async def measure(self, buf, sizes):
            out = {}
            dst = torch.zeros(buf.nbytes, dtype=torch.uint8)
            for size in sizes:
                view = dst[:size]
                min_time, min_rounds = _rounds(size)
                for op, run in (("read", lambda v=view: buf.read_into(v)),
                                ("write", lambda v=view: buf.write_from(v))):
                    await run()  # warm: endpoint, mappings
                    lat = []
                    end = perf() + min_time
                    while len(lat) < min_rounds or perf() < end:
                        t0 = perf()
                        await run()
                        lat.append(perf() - t0)
                    out[f"{op}_{size}"] = statistics.median(lat)
            return out

    return Owner, Reader


async def run_meshrt(where: str) -> dict:
    import meshrt
    from meshrt import this_host

    Owner, Reader = _meshrt_classes()
    agents = []
    try:
        if where == "host":
            procs = this_host().spawn_procs(per_host={"procs": 2})
            owner_procs, reader_procs = procs.slice(procs=0), procs.slice(procs=1)
        else:
            if where == "ucx":
                os.environ["MESHRT_TENSOR_TRANSPORT"] = "ucx"
            meshrt.init(address="127.0.0.1:0")
            address = meshrt._private.state.core().controller.tcp_address.removeprefix("tcp:")
            agents = [_start_agent(address) for _ in range(2)]
            hosts = meshrt.hosts(min_hosts=2, timeout=60)
            procs = hosts.spawn_procs(per_host={"procs": 1})
            owner_procs, reader_procs = procs.slice(hosts=0), procs.slice(hosts=1)
        owner = owner_procs.spawn("owner", Owner, max(SIZES))
        reader = reader_procs.spawn("reader", Reader)
        buf = await owner.handle.call_one()
        return await reader.measure.call_one(buf, SIZES)
    finally:
        meshrt.shutdown()
        for agent in agents:
            agent.terminate()
            agent.wait()


def _start_agent(address: str):
    return subprocess.Popen([sys.executable, "-m", "meshrt", "agent", "--address", address,
                             "--object-store-memory", str(256 << 20)], stderr=subprocess.DEVNULL)


# -- monarch -------------------------------------------------------------------------------

async def run_monarch() -> dict:
    import warnings

    import monarch
    import torch
    from monarch.actor import Actor, endpoint, this_host
    from monarch.rdma import RDMABuffer

    monarch.configure(rdma_allow_tcp_fallback=True)
    warnings.simplefilter("ignore")

    class Owner(Actor):
        def __init__(self, nbytes):
            import warnings

            warnings.simplefilter("ignore")
            self.t = torch.ones(nbytes, dtype=torch.uint8)
            self.buf = RDMABuffer(self.t)

        @endpoint
        def handle(self):
            return self.buf

    class Reader(Actor):
        @endpoint
        async def measure(self, buf, sizes):
            out = {}
            dst = torch.zeros(max(sizes), dtype=torch.uint8)
            for size in sizes:
                view = dst[:size]
                min_time, min_rounds = _rounds(size)
                await buf.read_into(view)
                lat = []
                end = perf() + min_time
                while len(lat) < min(min_rounds, 50) or perf() < end:
                    t0 = perf()
                    await buf.read_into(view)
                    lat.append(perf() - t0)
                out[f"read_{size}"] = statistics.median(lat)
            return out

    procs = this_host().spawn_procs(per_host={"procs": 2})
    # Monarch's RDMABuffer reads exactly buf.size() bytes: one buffer per size.
    reader = procs.slice(procs=1).spawn("reader", Reader)
    out = {}
    for i, size in enumerate(SIZES):
        owner = procs.slice(procs=0).spawn(f"owner{i}", Owner, size)
        buf = await owner.handle.call_one()
        out.update(await reader.measure.call_one(buf, [size]))
    return out


# -- gloo ----------------------------------------------------------------------------------

_GLOO_RANK = """
import os, statistics, sys, time, json, torch, torch.distributed as dist
rank = int(sys.argv[1])
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + sys.argv[2], rank=rank, world_size=2)
sizes = json.loads(sys.argv[3]); out = {}
buf = torch.ones(max(sizes), dtype=torch.uint8)
for size in sizes:
    view = buf[:size]
    rounds = 200 if size <= (1 << 20) else 5 if size <= (64 << 20) else 3
    lat = []
    for i in range(rounds + 1):
        dist.barrier()
        t0 = time.perf_counter()
        if rank == 0:
            dist.send(view, 1)
        else:
            dist.recv(view, 0)
        dist.barrier()
        if i:
            lat.append(time.perf_counter() - t0)
    out["read_" + str(size)] = statistics.median(lat)
if rank == 1:
    print(json.dumps(out))
dist.destroy_process_group()
"""


def run_gloo() -> dict:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sizes = json.dumps(SIZES)
    procs = [subprocess.Popen([sys.executable, "-c", _GLOO_RANK, str(r), str(port), sizes],
                              stdout=subprocess.PIPE, text=True) for r in (0, 1)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    return json.loads(outs[1].strip().splitlines()[-1])


# -- parent / child ------------------------------------------------------------------------

def child(suite: str, out_path: str) -> None:
    if suite == "limits":
        result = run_limits()
    elif suite.startswith("meshrt-"):
        result = asyncio.run(run_meshrt(suite.split("-", 1)[1]))
    elif suite == "monarch":
        result = asyncio.run(run_monarch())
    else:
        result = run_gloo()
    with open(out_path, "w") as f:
        json.dump(result, f)
    os._exit(0)  # Monarch's runtime threads would keep a clean exit waiting


def parent(args) -> dict:
    report = {"command": " ".join(["python", "benchmarks/tensor.py", *sys.argv[1:]]),
              "machine": bl.machine_info(), "args": vars(args), "suites": {}, "versions": {}}
    for name in ("meshrt", "torchmonarch", "torch"):
        report["versions"][name] = bl.lib_version(name)
    for suite in args.suite:
        runs = []
        for rep in range(args.repeat):
            out = f"/tmp/tensor-bench-{os.getpid()}-{suite}-{rep}.json"
            log(f"{suite} repetition {rep + 1}/{args.repeat}")
            env = dict(os.environ, MESHRT_TOKEN=os.urandom(16).hex())
            proc = subprocess.run([sys.executable, __file__, "--child", suite, "--json-out", out],
                                  timeout=args.timeout, stdout=sys.stderr, env=env)
            if proc.returncode != 0 or not os.path.exists(out):
                log(f"{suite} failed (exit {proc.returncode})")
                continue
            with open(out) as f:
                runs.append(json.load(f))
            os.unlink(out)
        report["suites"][suite] = runs
    return report


def log(msg: str) -> None:
    sys.stderr.write(f"[tensor {time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


def medians(report: dict, suite: str) -> dict:
    runs = report["suites"].get(suite) or []
    keys = {k for r in runs for k in r}
    return {k: statistics.median([r[k] for r in runs if k in r]) for k in keys}


def rows(report: dict) -> tuple[list[str], list[list[str]]]:
    m = {s: medians(report, s) for s in SUITES}
    lim = m["limits"]
    memcpy, tcp = lim.get("memcpy_gbs"), lim.get("tcp_gbs")

    def gbs(suite, op, size):
        t = m[suite].get(f"{op}_{size}")
        return size / t / 1e9 if t else None

    header = ["read_into", "meshrt same host", "meshrt 2 agents", "meshrt 2 agents, UCX tcp",
              "Monarch RDMABuffer", "gloo send/recv", "meshrt write_from same host / UCX tcp"]
    out = [["limits (GB/s)", f"memcpy {_f(memcpy)}", f"TCP bulk {_f(tcp)}", "", "", "", ""]]
    for size in SIZES:
        cells = [_f(gbs(s, "read", size)) for s in ("meshrt-host", "meshrt-agents", "meshrt-ucx", "monarch", "gloo")]
        w = f"{_f(gbs('meshrt-host', 'write', size))} / {_f(gbs('meshrt-ucx', 'write', size))}"
        out.append([f"{size_name(size)} (GB/s)", *cells, w])
    lat = [m[s].get(f"read_{4 * KIB}") for s in ("meshrt-host", "meshrt-agents", "meshrt-ucx", "monarch", "gloo")]
    wlat = (m["meshrt-host"].get(f"write_{4 * KIB}"), m["meshrt-ucx"].get(f"write_{4 * KIB}"))
    out.append(["4 KiB latency (us)", *[_f(v * 1e6 if v else None) for v in lat],
                " / ".join(_f(v * 1e6 if v else None) for v in wlat)])
    return header, out


def targets(report: dict) -> list[list[str]]:
    m = {s: medians(report, s) for s in SUITES}
    memcpy, tcp = m["limits"].get("memcpy_gbs"), m["limits"].get("tcp_gbs")

    def worst(suite, base=None, other=None):
        vals = []
        for size in BIG:
            t = m[suite].get(f"read_{size}")
            if t is None:
                return None
            rate = size / t / 1e9
            if other is not None:
                o = m[other].get(f"read_{size}")
                if o is None:
                    return None
                vals.append(o / t)
            else:
                vals.append(rate / base if base else None)
        return min(vals) if vals and None not in vals else None

    def row(label, value, need, text, lower=False):
        ok = value is not None and (value <= need if lower else value >= need)
        mark = "-" if value is None else ("✅" if ok else "❌")
        return [label, _f(value), text, mark]

    lat = m["meshrt-host"].get(f"read_{4 * KIB}")
    mon_sizes = [s for s in SIZES if m["monarch"].get(f"read_{s}")]
    vs_monarch = min((m["monarch"][f"read_{s}"] / m["meshrt-host"][f"read_{s}"] for s in mon_sizes
                      if m["meshrt-host"].get(f"read_{s}")), default=None)
    return [
        row("same host, 64 MiB+ read_into / single-thread memcpy (worst size)", worst("meshrt-host", memcpy),
            0.7, ">= 0.7x"),
        row("two agents, UCX over tcp, 64 MiB+ / TCP bulk limit (worst size)", worst("meshrt-ucx", tcp), 0.7,
            ">= 0.7x"),
        row("two agents, meshrt's own path (same machine), 64 MiB+ / TCP bulk limit", worst("meshrt-agents", tcp),
            0.7, ">= 0.7x (for reference)"),
        row("meshrt same host vs Monarch RDMABuffer, every size (worst)", vs_monarch, 5, ">= 5x"),
        row("meshrt same host vs gloo send/recv, 64 MiB+ (worst)", worst("meshrt-host", other="gloo"), 2,
            ">= 2x"),
        row("4 KiB read_into latency, same host (us)", lat * 1e6 if lat else None, 50, "<= 50 us", lower=True),
    ]


def _f(v) -> str:
    if v is None:
        return "-"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:,.2f}" if abs(v) >= 1 else f"{v:.3f}"


def render(report: dict) -> str:
    header, body = rows(report)
    lines = [" | ".join(header)] + [" | ".join(r) for r in body] + ["", "target | value | need | ok"]
    lines += [" | ".join(r) for r in targets(report)]
    return "\n".join(lines)


def markdown(report: dict) -> str:
    header, body = rows(report)
    mi = report["machine"]
    v = report["versions"]
    lines = [f"Command: `{report['command']}`", "",
             f"- Date: {mi['date']}",
             f"- Machine: {mi['cores']} cores ({mi['cpu']}), {mi['mem_gib']} GiB RAM, {mi['platform']}",
             f"- Python {mi['python']}; meshrt {v['meshrt']}, torchmonarch {v['torchmonarch']}, torch {v['torch']}",
             f"- Method: medians over {report['args']['repeat']} fresh child process(es) per suite; "
             "see the docstring of benchmarks/tensor.py", "",
             "| " + " | ".join(header) + " |", "|---" + "|--:" * (len(header) - 1) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in body]
    lines += ["", "| target | value | need | met |", "|---|--:|---|---|"]
    lines += ["| " + " | ".join(r).replace(">=", "≥").replace("<=", "≤") + " |" for r in targets(report)]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", action="append", choices=SUITES)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--json", default=os.path.join(HERE, "results", "tensor.json"))
    p.add_argument("--markdown", nargs="?", const=os.path.join(HERE, "results", "tensor.md"))
    p.add_argument("--child", choices=SUITES, help=argparse.SUPPRESS)
    p.add_argument("--json-out", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.child, args.json_out)
        return
    args.suite = args.suite or list(SUITES)
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
