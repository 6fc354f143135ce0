"""Which hosts lenders send large values inline to (meshrt/_private/ucx_routes.py), and
what a call whose lent arguments could not be read fails with. The checks themselves,
between hosts that UCX does not connect, run in tests/test_multihost_netns.py."""

from __future__ import annotations

import types

import pytest

from meshrt._private import call_payloads, ucx_routes
from meshrt._private.procutil import machine_id
from meshrt.exceptions import ObjectLostError
from meshrt.objstore.serialization import Payload, system_error_payload


def _core(host_id: int, *cuts) -> types.SimpleNamespace:
    return types.SimpleNamespace(host_id=host_id, ucx_unreached=frozenset(frozenset(cut) for cut in cuts))


@pytest.mark.timeout(10)
def test_values_go_inline_only_where_one_end_is_unreached():
    assert not ucx_routes.unreached(_core(0), 2)
    assert not ucx_routes.unreached(_core(0), None)  # (nothing unreached: lend freely)
    assert ucx_routes.unreached(_core(0, {2}), 2)  # to it
    assert ucx_routes.unreached(_core(2, {2}), 1)  # from it
    assert not ucx_routes.unreached(_core(0, {2}), 1)  # between two others
    assert ucx_routes.unreached(_core(0, {2}), None)  # a host not known here might be it


@pytest.mark.timeout(10)
def test_a_cut_between_two_hosts_sends_inline_between_those_two_only():
    cut = _core(1, {1, 2}), _core(2, {1, 2}), _core(3, {1, 2}), _core(0, {1, 2})
    assert ucx_routes.unreached(cut[0], 2) and ucx_routes.unreached(cut[1], 1)
    assert not ucx_routes.unreached(cut[0], 3) and not ucx_routes.unreached(cut[0], 0)  # (its other routes)
    assert not ucx_routes.unreached(cut[2], 1) and not ucx_routes.unreached(cut[3], 2)  # (others' routes to them)
    assert ucx_routes.unreached(cut[0], None)  # (the callee, not known here, may be host 2)
    assert not ucx_routes.unreached(cut[2], None)  # (no cut touches host 3)
    assert ucx_routes.unreached(_core(3, {1, 2}, {4}), None)  # (but one isolates a host)


@pytest.mark.timeout(10)
def test_agents_are_checked_against_each_other_only_across_machines(monkeypatch):
    monkeypatch.delenv("MESHRT_TENSOR_TRANSPORT", raising=False)
    checked = types.SimpleNamespace(machine="m1", lent_probe=("handle", b"bytes"))
    assert ucx_routes.peer_check_needed(types.SimpleNamespace(machine="m2"), checked)
    assert not ucx_routes.peer_check_needed(types.SimpleNamespace(machine="m1"), checked)
    unchecked = types.SimpleNamespace(machine="m1", lent_probe=None)  # (the head's machine, or it failed)
    assert not ucx_routes.peer_check_needed(types.SimpleNamespace(machine="m2"), unchecked)
    monkeypatch.setenv("MESHRT_TENSOR_TRANSPORT", "ucx")
    assert ucx_routes.peer_check_needed(types.SimpleNamespace(machine="m1"), checked)


@pytest.mark.timeout(10)
def test_only_agents_on_other_machines_are_checked(monkeypatch):
    monkeypatch.delenv("MESHRT_TENSOR_TRANSPORT", raising=False)
    monkeypatch.delenv("MESHRT_PULL_ENGINE", raising=False)
    assert ucx_routes.probe_needed("another-machine/boot/1")
    assert not ucx_routes.probe_needed(machine_id())  # (same machine: memory is attached directly)
    monkeypatch.setenv("MESHRT_TENSOR_TRANSPORT", "ucx")
    assert ucx_routes.probe_needed(machine_id())
    monkeypatch.setenv("MESHRT_PULL_ENGINE", "0")
    assert not ucx_routes.probe_needed("another-machine/boot/1")  # (everything goes inline anyway)


@pytest.mark.timeout(10)
def test_a_call_whose_arguments_could_not_be_read_fails_with_why():
    lost = ObjectLostError("a large value", "pulling it from the sender's host failed: no route")
    call = types.SimpleNamespace(args=system_error_payload(lost))
    with pytest.raises(ObjectLostError, match="no route") as raised:
        call_payloads.arguments(call)
    assert raised.value.__meshrt_plain__  # (the caller gets it as it is, not as the user's error)
    plain = types.SimpleNamespace(args=Payload(b"x"))
    assert call_payloads.arguments(plain) is plain.args
