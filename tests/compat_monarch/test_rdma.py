"""A Monarch-style program: an RDMABuffer made by one actor, read and written by another
(whole buffers, sizes in bytes, as Monarch means them)."""

import torch

from meshrt import Actor, endpoint, this_host
from meshrt.rdma import RDMAAction, RDMABuffer


class Weights(Actor):
    def __init__(self):
        self.t = torch.arange(16, dtype=torch.float32)
        self.buf = RDMABuffer(self.t.view(torch.uint8))

    @endpoint
    async def handle(self):
        return self.buf

    @endpoint
    async def values(self):
        return self.t.tolist()

    @endpoint
    async def drop(self):
        await self.buf.drop()


class Learner(Actor):
    @endpoint
    async def pull(self, buf, nbytes):
        dst = torch.zeros(nbytes, dtype=torch.uint8)
        done = await buf.read_into(dst)
        return done, dst[: buf.size()].view(torch.float32).tolist(), dst[buf.size():].tolist()

    @endpoint
    async def push(self, buf, values):
        return await buf.write_from(torch.tensor(values, dtype=torch.float32).view(torch.uint8))

    @endpoint
    async def batch(self, buf, values):
        """One read of the buffer and one write into it, submitted as a unit."""
        before = torch.zeros(buf.size(), dtype=torch.uint8)
        action = RDMAAction().read_remote(before, buf)
        await action.submit()
        await RDMAAction().write_remote(buf, torch.tensor(values, dtype=torch.float32).view(torch.uint8)).submit()
        return before.view(torch.float32).tolist()

    @endpoint
    async def refused(self, buf, op, nbytes):
        try:
            if op == "read":
                await buf.read_into(torch.zeros(nbytes, dtype=torch.uint8))
            else:
                await buf.write_from(torch.zeros(nbytes, dtype=torch.uint8))
        except Exception as err:  # noqa: BLE001 - which error the caller gets
            return type(err).__name__
        return "moved"


async def test_a_buffer_is_read_and_written_whole_by_another_process():
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    weights = procs.slice(gpus=0).spawn("weights", Weights)
    learner = procs.slice(gpus=1).spawn("learner", Learner)
    buf = await weights.handle.call_one()
    assert buf.size() == 64  # bytes
    assert await learner.pull.call_one(buf, 64) == (None, [float(i) for i in range(16)], [])
    done, values, rest = await learner.pull.call_one(buf, 72)  # (room to spare: left as it was)
    assert values == [float(i) for i in range(16)] and rest == [0] * 8
    assert await learner.push.call_one(buf, [9.0, 8.0]) is None  # a shorter write fills the start
    assert (await weights.values.call_one())[:3] == [9.0, 8.0, 2.0]
    assert (await learner.batch.call_one(buf, [1.0]))[:3] == [9.0, 8.0, 2.0]  # (an RDMAAction: read, then write)
    assert (await weights.values.call_one())[:3] == [1.0, 8.0, 2.0]
    assert await learner.refused.call_one(buf, "read", 32) == "ValueError"  # too little room
    assert await learner.refused.call_one(buf, "write", 80) == "ValueError"  # too much to write
    await weights.drop.call_one()
    assert await learner.refused.call_one(buf, "read", 64) != "moved"  # dropped: no more reads
    await procs.stop()
