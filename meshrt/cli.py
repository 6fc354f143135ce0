"""``meshrt`` on the command line (also ``python -m meshrt``).

    meshrt start --head [--port N] [--host H] [--block]     a long-running head; drivers attach with init(address="auto")
    meshrt stop                                              end this host's head
    meshrt agent --address HEAD:PORT [--token-file PATH]   join a cluster as a host
    meshrt status --address HEAD:PORT [--token-file PATH]  hosts, actors, object store
    meshrt list actors|workers|tasks|objects|runtime-envs --address HEAD:PORT [--filter FIELD=VALUE] [--limit N]
    meshrt timeline --address HEAD:PORT [--output PATH]     tasks and calls as a Chrome trace
    meshrt logs [FILE | --actor-id ID | --task-id ID | --pid PID] --address HEAD:PORT [--err] [--tail N] [--follow]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys

DEFAULT_PORT = 6380


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="meshrt", description="meshrt command line")
    sub = parser.add_subparsers(dest="command", required=True)
    agent = sub.add_parser("agent", help="run this host's agent: join the head and serve its meshes")
    agent.add_argument("--address", help="the head's HOST:PORT (meshrt.init(address=...)); under SLURM "
                       f"the first host of the job and port {DEFAULT_PORT} by default")
    agent.add_argument("--token-file", help="file holding the cluster token (else $MESHRT_TOKEN, "
                       "$MESHRT_TOKEN_FILE, or ~/.meshrt/cluster_token)")
    agent.add_argument("--name", help="this host's name in the cluster (default: host name and pid)")
    agent.add_argument("--num-cpus", type=float, help="CPUs to offer (default: all)")
    agent.add_argument("--num-gpus", type=int, help="GPUs to offer (default: all visible)")
    agent.add_argument("--object-store-memory", type=int, help="bytes for this host's object store")
    agent.add_argument("--resources", help="custom resources to offer, as JSON (as ray start's): "
                       "'{\"trainer\": 2}'")
    agent.add_argument("--labels", help="this node's labels, as JSON (as ray start's): '{\"zone\": \"us-east1\"}'; "
                       "tasks and actors pick nodes by them with label_selector=")
    agent.add_argument("--connect-timeout", type=float, default=None,
                       help="seconds to keep trying to reach a head that is not listening yet (default: 300)")
    start = sub.add_parser("start", help="start a long-running head on this host (as `ray start --head`): "
                           "drivers attach to it with meshrt.init(address='auto'), hosts join with meshrt agent")
    start.add_argument("--head", action="store_true", required=True, help="start the head (other hosts: meshrt agent)")
    start.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"where agents join (default {DEFAULT_PORT})")
    start.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1; "
                       "0.0.0.0 for every interface, so that other hosts can join)")
    start.add_argument("--num-cpus", type=float, help="CPUs to offer (default: all)")
    start.add_argument("--num-gpus", type=int, help="GPUs to offer (default: all visible)")
    start.add_argument("--object-store-memory", type=int, help="bytes for this host's object store")
    start.add_argument("--resources", help="custom resources to offer, as JSON: '{\"trainer\": 2}'")
    start.add_argument("--labels", help="this node's labels, as JSON: '{\"zone\": \"us-east1\"}'")
    start.add_argument("--block", action="store_true", help="run the head in this process until Ctrl-C")
    start.add_argument("--temp-dir", help="where the head's processes keep their logs, spills and unpacked packages "
                                          "(an absolute path; default: $MESHRT_TEMP_DIR, else the system's temp dir)")
    sub.add_parser("stop", help="stop this host's long-running head (and the cluster's processes with it)")
    status = sub.add_parser("status", help="print a running cluster's hosts, actors and object store")
    status.add_argument("--address", help="the driver's HOST:PORT (meshrt.init(address=...))")
    status.add_argument("--token-file", help="file holding the cluster token (as for agent)")
    listing = sub.add_parser("list", help="list a running cluster's actors, workers, tasks, objects or runtime envs "
                             "(as `ray list`)")
    listing.add_argument("kind", choices=["actors", "workers", "tasks", "objects", "runtime-envs"])
    listing.add_argument("--address", help="the driver's HOST:PORT (meshrt.init(address=...))")
    listing.add_argument("--token-file", help="file holding the cluster token (as for agent)")
    listing.add_argument("--filter", action="append", default=[], metavar="FIELD=VALUE",
                         help="keep rows whose FIELD is VALUE (FIELD!=VALUE: is not); repeatable")
    listing.add_argument("--limit", type=int, default=100, help="at most this many rows (default 100)")
    trace = sub.add_parser("timeline", help="write the tasks and actor calls that ran in a running cluster "
                           "as a Chrome trace (as `ray timeline`)")
    trace.add_argument("--address", help="the driver's HOST:PORT (meshrt.init(address=...))")
    trace.add_argument("--token-file", help="file holding the cluster token (as for agent)")
    trace.add_argument("--output", help="where to write it (default: meshrt-timeline-DATE.json in the temp dir)")
    logs = sub.add_parser("logs", help="list the workers' log files, or print one (as `ray logs`)")
    logs.add_argument("filename", nargs="?", help="a log file's name (as listed); none: list them")
    logs.add_argument("--actor-id", help="the log of this actor's process")
    logs.add_argument("--task-id", help="the log of the process that ran this task")
    logs.add_argument("--pid", type=int, help="the log of the worker with this pid")
    logs.add_argument("--err", action="store_true", help="its stderr (default: stdout)")
    logs.add_argument("--tail", type=int, default=1000, help="the last N lines (-1: all; default 1000)")
    logs.add_argument("--follow", action="store_true", help="keep printing new lines until the process ends")
    logs.add_argument("--address", help="the driver's HOST:PORT (meshrt.init(address=...))")
    logs.add_argument("--token-file", help="file holding the cluster token (as for agent)")
    sub.add_parser("debug", help="attach this terminal to a breakpoint() waiting in a task or actor on this host "
                   "(as `ray debug`)")
    args = parser.parse_args(argv)
    if args.command == "agent":
        return run_agent(args)
    if args.command == "start":
        return run_start(args)
    if args.command == "stop":
        from ._private import head

        return head.stop()
    if args.command == "status":
        return run_status(args)
    if args.command == "list":
        return run_list(args)
    if args.command == "timeline":
        return run_timeline(args)
    if args.command == "logs":
        return run_logs(args)
    if args.command == "debug":
        from ._private import debug_client

        return debug_client.main()
    return 2


def _token(args) -> bytes | None:
    token, _source = _token_and_source(args)
    return token


def _token_and_source(args) -> tuple[bytes | None, str]:
    from ._private import cluster_token

    source = cluster_token.source(args.token_file)
    if source is None and os.path.exists(cluster_token.DEFAULT_FILE):
        source = cluster_token.DEFAULT_FILE
    return (None, "") if source is None else (cluster_token.read(source), source)


def run_status(args) -> int:
    from ._private.status import render

    answer = _ask(args, "status", "cluster_status")
    if isinstance(answer, int):
        return answer
    print(render(answer))
    return 0


def run_list(args) -> int:
    from .util.state.table import render_rows, row_filters

    try:
        filters = row_filters(args.filter, args.kind)
    except ValueError as err:
        print(f"meshrt list: {err}", file=sys.stderr)
        return 2
    rows = _ask(args, "list", "state_" + args.kind.replace("-", "_"))
    if isinstance(rows, int):
        return rows
    try:
        print(render_rows(args.kind, rows, filters, args.limit))
    except ValueError as err:
        print(f"meshrt list: {err}", file=sys.stderr)
        return 2
    return 0


def run_timeline(args) -> int:
    import tempfile
    import time

    from ._private.timeline import chrome_events

    processes = _ask(args, "timeline", "timeline")
    if isinstance(processes, int):
        return processes
    path = args.output or os.path.join(tempfile.gettempdir(),
                                       time.strftime("meshrt-timeline-%Y-%m-%d_%H-%M-%S.json"))
    events = chrome_events(processes)
    try:
        with open(path, "w") as f:
            json.dump(events, f)
    except OSError as err:
        print(f"meshrt timeline: cannot write {path}: {err}; give --output PATH", file=sys.stderr)
        return 1
    calls = sum(e["ph"] == "X" for e in events)
    print(f"{calls} calls written to {path}: open it in chrome://tracing or https://ui.perfetto.dev")
    return 0


def run_logs(args) -> int:
    import threading

    picked = [(how, key) for how, key in (("filename", args.filename), ("actor_id", args.actor_id),
                                          ("task_id", args.task_id), ("pid", args.pid)) if key is not None]
    if len(picked) > 1:
        print("meshrt logs: give one of FILE, --actor-id, --task-id or --pid", file=sys.stderr)
        return 2
    if not picked:
        files = _ask(args, "logs", "log_files")
        if isinstance(files, int):
            return files
        for name, node, _worker, pid in sorted(files, key=lambda f: (f[1], f[0])):
            print(f"{node[:8]}  pid {pid}  {name}")
        return 0
    how, key = picked[0]
    answer = _ask(args, "logs", "log_lines", how, key, "err" if args.err else "out", args.tail, None)
    pause = threading.Event()
    while not isinstance(answer, int):
        name, lines, offset, alive = answer
        for line in lines:
            print(line, flush=args.follow)
        if not (args.follow and alive):
            return 0
        pause.wait(0.5)  # (then ask for what came since, in that file)
        answer = _ask(args, "logs", "log_lines", "filename", name, "err" if args.err else "out", -1, offset)
    return answer


def _ask(args, command: str, method: str, *request):
    """The controller's answer to ``method``, or the exit code after saying what went wrong."""
    from ._private import cluster_file, slurm
    from ._private.control_client import request_once

    address = args.address or slurm.head_address(DEFAULT_PORT)
    head = cluster_file.read() if not address else None  # (this host's long-running head: meshrt start)
    address = address or (head["address"] if head is not None else None)
    if not address:
        print(f"meshrt {command}: give --address HOST:PORT of a driver that called "
              "meshrt.init(address=...)", file=sys.stderr)
        return 2
    try:
        token = _token(args) or (cluster_file.token(head) if head is not None else None)
    except ValueError as err:
        print(f"meshrt {command}: {err}", file=sys.stderr)
        return 2
    if token is None:
        print(f"meshrt {command}: no cluster token: set MESHRT_TOKEN or pass --token-file", file=sys.stderr)
        return 2

    async def ask():
        return await asyncio.wait_for(request_once("tcp:" + address.removeprefix("tcp:"), token, method, request), 30)

    try:
        response = asyncio.run(ask())
    except Exception as err:  # noqa: BLE001 - one clear line
        print(f"meshrt {command}: cannot ask {address}: {err}", file=sys.stderr)
        return 1
    if not response.ok:
        print(f"meshrt {command}: {response.value}", file=sys.stderr)
        return 1
    return response.value


def _custom_resources(text: str | None) -> dict | None:
    """``--resources`` as a dict of name -> amount; bad input is named."""
    if text is None:
        return None
    try:
        table = json.loads(text)
    except ValueError as err:
        raise ValueError(f"--resources {text!r} is not JSON ({err}); e.g. --resources '{{\"trainer\": 2}}'") \
            from None
    if not isinstance(table, dict):
        raise ValueError(f"--resources {text!r}: give a JSON object of name -> amount, e.g. '{{\"trainer\": 2}}'")
    for name, flag in (("CPU", "--num-cpus"), ("GPU", "--num-gpus"), ("object_store_memory", "--object-store-memory")):
        if name in table:
            raise ValueError(f"--resources {text!r}: use {flag} for {name}")
    from .scheduler.resources import validate_request

    validate_request(table, "--resources")
    return table


def _node_labels(text: str | None) -> dict:
    """``--labels`` as a dict of str to str; bad input is named."""
    from ._private import labels

    if text is None:
        return {}
    try:
        table = json.loads(text)
    except ValueError as err:
        raise ValueError(f"--labels {text!r} is not JSON ({err}); e.g. --labels '{{\"zone\": \"us-east1\"}}'") \
            from None
    return labels.node_labels(table, "--labels")


def run_start(args) -> int:
    from ._private import head, temp_root

    try:
        resources = _custom_resources(args.resources)
        node_labels = _node_labels(args.labels)
        if args.temp_dir is not None:  # (the head's process and all it starts inherit it)
            os.environ[temp_root.ENV] = temp_root.checked(args.temp_dir, "--temp-dir")
    except (TypeError, ValueError) as err:
        print(f"meshrt start: {err}", file=sys.stderr)
        return 2
    options = {"address": f"{args.host}:{args.port}", "num_cpus": args.num_cpus, "num_gpus": args.num_gpus,
               "object_store_memory": args.object_store_memory, "resources": resources or None,
               "labels": node_labels or None}
    return head.start({k: v for k, v in options.items() if v is not None}, args.block)


def run_agent(args) -> int:
    from ._private import cluster_token, slurm, spin
    from ._private.agent import CONNECT_TIMEOUT_S, Agent, default_name
    from ._private.driver import _node_resources

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    address = args.address or slurm.head_address(DEFAULT_PORT)
    if not address:
        print("meshrt agent: give --address HEAD:PORT (the address the driver passed to "
              "meshrt.init(address=...))", file=sys.stderr)
        return 2
    if ":" not in address:
        address = f"{address}:{DEFAULT_PORT}"
    try:
        spin.limit_ns()
        token, source = _token_and_source(args)
    except ValueError as err:
        print(f"meshrt agent: {err}", file=sys.stderr)
        return 2
    if token is None:
        print("meshrt agent: no cluster token: set MESHRT_TOKEN or pass --token-file (the driver "
              f"writes one to {cluster_token.DEFAULT_FILE} when it generates it)", file=sys.stderr)
        return 2
    try:
        resources = _node_resources(args.num_cpus, args.num_gpus, _custom_resources(args.resources),
                                    args.object_store_memory)
    except (TypeError, ValueError) as err:
        print(f"meshrt agent: {err}", file=sys.stderr)
        return 2
    try:
        node_labels = _node_labels(args.labels)
    except (TypeError, ValueError) as err:
        print(f"meshrt agent: {err}", file=sys.stderr)
        return 2
    name = args.name or slurm.node_name() or default_name()
    agent = Agent("tcp:" + address.removeprefix("tcp:"), token, name, resources,
                  int(resources["object_store_memory"]), token_source=source,
                  connect_timeout=CONNECT_TIMEOUT_S if args.connect_timeout is None else args.connect_timeout,
                  labels=node_labels)
    try:
        # uvloop, as in every other meshrt process: the agent relays every message of
        # its host, and the default loop's Python transports cost several times more.
        return _run(agent.run())
    except KeyboardInterrupt:
        return 130
    except Exception as err:  # noqa: BLE001 - a clear line instead of a traceback
        print(f"meshrt agent: {err}", file=sys.stderr)
        return 1


def _run(coro):
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on POSIX
        return asyncio.run(coro)
    return uvloop.run(coro)


if __name__ == "__main__":
    sys.exit(main())
