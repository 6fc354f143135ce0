"""Worker output reaches the driver, prefixed with who printed it."""

from __future__ import annotations

import sys

import meshrt
from tests.helpers import wait_until


def _collect(capsys, needle: str) -> str:
    seen = []

    def arrived():
        captured = capsys.readouterr()
        seen.append(captured.out + captured.err)
        return needle in "".join(seen)

    wait_until(arrived, timeout=10)
    return "".join(seen)


def test_worker_output_is_prefixed(rt, capsys):
    @meshrt.remote
    class Talker:
        def say(self, text):
            import os

            print(text)
            print("oops", file=sys.stderr)
            return os.getpid()

    pid = meshrt.get(Talker.remote().say.remote("hello from the actor"))
    out = _collect(capsys, f"(Talker pid={pid}) oops")
    assert f"(Talker pid={pid}) hello from the actor" in out

    @meshrt.remote
    def shout():
        import os

        print("task speaking")
        return os.getpid()

    pid = meshrt.get(shout.remote())
    assert f"(shout pid={pid}) task speaking" in _collect(capsys, "task speaking")


def test_log_to_driver_false_keeps_output_away(capsys):
    meshrt.init(num_cpus=1, log_to_driver=False)

    @meshrt.remote
    def noisy():
        print("should not appear")
        return 1

    @meshrt.remote
    def marker():
        return 2

    assert meshrt.get(noisy.remote()) == 1
    assert meshrt.get(marker.remote()) == 2
    meshrt.shutdown()  # closes the pipes: anything forwarded would be written by now
    captured = capsys.readouterr()
    assert "should not appear" not in captured.out + captured.err
