"""``ray.util.register_serializer``: a type pickle refuses travels once it has a
serializer, in the process that registered it; ``deregister_serializer`` undoes it."""
import threading

import pytest

import meshrt as ray
from meshrt.util import deregister_serializer, register_serializer

pytestmark = pytest.mark.timeout(120)


class Account:
    """Holds a lock: pickle refuses it."""

    def __init__(self, owner, balance):
        self.owner = owner
        self.balance = balance
        self.lock = threading.Lock()


def _to_state(account):
    return (account.owner, account.balance)


def _from_state(state):
    return Account(*state)


@ray.remote
def describe(account):
    return f"{account.owner}:{account.balance}:{type(account.lock).__name__}"


@ray.remote
def open_account(owner):
    register_serializer(Account, serializer=_to_state, deserializer=_from_state)  # (this worker sends one)
    return Account(owner, 0)


@pytest.fixture
def cluster():
    ray.init(num_cpus=1)
    yield
    deregister_serializer(Account)
    ray.shutdown()


def test_a_registered_type_travels_both_ways(cluster):
    with pytest.raises(TypeError):
        describe.remote(Account("ann", 5))
    register_serializer(Account, serializer=_to_state, deserializer=_from_state)
    assert ray.get(describe.remote(Account("ann", 5))) == "ann:5:lock"
    assert ray.get(ray.put(Account("bob", 7))).balance == 7
    opened = ray.get(open_account.remote("cy"))
    assert (opened.owner, opened.balance) == ("cy", 0)
    deregister_serializer(Account)
    with pytest.raises(TypeError):
        describe.remote(Account("ann", 5))
