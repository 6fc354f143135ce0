"""The README's main job: ``python examples/quickstart.py`` runs to its end (it walks
the whole tour, so an API change that breaks the tour fails here, not for a user)."""

from __future__ import annotations

import os

import pytest

from .helpers import run_python

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.timeout(300)
def test_the_quickstart_runs_to_its_end():
    script = os.path.join(ROOT, "examples", "quickstart.py")
    done = run_python(f"import runpy, sys; sys.argv = [{script!r}]; runpy.run_path({script!r}, run_name='__main__')",
                      timeout=240, env=dict(os.environ))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "fault tolerance" in done.stdout and "restarted in a new process" in done.stdout
    assert "shutdown: every worker exits with the driver" in done.stdout
