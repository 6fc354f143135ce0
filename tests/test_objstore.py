"""The shared-memory object store: zero-copy, reference counting, pins, spilling."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import meshrt
from meshrt._private import state
from meshrt.exceptions import ObjectLostError, TaskCancelledError
from tests.helpers import gate, wait_until

MiB = 1 << 20


def store():
    return state.core().controller.store


def used():
    core = state.core()
    core.flush_frees()
    store().drain_unpins()
    return store().usage()["used"]


@pytest.fixture
def small_store():
    meshrt.init(num_cpus=2, object_store_memory=64 * MiB)
    yield
    meshrt.shutdown()


@meshrt.remote
class Reader:
    def keep(self, box):
        self.view = meshrt.get(box[0])
        return True

    def first(self):
        return float(self.view[0])

    def drop(self):
        self.view = None
        return True

    def pid(self):
        return os.getpid()


def test_large_values_live_once_in_shared_memory(rt):
    data = np.random.rand(4 * MiB // 8)
    ref = meshrt.put(data)
    payload = state.core().table.entries[ref._id].payload
    assert payload.shm is not None and payload.shm[1] >= data.nbytes
    small = meshrt.put(np.zeros(10))
    assert state.core().table.entries[small._id].payload.shm is None  # small: inline
    out = meshrt.get(ref)
    assert np.array_equal(out, data) and not out.flags.writeable


def test_readers_in_two_processes_map_the_same_pages(rt):
    # Zero-copy, proven through the memory itself: after both readers hold views,
    # a write into the stored block (from the store's own mapping) shows in both.
    ref = meshrt.put(np.zeros(MiB // 8))
    a, b = Reader.remote(), Reader.remote()
    assert meshrt.get([a.keep.remote([ref]), b.keep.remote([ref])])
    key, _, layout, _ = state.core().table.entries[ref._id].payload.shm
    offset, _ = store().pin(key, 0)
    shared, _ = store().arena._mapping()
    np.frombuffer(shared, dtype=np.float64, count=1, offset=offset + layout[0][0])[0] = 42.0
    store().unpin(key, 0)
    assert meshrt.get([a.first.remote(), b.first.remote()]) == [42.0, 42.0]


def test_gets_of_one_object_share_a_mapping_while_one_lives(rt):
    torch = pytest.importorskip("torch")
    before = used()
    ref = meshrt.put(np.ones(4 * MiB // 8))
    first, second = meshrt.get(ref), meshrt.get(ref)
    assert np.shares_memory(first, second)  # (its pages are mapped once: as Ray's readers share the store's)
    del first, second
    assert meshrt.get(ref).sum() == 4 * MiB // 8  # (mapped afresh once none lives)
    mixed = meshrt.put({"array": np.ones(MiB // 8), "tensor": torch.ones(MiB // 4)})
    one, two = meshrt.get(mixed), meshrt.get(mixed)
    one["tensor"] += 1  # (a tensor may be written: a value with one keeps a mapping of its own)
    assert float(two["tensor"].sum()) == MiB // 4 and not np.shares_memory(one["array"], two["array"])
    del ref, mixed, one, two
    assert wait_until(lambda: used() == before, 10)  # (every pin went back)


def test_refcount_frees_memory(rt):
    baseline = used()
    refs = [meshrt.put(np.ones(MiB)) for _ in range(5)]
    assert used() >= baseline + 5 * 8 * MiB
    views = [meshrt.get(r) for r in refs]
    del refs
    assert used() > baseline  # views pin the blocks
    del views
    assert wait_until(lambda: used() == baseline, timeout=5)


def test_task_results_and_arguments_use_shared_memory(rt):
    @meshrt.remote
    def make(n):
        return np.arange(n, dtype=np.int64)

    @meshrt.remote
    def total(x):
        return int(x.sum()), x.flags.writeable

    baseline = used()
    ref = make.remote(MiB)
    assert state.core().get([ref], 30)[0].shape == (MiB,)
    assert meshrt.get(total.remote(ref)) == (MiB * (MiB - 1) // 2, False)
    big = np.ones(2 * MiB // 8)
    assert meshrt.get(total.remote(big)) == (2 * MiB // 8, False)  # a large argument
    del ref
    assert wait_until(lambda: used() == baseline, timeout=5)


def test_spill_and_restore_bit_exact(small_store):
    arrays = [np.random.default_rng(i).random(2 * MiB) for i in range(10)]  # 10 x 16 MiB
    refs = [meshrt.put(a) for a in arrays]  # more than the 64 MiB store holds
    usage = store().usage()
    assert usage["spills"] >= 6 and usage["spilled_objects"] >= 6
    for ref, original in zip(refs, arrays, strict=True):
        view = meshrt.get(ref)
        assert np.array_equal(view, original)
        del view
    assert store().usage()["restores"] >= 6
    summary = meshrt.memory_summary()
    assert "spilled" in summary and "shared memory" in summary


def test_object_larger_than_the_store_goes_to_disk_and_comes_back(small_store):
    """Ray's fallback allocation: a value the shared memory cannot hold is written to a
    file of the spill directory, and readers map that file."""
    @meshrt.remote
    def total(x):
        return float(x.sum()), x.flags.writeable

    data = np.random.default_rng(0).random(80 * MiB // 8)
    ref = meshrt.put(data)
    assert store().usage()["fallback_allocations"] == 1
    view = meshrt.get(ref)
    assert np.array_equal(view, data) and not view.flags.writeable
    assert meshrt.get(total.remote(ref)) == (float(data.sum()), False)  # another process maps it too
    path = store().objects[state.core().table.entries[ref._id].payload.shm[0]].spill_path
    del ref, view
    assert wait_until(lambda: not os.path.exists(path), timeout=10)


def test_with_pinned_views_filling_the_store_new_values_go_to_disk(small_store):
    views = [meshrt.get(meshrt.put(np.full(16 * MiB // 8, i, dtype=np.float64))) for i in range(3)]
    ref = meshrt.put(np.full(20 * MiB // 8, 7.0))  # no room left in shared memory
    assert meshrt.get(ref)[-1] == 7.0 and store().usage()["fallback_allocations"] == 1
    assert [v[0] for v in views] == [0.0, 1.0, 2.0]


def test_getting_a_working_set_larger_than_the_store(small_store):
    """Every value mapped at once: those that cannot come back into shared memory are
    read from their spilled files (Ray returns them all too)."""
    refs = [meshrt.put(np.full(16 * MiB, i, dtype=np.uint8)) for i in range(8)]  # 128 MiB
    values = meshrt.get(refs)
    assert [(int(v[0]), int(v[-1])) for v in values] == [(i, i) for i in range(8)]


def test_dropped_views_make_room_for_the_next_allocation_at_once(small_store):
    """A worker's allocation right after the driver let go of a view reuses its block
    (the driver's unpins were applied up to 50 ms late, and the value went to disk)."""

    @meshrt.remote
    def make():
        return np.ones(40 * MiB, dtype=np.uint8)

    for _ in range(5):
        ref = meshrt.put(np.zeros(40 * MiB, dtype=np.uint8))
        view = meshrt.get(ref)
        del ref, view
        assert int(meshrt.get(make.remote())[0]) == 1
    assert store().usage()["fallback_allocations"] == 0


def test_deleted_spill_file_surfaces_object_lost(small_store):
    refs = [meshrt.put(np.full(2 * MiB, i, dtype=np.float64)) for i in range(6)]
    spilled = [r for r in refs if store().objects[state.core().table.entries[r._id].payload.shm[0]].spill_path]
    assert spilled
    victim = spilled[0]
    path = store().objects[state.core().table.entries[victim._id].payload.shm[0]].spill_path
    os.unlink(path)
    with pytest.raises(ObjectLostError, match="spilled copy"):
        meshrt.get(victim)
    assert meshrt.get(refs[-1])[0] == 5  # the store keeps serving


def test_ref_borrowed_through_three_processes(rt):
    @meshrt.remote
    class Relay:
        def __init__(self, nxt=None):
            self.nxt = nxt

        def hold(self, box):
            self.box = box
            if self.nxt is not None:
                return meshrt.get(self.nxt.hold.remote(box))
            return float(meshrt.get(box[0]).sum())

        def release(self):
            self.box = None
            if self.nxt is not None:
                return meshrt.get(self.nxt.release.remote())
            return True

    last = Relay.remote()
    middle = Relay.remote(last)
    first = Relay.remote(middle)
    baseline = used()
    ref = meshrt.put(np.ones(MiB))
    assert meshrt.get(first.hold.remote([ref])) == MiB
    del ref
    core = state.core()
    core.flush_frees()
    assert used() > baseline  # still borrowed three processes away
    assert meshrt.get(first.release.remote())
    assert wait_until(lambda: used() == baseline, timeout=10)


def test_pins_of_a_killed_reader_are_released(rt):
    ref = meshrt.put(np.ones(MiB))
    key = state.core().table.entries[ref._id].payload.shm[0]
    r = Reader.remote()
    assert meshrt.get(r.keep.remote([ref]))
    assert wait_until(lambda: store().objects[key].pins, timeout=5)
    os.kill(meshrt.get(r.pid.remote()), signal.SIGKILL)
    assert wait_until(lambda: not store().objects[key].pins, timeout=10)
    baseline_without = used() - 8 * MiB
    del ref
    assert wait_until(lambda: used() == baseline_without, timeout=5)


def test_torch_tensors_all_dtypes_copy_on_write(rt):
    torch = pytest.importorskip("torch")

    @meshrt.remote
    class Trainer:
        def scale(self, t):
            t *= 2  # writes to a received tensor stay private
            return t

        def echo(self, t):
            return t

    trainer = Trainer.remote()
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int8,
                  torch.int64, torch.bool, torch.complex64, torch.uint8):
        source = (torch.arange(300_000) % 7).to(dtype)
        back = meshrt.get(trainer.echo.remote(source))
        assert back.dtype == dtype and torch.equal(back, source), dtype
    weights = torch.ones(1 << 18)
    ref = meshrt.put(weights)
    doubled = meshrt.get(trainer.scale.remote(ref))
    assert float(doubled.sum()) == 2 * (1 << 18)
    stored = meshrt.get(ref)
    assert float(stored.sum()) == 1 << 18  # the stored object never changed
    stored += 1  # a writable, private copy-on-write view
    assert float(meshrt.get(ref).sum()) == 1 << 18
    transposed = torch.arange(1 << 18, dtype=torch.float32).reshape(512, 512).t()
    assert torch.equal(meshrt.get(meshrt.put(transposed)), transposed)
    param = torch.nn.Parameter(torch.ones(1 << 16))
    back = meshrt.get(meshrt.put(param))
    assert isinstance(back, torch.nn.Parameter) and back.requires_grad


def test_available_resources_report_store(rt):
    before = meshrt.available_resources()["object_store_memory"]
    assert before <= meshrt.cluster_resources()["object_store_memory"]  # (never more than the total)
    ref = meshrt.put(np.zeros(MiB))
    assert meshrt.available_resources()["object_store_memory"] <= before - 8 * MiB
    assert meshrt.cluster_resources()["object_store_memory"] > 0
    del ref


def test_full_shared_memory_falls_back_to_disk_and_a_full_disk_is_a_clear_error(tmp_path):
    # Real full filesystems: 32 MiB tmpfs in a private mount namespace (they vanish with
    # the process) back a 256 MiB store, and a 48 MiB spill directory. A put must go
    # to disk or raise, never SIGBUS.
    script = tmp_path / "full.py"
    script.write_text(textwrap.dedent('''
        import os, numpy as np, meshrt
        from meshrt.exceptions import ObjectStoreFullError
        meshrt.init(num_cpus=1, object_store_memory=256 << 20, object_spilling_directory=os.environ["SPILL"])
        small = meshrt.put(np.ones(1 << 20))  # 8 MiB fits
        big = meshrt.put(np.full(4 << 20, 2.0))  # 32 MiB does not: to the spill directory
        print("ON DISK", float(meshrt.get(big)[-1]))
        try:
            meshrt.put(np.zeros(4 << 20))  # nor does another 32 MiB
        except ObjectStoreFullError as err:
            print("CLEAN", err)
        print("STILL SERVING", float(meshrt.get(small).sum()), float(meshrt.get(big).sum()))
        meshrt.shutdown()
    '''))
    shm_dir, spill_dir = tmp_path / "tinyshm", tmp_path / "tinyspill"
    shm_dir.mkdir()
    spill_dir.mkdir()
    shell = (f"mount -t tmpfs -o size=32m tmpfs {shm_dir} && mount -t tmpfs -o size=48m tmpfs {spill_dir} "
             f"|| exit 77; MESHRT_STORE_DIR={shm_dir} SPILL={spill_dir} exec {sys.executable} {script}")
    try:
        out = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", shell],
                             capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        pytest.skip("unshare is not available to make a small tmpfs")
    if out.returncode == 77 or "unshare failed" in out.stderr or "Operation not permitted" in out.stderr:
        pytest.skip("no permission to mount a small tmpfs in a private namespace")
    assert "ON DISK 2.0" in out.stdout, out.stdout + out.stderr
    assert "CLEAN" in out.stdout and "spill directory" in out.stdout and "free disk space" in out.stdout, out.stdout
    assert f"STILL SERVING 1048576.0 {2.0 * (4 << 20)}" in out.stdout, out.stdout


def test_bytes_bytearray_memoryview_and_containers(rt):
    blob = os.urandom(4 * MiB)
    value = {
        "bytes": blob,
        "bytearray": bytearray(blob[:MiB]),
        "memoryview": memoryview(blob[: 2 * MiB]),
        "floats": memoryview(np.arange(1000, dtype=np.float64)),
        "nested": [blob[:MiB], {"array": np.ones(MiB // 8)}],
    }
    ref = meshrt.put(value)
    assert state.core().table.entries[ref._id].payload.shm is not None
    out = meshrt.get(ref)
    assert out["bytes"] == blob and isinstance(out["bytes"], bytes)
    assert isinstance(out["bytearray"], bytearray) and out["bytearray"] == blob[:MiB]
    assert isinstance(out["memoryview"], memoryview) and out["memoryview"] == blob[: 2 * MiB]
    assert out["floats"].format == "d" and out["floats"].tolist() == list(range(1000))
    assert out["nested"][0] == blob[:MiB] and out["nested"][1]["array"].sum() == MiB // 8

    @meshrt.remote
    def sizes(v):
        return len(v["bytes"]), len(v["memoryview"]), v["nested"][1]["array"].nbytes

    assert meshrt.get(sizes.remote(ref)) == (4 * MiB, 2 * MiB, MiB)
    assert meshrt.get(sizes.remote(value)) == (4 * MiB, 2 * MiB, MiB)  # as a large argument


def test_large_bytes_are_copied_out_without_a_mapping_of_their_own(rt):
    # bytes(...) copies anyway: a reader copies straight from its long-lived mapping of
    # the store and unpins at once, instead of mapping the block privately.
    blob = os.urandom(4 * MiB)
    ref = meshrt.put(blob)
    payload = state.core().table.entries[ref._id].payload
    assert payload.shm is not None and payload.copied_out
    out = meshrt.get(ref)
    assert type(out) is bytes and out == blob
    store().drain_unpins()
    assert not store().objects[payload.shm[0]].pins

    # Beside a numpy array, the array stays a zero-copy view: its block stays pinned.
    mixed = meshrt.put((blob, np.ones(MiB)))
    payload = state.core().table.entries[mixed._id].payload
    assert not payload.copied_out
    got_bytes, array = meshrt.get(mixed)
    store().drain_unpins()
    assert got_bytes == blob and store().objects[payload.shm[0]].pins
    del array

    @meshrt.remote
    def echo(x):
        return x

    assert meshrt.get(echo.remote(blob)) == blob  # an argument and a result, both ways
    grown = meshrt.get(echo.remote(bytearray(blob)))
    assert type(grown) is bytearray and grown == blob


def test_large_actor_arguments_come_pinned_and_every_pin_goes_back(rt):
    # The driver owns the store: it pins a call's argument block for the actor's process
    # as it sends the call (no store round trip before the actor can read it), and the
    # actor gives every such pin back, a call cancelled before it ran included.
    g = gate()

    @meshrt.remote
    class Holder:
        def size(self, x):
            return len(x)

        def total(self, a):
            return float(a.sum())

        def hold(self, g):
            return meshrt.get(g.wait.remote())

    h = Holder.remote()
    blob = os.urandom(2 * MiB)
    assert meshrt.get(h.size.remote(blob)) == 2 * MiB
    assert meshrt.get(h.total.remote(np.ones(MiB))) == MiB
    busy = h.hold.remote(g)
    queued = h.size.remote(blob)
    meshrt.cancel(queued)
    meshrt.get(g.open.remote())
    assert meshrt.get(busy, timeout=30) is True
    with pytest.raises(TaskCancelledError):
        meshrt.get(queued, timeout=30)

    def pins_left():
        store().drain_unpins()
        return sum(sum(o.pins.values()) for o in list(store().objects.values()))

    assert wait_until(lambda: pins_left() == 0, timeout=10)


def test_an_actor_result_arrives_sealed_and_after_its_arguments_unpins(rt):
    # A large result to the driver leaves the actor's thread in one frame behind the
    # unpins of its arguments (so the argument block is reclaimed as the reply lands),
    # and the driver, which keeps the store, seals the result's block on arrival (so
    # it may be spilled later).
    @meshrt.remote
    class Doubler:
        def double(self, a):
            return a * 2

    d = Doubler.remote()
    assert meshrt.get(d.double.remote(np.ones(10))).sum() == 20
    baseline = used()
    ref = d.double.remote(np.ones(MiB))
    out = meshrt.get(ref)
    assert out.sum() == 2 * MiB
    key = state.core().table.entries[ref._id].payload.shm[0]
    assert store().objects[key].sealed
    assert used() == baseline + 8 * MiB  # the result alone: the argument's block is back


def test_a_value_read_from_its_file_stays_there_while_mapped(tmp_path):
    """A reader told to map a value's file keeps it: another reader's pin, once there is
    room again, must not restore the value into shared memory and remove the file."""
    from meshrt.objstore import disk_blocks
    from meshrt.objstore.store import SharedStore

    store = SharedStore(4 * MiB, spill_dir=str(tmp_path))
    try:
        assert store.allocate(1, 3 * MiB, owner=5) == 0
        store.seal(1)
        store.pin(1, 7)  # held: no room for the next one
        where = store.allocate(2, 2 * MiB, owner=5, writer=5)
        assert isinstance(where, str)
        disk_blocks.write(where, [(0, b"x" * (2 * MiB))])
        store.seal(2)
        assert store.pin(2, 8)[0] == where  # reader 8 maps the file
        store.unpin(1, 7)
        store.free(1)  # room again
        assert store.pin(2, 9)[0] == where  # still from the file, which stays
        assert bytes(disk_blocks.view_private(where, 2 * MiB)[:4]) == b"xxxx"
        store.unpin(2, 8)
        store.unpin(2, 9)
        assert isinstance(store.pin(2, 10)[0], int)  # nobody maps the file: back in memory
        assert not os.path.exists(where)
    finally:
        store.close()


def test_allocator_knows_when_used_pages_have_room():
    from meshrt.objstore.allocator import PAGE, Allocator

    blocks = Allocator(64 * PAGE)
    first = blocks.alloc(8 * PAGE)
    assert not blocks.fits_in_used(PAGE)  # everything below the high-water mark is taken
    blocks.free(first, 8 * PAGE)
    assert blocks.fits_in_used(8 * PAGE) and not blocks.fits_in_used(9 * PAGE)
    assert blocks.alloc(8 * PAGE) == first


def test_future_of_a_shared_memory_value_inside_a_worker(rt):
    @meshrt.remote
    def inner():
        return np.ones(MiB // 8)

    @meshrt.remote
    def outer():
        return float(inner.remote().future().result(timeout=30).sum())

    assert meshrt.get(outer.remote()) == MiB // 8


def test_a_tensor_written_between_calls_reaches_each_call_as_it_was(rt):
    """Each call stores its own copy of a large tensor argument (as Ray does): writes
    through numpy, ``.data`` or the array it came from bump no version counter, so a
    stored copy cannot be reused. Inference-mode tensors (no version counter) pass too."""
    torch = pytest.importorskip("torch")

    @meshrt.remote
    def norm(t):
        return float(t.sum())

    t = torch.zeros(MiB)  # 4 MiB
    assert meshrt.get(norm.remote(t)) == 0.0
    t.numpy()[:] = 1
    assert meshrt.get(norm.remote(t)) == MiB
    t.data.fill_(2)
    assert meshrt.get(norm.remote(t)) == 2 * MiB
    array = np.zeros(MiB, dtype=np.float32)
    u = torch.from_numpy(array)
    assert meshrt.get(norm.remote(u)) == 0.0
    array[:] = 3
    assert meshrt.get(norm.remote(u)) == 3 * MiB
    with torch.inference_mode():
        v = torch.ones(MiB)
    assert meshrt.get(norm.remote(v)) == MiB
