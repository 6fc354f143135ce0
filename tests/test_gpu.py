"""On a machine with a CUDA GPU (``pytest -m gpu``; skipped elsewhere): each mesh
process gets its own GPU, NCCL comes up under ``init_torch_distributed``, DDP on the
GPU trains as on the CPU, and CUDA memory moves between processes through CUDA IPC and
UCX. Written for one GPU; the tests that need two say so and skip on one."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")

import meshrt  # noqa: E402
from meshrt import Actor, endpoint, this_host  # noqa: E402
from meshrt.tensor import TensorBuffer  # noqa: E402

from .helpers import run_python  # noqa: E402
from .test_mesh_distributed import _data, _model, _train  # noqa: E402
from .test_tensor import CudaPeer, pattern  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module", autouse=True)
def cuda_started_before_the_leak_check():
    """CUDA's context keeps pipes of its own open in this process from its first use."""
    torch.zeros(1, device="cuda")


def _gpu_count() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


class GpuProbe(Actor):
    @endpoint
    def seen(self):
        return {"visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "count": torch.cuda.device_count(),
                "gpu_ids": meshrt.get_gpu_ids()}

    @endpoint
    def nccl(self):
        import torch.distributed as dist

        mesh = meshrt.device_mesh()
        t = torch.full((4,), float(dist.get_rank() + 1), device="cuda")
        dist.all_reduce(t)
        world = dist.get_world_size()
        return {"backend": dist.get_backend(), "device_type": mesh.device_type,
                "dims": mesh.mesh_dim_names, "sum": t.cpu().tolist(), "world": world,
                "device": torch.cuda.current_device()}

    @endpoint
    def ddp(self, steps):
        from torch.nn.parallel import DistributedDataParallel

        x, y = _data()
        model = DistributedDataParallel(_model().cuda())
        losses = _train(model, x.cuda(), y.cuda(), steps)
        return losses, [p.detach().cpu() for p in model.module.parameters()]

    @endpoint
    def triple(self, t):
        assert t.is_cuda
        return t * 3


def test_each_mesh_process_sees_its_own_gpu():
    meshrt.init()
    assert meshrt.cluster_resources().get("GPU") == _gpu_count()
    procs = this_host().spawn_procs(per_host={"gpus": _gpu_count()})
    seen = list(procs.spawn("probe", GpuProbe).seen.call().get(timeout=120).values())
    assert [s["count"] for s in seen] == [1] * _gpu_count()
    assert sorted(s["visible"] for s in seen) == [str(i) for i in range(_gpu_count())]
    assert all(s["gpu_ids"] == [int(s["visible"])] for s in seen)


def test_more_gpus_than_the_host_has_is_refused_by_name():
    meshrt.init()
    with pytest.raises(ValueError, match="lower the 'gpus' size"):
        this_host().spawn_procs(per_host={"gpus": _gpu_count() + 1})


def test_a_task_asking_for_a_gpu_runs_on_one():
    meshrt.init()

    @meshrt.remote(num_gpus=1)
    def where():
        return os.environ["CUDA_VISIBLE_DEVICES"], torch.cuda.device_count(), float(torch.ones(3).cuda().sum())

    visible, count, total = meshrt.get(where.remote(), timeout=120)
    assert visible in {str(i) for i in range(_gpu_count())} and count == 1 and total == 3.0


def test_nccl_comes_up_with_a_cuda_device_mesh():
    meshrt.init()
    procs = this_host().spawn_procs(per_host={"gpus": _gpu_count()})
    assert procs.init_torch_distributed().get(timeout=180) == "nccl"
    out = list(procs.spawn("probe", GpuProbe).nccl.call().get(timeout=120).values())
    n = _gpu_count()
    total = float(n * (n + 1) // 2)
    for o in out:
        assert o == {"backend": "nccl", "device_type": "cuda", "dims": ("gpus",), "sum": [total] * 4,
                     "world": n, "device": 0}


def test_ddp_on_the_gpu_matches_training_on_the_cpu():
    meshrt.init()
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    procs.init_torch_distributed().get(timeout=180)
    losses, params = procs.spawn("probe", GpuProbe).ddp.call_one(5).get(timeout=180)
    x, y = _data()
    model = _model()
    expected = _train(model, x, y, 5)
    assert losses == pytest.approx(expected, rel=1e-4, abs=1e-6)
    for got, want in zip(params, model.parameters(), strict=True):
        torch.testing.assert_close(got, want.detach(), rtol=1e-4, atol=1e-6)


def test_a_cuda_tensor_goes_to_an_actor_and_back():
    meshrt.init()
    peer = this_host().spawn_procs(per_host={"gpus": 1}).spawn("probe", GpuProbe)
    t = pattern(1 << 20, torch.float32).cuda()
    back = peer.triple.call_one(t).get(timeout=120)
    assert back.is_cuda and torch.equal(back.cpu(), (t * 3).cpu())


def test_a_cuda_tensor_put_comes_back_on_the_gpu():
    meshrt.init()
    t = pattern(1 << 20, torch.float32).cuda()
    back = meshrt.get(meshrt.put(t), timeout=60)
    assert back.is_cuda and torch.equal(back.cpu(), t.cpu())


@pytest.mark.parametrize("path", ["auto", "ucx"])
def test_a_driver_owned_gpu_buffer_read_and_written_by_a_mesh_process(monkeypatch, path):
    """One GPU: the driver owns the CUDA memory, a mesh process on the same GPU reads it
    into its GPU and its CPU and writes it back (CUDA IPC, or UCX when asked)."""
    if path == "ucx":
        monkeypatch.setenv("MESHRT_TENSOR_TRANSPORT", "ucx")
    meshrt.init()
    peer = this_host().spawn_procs(per_host={"gpus": 1}).spawn("peer", CudaPeer)
    n = 1 << 22
    t = pattern(n, torch.float32).cuda()
    buf = TensorBuffer(t)
    assert buf.device.startswith("cuda")
    first = peer.roundtrip.call_one(buf).get(timeout=120)
    assert torch.equal(first, pattern(n, torch.float32))
    torch.cuda.synchronize()
    assert torch.equal(t.cpu(), pattern(n, torch.float32) * 2)
    del buf


_FORKED_ZYGOTE = """
import torch, meshrt
from meshrt._private import spawn
assert not spawn._gpu_driver_started()  # import torch loads the driver's libraries, unstarted
meshrt.init()

@meshrt.remote(num_gpus=1)
def count():
    return torch.cuda.device_count()

print(meshrt.get(count.remote(), timeout=120))
torch.cuda.is_available()
print(spawn._gpu_driver_started())  # the next init's zygote: a fresh interpreter
meshrt.shutdown()
"""


def test_workers_fork_from_a_driver_that_imported_torch_but_not_after_cuda_started():
    """Forking the zygote from the driver is fast; after the driver started CUDA (even
    just torch.cuda.is_available()) the children would ignore CUDA_VISIBLE_DEVICES."""
    done = run_python(_FORKED_ZYGOTE, 150)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "True"], done.stdout
