"""Large bytes between processes of one host: lent and read in one copy (loans.py),
never through the store; loans end when the call is over or the caller has read. An
argument returned unchanged goes back as the caller's own loan: no copy at all."""

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

    def reversed(self, blob):
        return blob[::-1]

    def keep(self, blob):
        self.kept = blob

    def kept_one(self):
        return self.kept

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
    def reversed(self, blob):
        return blob[::-1]

    @endpoint
    def live_loans(self):
        return _live_here()


def test_actor_echo_of_large_bytes_skips_the_store(rt):
    h = Holder.remote()
    meshrt.get(h.pid.remote())
    blob = os.urandom(8 * MiB)
    baseline = _used()
    out = meshrt.get(h.reversed.remote(blob), timeout=60)
    assert out == blob[::-1] and type(out) is bytes
    assert _used() == baseline  # neither the argument nor the result took a block
    assert _live_here() == 0  # the argument's loan ended with the call
    assert wait_until(lambda: meshrt.get(h.live_loans.remote()) == 0)  # the result's, once read
    # The result is the caller's own copy: reading it again needs the actor no more.
    ref = h.reversed.remote(blob)
    meshrt.get(ref)
    meshrt.kill(h)
    assert meshrt.get(ref) == blob[::-1]


def test_an_argument_returned_unchanged_comes_back_as_the_callers_own_bytes(rt):
    h = Holder.remote()
    blob = os.urandom(8 * MiB)
    baseline = _used()
    out = meshrt.get(h.echo.remote(blob), timeout=60)
    assert out is blob  # no copy back: the actor sent the caller's loan, not one of its own
    assert _used() == baseline
    assert _live_here() == 0  # the argument's loan ended once the reply was taken
    assert meshrt.get(h.live_loans.remote()) == 0  # the actor lent nothing: nothing to wait for
    # Kept beyond its call, the same bytes go back as a loan of the actor's own.
    meshrt.get(h.keep.remote(blob), timeout=60)
    out = meshrt.get(h.kept_one.remote(), timeout=60)
    assert out == blob and out is not blob
    assert _live_here() == 0


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
    assert one.echo.call_one(blob).get(timeout=60) is blob
    assert one.reversed.call_one(blob).get(timeout=60) == blob[::-1]
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
        assert meshrt.get(Holder.remote().reversed.remote(blob), timeout=60) == blob[::-1]


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


def test_a_loan_sent_back_gives_the_lender_its_own_value_only_while_it_lasts():
    from meshrt.objstore.serialization import big_bytes_out_of_band, error_from_payload, serialize

    blob = os.urandom(MiB)
    args, _ = serialize(big_bytes_out_of_band(blob), None, loans.lender())
    received = loans.Payload(args.data, (), args.refs, loans=args.loans)  # (as it arrives: loans only)
    read_args, borrowed = loans.borrow(received)
    assert read_args.buffers == (blob,) and borrowed[0][1] == args.loans[0]
    reply, _ = serialize(big_bytes_out_of_band(read_args.buffers[0]), None, loans.lender(7, None, borrowed))
    assert reply.loans == args.loans  # the value borrowed goes back as the same loan
    back = loans.Payload(reply.data, (), reply.refs, loans=reply.loans)
    taken, to_end = loans.take(back)
    assert taken.buffers[0] is blob and to_end == ()  # ours: nothing to end at the sender
    loans.end_mine(args)
    taken, _ = loans.take(back)  # (a reply after the call is over: an error, not stale bytes)
    assert taken.is_error and "after its loan ended" in str(error_from_payload(taken))
    assert _live_here() == 0
