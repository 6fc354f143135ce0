"""A Monarch-style program: actors talking to each other through ports and calls."""

import asyncio

from meshrt import Actor, Channel, current_rank, endpoint, this_host


class Listener(Actor):
    @endpoint
    async def listen(self, talker):
        port, receiver = Channel.open()  # (a port of this actor's own)
        await talker.say_to.call_one(port, "hi")
        return await receiver.recv()


class Talker(Actor):
    @endpoint
    async def say_to(self, port, words):
        port.send(f"{words} from {current_rank().rank}")

    @endpoint
    async def whoami(self):
        return current_rank().rank


_IN_THIS_PROCESS = asyncio.Event()  # (shared by the actors of one process)


class Waiter(Actor):
    @endpoint
    async def wait(self):
        await _IN_THIS_PROCESS.wait()
        return "released"


class Releaser(Actor):
    @endpoint
    async def release(self):
        _IN_THIS_PROCESS.set()


async def test_a_port_opened_in_one_actor_answered_by_another():
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    listener = procs.spawn("listener", Listener).slice(gpus=0)
    talker = procs.spawn("talker", Talker).slice(gpus=1)
    assert await listener.listen.call_one(talker) == "hi from 0"
    await procs.stop()


async def test_choose_gives_the_actor_its_rank_in_the_mesh():
    procs = this_host().spawn_procs(per_host={"gpus": 3})
    talkers = procs.spawn("talkers", Talker)
    assert {await talkers.whoami.choose() for _ in range(12)} <= {0, 1, 2}
    await procs.stop()


async def test_actors_sharing_a_process_take_turns_apart():
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    waiters = procs.spawn("waiters", Waiter)
    releaser = procs.spawn("releaser", Releaser)  # (same process, another actor: its own turn)
    waiting = asyncio.ensure_future(waiters.wait.call_one())
    await releaser.release.call_one()  # (not held up by the waiter's turn, whichever starts first)
    assert await asyncio.wait_for(waiting, 60) == "released"
    await procs.stop()
