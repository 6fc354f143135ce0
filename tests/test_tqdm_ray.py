"""Ray's distributed tqdm (``meshrt.experimental.tqdm_ray``): bars in tasks and actors
are drawn by the driver, never printed as their workers' raw output."""

from __future__ import annotations

import os

import pytest

import meshrt
from meshrt._private import progress_bars
from meshrt.experimental import tqdm_ray
from tests.helpers import wait_until


def _collect(capsys, *needles: str) -> str:
    seen = []

    def arrived():
        captured = capsys.readouterr()
        seen.append(captured.out + captured.err)
        return all(n in "".join(seen) for n in needles)

    assert wait_until(arrived, timeout=15), "".join(seen)
    return "".join(seen)


@meshrt.remote
def work(n: int, name: str) -> int:
    for _ in tqdm_ray.tqdm(range(n), desc=name, flush_interval_s=0):
        pass
    print(f"{name} finished")
    return os.getpid()


@meshrt.remote
class Stepper:
    def __init__(self, total: int) -> None:
        self.bar = tqdm_ray.tqdm(total=total, desc="steps", unit="step", flush_interval_s=0)

    def step(self) -> int:
        self.bar.update(1)
        tqdm_ray.safe_print(f"step {self.bar.n}")
        return self.bar.n

    def end(self) -> int:
        self.bar.close()
        return os.getpid()


@pytest.mark.timeout(60)
def test_a_tasks_bar_is_drawn_by_the_driver(rt, capsys):
    pids = meshrt.get([work.remote(7, "alpha"), work.remote(5, "beta")], timeout=30)
    out = _collect(capsys, f"(work pid={pids[0]}) alpha finished", f"(work pid={pids[1]}) beta finished",
                   "7/7", "5/5")
    assert progress_bars.MAGIC not in out  # (the states never reach the screen as text)
    assert f"(work pid={pids[0]}) alpha" in out and "beta" in out
    assert not progress_bars.bars().bars  # (both ended: no row is held)


@pytest.mark.timeout(60)
def test_an_actors_bar_lives_across_calls(rt, capsys):
    stepper = Stepper.remote(3)
    assert [meshrt.get(stepper.step.remote(), timeout=30) for _ in range(3)] == [1, 2, 3]
    pid = meshrt.get(stepper.end.remote(), timeout=30)
    out = _collect(capsys, f"(Stepper pid={pid}) step 3", "3/3")
    assert f"(Stepper pid={pid}) steps" in out and progress_bars.MAGIC not in out


def test_the_drivers_own_bar_and_its_checks(capsys):
    bar = tqdm_ray.tqdm(total=4, desc="local")
    bar.update(4)
    bar.close()
    assert list(tqdm_ray.tqdm(iter(range(3)))) == [0, 1, 2]  # (no len: no total)
    assert "4/4" in capsys.readouterr().err and not tqdm_ray.instance().bars
    with pytest.raises(ValueError, match="flush_interval_s"):
        tqdm_ray.tqdm(total=1, flush_interval_s=-1)
    plain = tqdm_ray.tqdm(total=1)
    with pytest.raises(TypeError, match="no iterable"):
        iter(plain).__next__()
    plain.close()


def test_bars_without_the_tqdm_package_are_lines_of_text(capsys):
    bars = progress_bars.ProgressBars()
    bars.tqdm_cls = None
    bars.update("(w pid=1) ", {"uuid": "u", "desc": "load", "x": 2, "total": 4, "unit": "file"})
    bars.update("(w pid=1) ", {"uuid": "u", "desc": "load", "x": 4, "total": 4, "unit": "file", "closed": True})
    err = capsys.readouterr().err
    assert "(w pid=1) load: 2/4 file" in err and "(w pid=1) load: 4/4 file" in err and not bars.bars
    # a line that only looks like a state is printed as it is
    assert progress_bars.take("(w) ", [progress_bars.MAGIC + "{not json", "plain"]) == [
        progress_bars.MAGIC + "{not json", "plain"]
