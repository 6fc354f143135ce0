"""A Monarch-style program: ``__cleanup__(exc)`` runs when an actor's processes stop."""

from meshrt import Actor, Channel, endpoint, this_host


class Tidy(Actor):
    def __init__(self, port):
        self.port = port

    @endpoint
    def ping(self):
        return "pong"

    def __cleanup__(self, exc):
        self.port.send(("cleaned", exc is None))


async def test_stopping_the_processes_cleans_up_every_actor():
    port, receiver = Channel.open()
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    tidy = procs.spawn("tidy", Tidy, port)
    assert list((await tidy.ping.call()).values()) == ["pong", "pong"]
    await procs.stop()
    assert [await receiver.recv(), await receiver.recv()] == [("cleaned", True)] * 2
