"""Builds meshrt._C from csrc/ (everything else is in pyproject.toml).

UCX headers come from the libucx-cu12 wheel (a build requirement) or, with
MESHRT_UCX_INCLUDE=/path/to/include, from a system UCX. libucp itself is opened at
run time (see csrc/ucx_api.h), so nothing here links against it.

CUDA: MESHRT_CUDA=1 requires a CUDA toolkit, MESHRT_CUDA=0 builds CPU-only; unset,
the CUDA sources build when a toolkit (nvcc and cuda.h) is found.
"""

import os
import shutil

from setuptools import Extension, setup


def ucx_include() -> str:
    path = os.environ.get("MESHRT_UCX_INCLUDE")
    if not path:
        try:
            import libucx
        except ImportError:
            raise SystemExit("meshrt: building meshrt._C needs UCX headers: install libucx-cu12 "
                             "or set MESHRT_UCX_INCLUDE to a UCX include directory") from None
        path = os.path.join(os.path.dirname(libucx.__file__), "include")
    if not os.path.isfile(os.path.join(path, "ucp", "api", "ucp.h")):
        raise SystemExit(f"meshrt: no ucp/api/ucp.h under {path}; set MESHRT_UCX_INCLUDE")
    return path


def cuda_home() -> str | None:
    """The CUDA toolkit to build against, or None for a CPU-only build."""
    wanted = os.environ.get("MESHRT_CUDA", "").strip()
    if wanted == "0":
        return None
    candidates = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    nvcc = shutil.which("nvcc")
    if nvcc:
        candidates.append(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))))
    candidates.append("/usr/local/cuda")
    for home in filter(None, candidates):
        if os.path.isfile(os.path.join(home, "include", "cuda.h")):
            return home
    if wanted == "1":
        raise SystemExit("meshrt: MESHRT_CUDA=1 but no CUDA toolkit found (set CUDA_HOME)")
    return None


sources = ["csrc/meshrt_c.c", "csrc/cma_copy.c", "csrc/spin_poll.c", "csrc/ucx_api.c", "csrc/ucx_transport.c"]
include_dirs = [ucx_include()]
macros = []
home = cuda_home()
if home:
    sources.append("csrc/cuda_ipc.c")
    include_dirs.append(os.path.join(home, "include"))
    macros.append(("MESHRT_WITH_CUDA", "1"))

setup(
    ext_modules=[
        Extension(
            "meshrt._C",
            sources=sources,
            include_dirs=include_dirs,
            define_macros=macros,
            libraries=["dl", "pthread"],
            extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wno-sign-compare"],
        )
    ]
)
