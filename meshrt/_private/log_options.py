"""Where mesh processes' output goes: ``ProcMesh.logging_option(...)``, as in Monarch.

Every worker's stdout and stderr reach the driver, each line prefixed with the
worker's name (spawn.worker_output). A mesh may stop that for its processes, or
gather repeats: with ``aggregate_window_sec``, the lines its processes print within
one window are printed once per distinct text, with a count, so 64 ranks logging the
same step make one line rather than 64. (The stderr tail kept for error messages
is kept either way.)
"""

from __future__ import annotations

import sys

from . import progress_bars


class LogAggregator:
    """Lines of one window, counted by text; printed when the window closes (the
    controller's loop; one aggregator per window length)."""

    def __init__(self, loop, window_s: float) -> None:
        self.loop = loop
        self.window_s = window_s
        self.lines: dict[tuple[str, str], list] = {}  # (stream, text) -> [count, first prefix]; in order
        self.timer = None

    def add(self, stream: str, prefix: str, texts: list[str]) -> None:
        for text in texts:
            seen = self.lines.get((stream, text))
            if seen is None:
                self.lines[(stream, text)] = [1, prefix]
            else:
                seen[0] += 1
        if self.timer is None:
            self.timer = self.loop.call_later(self.window_s, self.flush)

    def flush(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        lines, self.lines = self.lines, {}
        for (stream, text), (count, prefix) in lines.items():
            head = f"[{count} similar log lines] " if count > 1 else prefix
            write(stream, [head + text])


def write(stream: str, lines: list[str]) -> None:
    target = sys.stderr if stream == "stderr" else sys.stdout
    try:
        with progress_bars.writing(target):  # (progress bars on screen are drawn again below)
            target.write("".join(line + "\n" for line in lines))
            target.flush()
    except (ValueError, OSError):  # the driver's stream was closed
        pass


class LogOptions:
    """Mixed into the Controller: the ``log_options`` request, and a flush at stop."""

    def __init__(self) -> None:
        self.log_aggregators: dict[float, LogAggregator] = {}

    def rpc_log_options(self, caller: int, actor_ids: tuple, stream: bool, window_s: float | None) -> None:
        aggregator = None
        if window_s is not None:
            aggregator = self.log_aggregators.get(window_s)
            if aggregator is None:
                aggregator = self.log_aggregators[window_s] = LogAggregator(self.loop, window_s)
        for actor_id in actor_ids:
            rec = self.actors.get(actor_id)
            w = self.workers.get(rec.worker) if rec is not None and rec.worker else None
            if w is not None:  # (none: the driver's own process, or a process gone)
                w.log_stream = stream
                w.log_aggregator = aggregator

    def flush_logs(self) -> None:
        for aggregator in self.log_aggregators.values():
            aggregator.flush()

    def end_progress_bars(self) -> None:
        """The runtime stops: bars of processes that never closed them end where they stood."""
        progress_bars.end_workers_bars()
