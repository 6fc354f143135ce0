"""``HostMesh.with_python_executable(path)``, as Monarch's: processes spawned from that
host mesh run ``path`` (another virtual environment's Python, say) instead of the
driver's interpreter, and so do the processes they spawn on their own hosts.

The host's zygote forks the worker as usual, then the child executes ``path -m
meshrt._private.worker`` (zygote.py) with the worker's descriptors and environment; meshrt
must be importable by that interpreter. ``MESHRT_PYTHON`` in a process's environment
is the interpreter it was started with, which its own ``this_host()`` passes on.
"""

from __future__ import annotations

import os

ENV = "MESHRT_PYTHON"


def checked(path) -> str:
    """``path`` as an absolute path to an executable file, or a clear error."""
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise TypeError(f"with_python_executable({path!r}): give the path of a Python interpreter")
    path = os.path.abspath(os.fspath(path))
    if not os.path.isfile(path) or not os.access(path, os.X_OK):
        raise ValueError(f"with_python_executable({path!r}): no executable file there; give the path of a "
                         f"Python interpreter (one that can import meshrt)")
    return path


def inherited() -> str:
    """The interpreter this process was started with by a with_python_executable mesh ('' if none)."""
    return os.environ.get(ENV, "")
