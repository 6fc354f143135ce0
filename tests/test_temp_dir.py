"""``init(_temp_dir=...)`` (Ray's argument): the session's logs, its spilled objects and
its unpacked packages go under that directory instead of the system's temp dir (a small
or shared ``/tmp``); the setting ends with the session."""

from __future__ import annotations

import os

import numpy as np
import pytest

import meshrt
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(120)

MiB = 1 << 20


@meshrt.remote
def say(text):
    print(text)
    return os.environ.get("MESHRT_TEMP_DIR")


def _files_under(path) -> list[str]:
    return [os.path.join(d, name) for d, _, names in os.walk(path) for name in names]


def test_a_sessions_logs_spills_and_packages_go_under_its_temp_dir(tmp_path):
    root = tmp_path / "big disk"
    work = tmp_path / "work"
    work.mkdir()
    (work / "shipped.py").write_text("VALUE = 7\n")
    assert "MESHRT_TEMP_DIR" not in os.environ
    meshrt.init(num_cpus=1, object_store_memory=64 * MiB, _temp_dir=str(root),
                runtime_env={"working_dir": str(work)})
    try:
        assert meshrt.get(say.remote("kept in the session's log")) == str(root)  # (its workers inherit it)
        session = meshrt.get_runtime_context().get_temp_dir()
        assert session.startswith(str(root / "meshrt-sessions" / "session_"))
        logs = os.path.join(session, "logs")

        def logged():
            for path in _files_under(logs):
                with open(path) as f:
                    if "kept in the session's log" in f.read():
                        return True
            return False

        assert wait_until(logged, timeout=30)
        refs = [meshrt.put(np.full(2 * MiB, i, dtype=np.float64)) for i in range(6)]  # 96 MiB: spills
        spilled = [p for p in os.listdir(root) if p.startswith("meshrt-spill-")]
        assert spilled and _files_under(root / spilled[0])
        assert [float(meshrt.get(r)[0]) for r in refs] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
        assert any(p.startswith("meshrt-env-") for p in os.listdir(root))  # (the working_dir, unpacked)
    finally:
        meshrt.shutdown()
    assert "MESHRT_TEMP_DIR" not in os.environ  # (the next session's is the default again)


@pytest.mark.parametrize("bad, says", [("relative/dir", "absolute"), ("FILE", "cannot make")])
def test_a_temp_dir_that_cannot_be_used_is_named(tmp_path, bad, says):
    if bad == "FILE":
        (tmp_path / "a file").write_text("")
        bad = str(tmp_path / "a file" / "below")
    with pytest.raises(ValueError, match=f"_temp_dir.*{says}"):
        meshrt.init(num_cpus=1, _temp_dir=bad)
    assert not meshrt.is_initialized() and "MESHRT_TEMP_DIR" not in os.environ
