"""Large bytes between processes of one host: lent and read in one copy (loans.py),
never through the store; loans end when the call is over or the caller has read."""

from __future__ import annotations

import os

import pytest

import meshrt
from meshrt import Actor, endpoint, this_host
from meshrt._private import loans, state
from meshrt.exceptions import ObjectLostError
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(120)
MiB = 1 << 20


def _used() -> int:
    core = state.core()
    core.flush_frees()
    core.controller.store.drain_unpins()
    return core.controller.store.usage()["used"]


def _live_here() -> int:
    lender = loans._lender
    return 0 if lender is None or lender.pid != os.getpid() else len(lender.live)


@meshrt.remote
class Holder:
    def echo(self, blob):
        return blob

    def nested(self, blob):
        return [blob]  # (not a top-level bytes: through the store as before)

    def live_loans(self):
        return _live_here()

    def pid(self):
        return os.getpid()


class MeshEcho(Actor):
    @endpoint
    def echo(self, blob):
        return blob

    @endpoint
    def live_loans(self):
        return _live_here()


def test_actor_echo_of_large_bytes_skips_the_store(rt):
    h = Holder.remote()
    meshrt.get(h.pid.remote())
    blob = os.urandom(8 * MiB)
    baseline = _used()
    out = meshrt.get(h.echo.remote(blob), timeout=60)
    assert out == blob and type(out) is bytes
    assert _used() == baseline  # neither the argument nor the result took a block
    assert _live_here() == 0  # the argument's loan ended with the call
    assert wait_until(lambda: meshrt.get(h.live_loans.remote()) == 0)  # the result's, once read
    # The result is the caller's own copy: reading it again needs the actor no more.
    ref = h.echo.remote(blob)
    meshrt.get(ref)
    meshrt.kill(h)
    assert meshrt.get(ref) == blob


def test_values_that_are_not_large_bytes_take_the_usual_paths(rt):
    h = Holder.remote()
    blob = os.urandom(2 * MiB)
    assert meshrt.get(h.nested.remote(blob)) == [blob]
    assert meshrt.get(h.echo.remote(bytearray(blob))) == bytearray(blob)
    assert meshrt.get(h.echo.remote(b"small")) == b"small"


def test_mesh_endpoint_echo_lends_both_ways(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    mesh = procs.spawn("echo", MeshEcho)
    one = mesh.slice(gpus=1)
    blob = os.urandom(4 * MiB)
    baseline = _used()
    assert one.echo.call_one(blob).get(timeout=60) == blob
    assert _used() == baseline
    assert list(mesh.echo.call(blob).get(timeout=60).values()) == [blob, blob]  # (many: stored once, shared)
    assert wait_until(lambda: one.live_loans.call_one().get(timeout=30) == 0)
    procs.stop().get(timeout=60)


def test_call_retried_on_a_restarted_actor_reads_its_lent_arguments_again(rt, tmp_path):
    marker = tmp_path / "crashed"

    @meshrt.remote(max_restarts=1, max_task_retries=1)
    class Fragile:
        def work(self, path, blob):
            if not os.path.exists(path):
                open(path, "w").close()
                os._exit(1)
            return len(blob), blob[:16]

    blob = os.urandom(3 * MiB)
    f = Fragile.remote()
    assert meshrt.get(f.work.remote(str(marker), blob), timeout=60) == (len(blob), blob[:16])
    assert _live_here() == 0


def test_a_loan_read_after_it_ended_is_lost_not_stale():
    blob = os.urandom(MiB)
    loan = loans.lend(blob)
    assert loans.read(loan) == blob
    loans.end(loan.generation)
    with pytest.raises(ObjectLostError, match="stopped lending"):
        loans.read(loan)
    assert _live_here() == 0


def test_loans_off_by_environment(monkeypatch):
    monkeypatch.setenv("MESHRT_LOANS", "0")
    meshrt.init(num_cpus=2)
    h = Holder.remote()
    blob = os.urandom(2 * MiB)
    baseline = _used()
    ref = h.echo.remote(blob)
    assert meshrt.get(ref, timeout=60) == blob
    assert _used() >= baseline + len(blob)  # the result waits in the store, as before
    assert _live_here() == 0
    del ref
    meshrt.shutdown()


def test_an_actor_exiting_right_after_its_reply_waits_until_the_result_is_read(rt):
    blob = os.urandom(4 * MiB)
    for _ in range(5):  # the handle goes at once: the actor exits as soon as it has answered
        assert meshrt.get(Holder.remote().echo.remote(blob), timeout=60) == blob


def test_only_large_bytes_are_lent():
    from meshrt.objstore.serialization import big_bytes_out_of_band, serialize

    asked = []
    blob, other = os.urandom(MiB), bytearray(MiB)
    payload, _ = serialize((big_bytes_out_of_band(blob), memoryview(other)[1:]), None, asked.append)
    assert asked == [] and payload.loans is None  # (a memoryview of a bytearray may change)
    payload, _ = serialize(big_bytes_out_of_band(blob), None, loans.lender())
    assert payload.loans is not None and loans.read(payload.loans[0]) == blob
    loans.end_mine(payload)
    assert _live_here() == 0


def test_nothing_is_lent_to_a_borrower_known_dead():
    loans.end_all_to(12345)
    assert loans.lend(os.urandom(MiB), 12345) is None
    assert _live_here() == 0
