"""The driver's progress bars for ``meshrt.experimental.tqdm_ray`` (Ray's distributed
tqdm): tasks and actors anywhere in the cluster print their bars' state as one line
each (``MAGIC`` + JSON) on stdout; the driver takes those lines out of the workers'
output (spawn.worker_output) and draws every bar itself, one row each, so bars of
many processes neither garble one another nor the log lines printed between them.

Drawn with the ``tqdm`` package where it is installed; without it, each state that
arrives is printed as one line (``desc: n/total unit``).
"""

from __future__ import annotations

import json
import sys
import threading

MAGIC = "__meshrt_tqdm_state__ "


def state_line(state: dict) -> str:
    return MAGIC + json.dumps(state, separators=(",", ":"))


def take(source: str | None, lines: list[str]) -> list[str]:
    """The lines of a worker's output that are not bar states; the states go to the
    driver's bars (``source``: the worker's prefix, e.g. ``(work pid=12) ``; None:
    its output is not shown, nor are its bars)."""
    if not any(MAGIC in line for line in lines):
        return lines
    rest = []
    for line in lines:
        at = line.find(MAGIC)
        if at < 0:
            rest.append(line)
            continue
        try:
            state = json.loads(line[at + len(MAGIC):])
        except ValueError:
            rest.append(line)  # (not ours after all: printed as it is)
            continue
        if at:
            rest.append(line[:at])  # (printed without a newline before the state)
        if source is not None:
            bars().update(source, state)
    return rest


class _Bar:
    """One bar on the driver's terminal: a tqdm bar, or lines of text without tqdm."""

    def __init__(self, slot: int, source: str, state: dict, tqdm_cls) -> None:
        self.source = source
        self.tqdm = None
        if tqdm_cls is not None:
            self.tqdm = tqdm_cls(desc=source + state.get("desc", ""), total=state.get("total"),
                                 unit=state.get("unit", "it"), position=slot, leave=True, dynamic_ncols=True)

    def update(self, state: dict) -> None:
        bar = self.tqdm
        if bar is None:
            total = state.get("total")
            count = f"{state.get('x', 0)}/{total}" if total is not None else f"{state.get('x', 0)}"
            desc = state.get("desc", "")
            sys.stderr.write(f"{self.source}{desc + ': ' if desc else ''}{count} {state.get('unit', 'it')}\n")
            sys.stderr.flush()
            return
        desc = self.source + state.get("desc", "")
        if bar.desc != desc:
            bar.set_description(desc, refresh=False)
        if bar.total != state.get("total"):
            bar.total = state.get("total")
        x = state.get("x", 0)
        if x >= bar.n:
            bar.update(x - bar.n)
        else:
            bar.n = x
            bar.refresh()

    def close(self) -> None:
        if self.tqdm is not None:
            self.tqdm.close()


class ProgressBars:
    """Every bar the driver shows, by (worker, bar id); any thread (the core loop
    for workers' bars, the user's for the driver's own)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.bars: dict[tuple[str, str], tuple[int, _Bar]] = {}
        try:
            from tqdm import tqdm as tqdm_cls
        except ImportError:
            tqdm_cls = None
        self.tqdm_cls = tqdm_cls

    def update(self, source: str, state: dict) -> None:
        key = (source, str(state.get("uuid")))
        with self.lock:
            held = self.bars.get(key)
            if held is None:
                slot = min(set(range(len(self.bars) + 1)) - {s for s, _ in self.bars.values()})
                held = self.bars[key] = (slot, _Bar(slot, source, state, self.tqdm_cls))
            held[1].update(state)
            if state.get("closed"):
                del self.bars[key]
                held[1].close()

    def end_workers(self) -> None:
        with self.lock:
            ending = [key for key in self.bars if key[0]]
            for key in ending:
                self.bars.pop(key)[1].close()

    def writing(self, stream):
        """A context in which other output may be written without garbling the bars."""
        if self.tqdm_cls is None or not self.bars:
            return _NOTHING
        return self.tqdm_cls.external_write_mode(file=stream)


class _Nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc) -> None:
        return None


_NOTHING = _Nothing()
_bars: ProgressBars | None = None
_made = threading.Lock()


def bars() -> ProgressBars:
    global _bars
    if _bars is None:
        with _made:
            if _bars is None:
                _bars = ProgressBars()
    return _bars


def end_workers_bars() -> None:
    if _bars is not None:
        _bars.end_workers()


def writing(stream):
    """For log_options.write: around output printed while bars may be on screen."""
    return _bars.writing(stream) if _bars is not None else _NOTHING
