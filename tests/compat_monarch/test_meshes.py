"""A Monarch-style program: several dims, slicing, meshes handed to actors."""

from meshrt import Actor, current_rank, endpoint, this_host, this_proc


class Node(Actor):
    @endpoint
    async def coords(self):
        point = current_rank()
        return dict(point)

    @endpoint
    async def ask(self, others):
        return list((await others.coords.call()).values())

    @endpoint
    async def spawn_child(self):
        child = this_proc().spawn("child", Node)
        return await child.coords.call_one()


async def test_two_dims_slice_by_int_and_by_slice():
    procs = this_host().spawn_procs(per_host={"hosts": 2, "gpus": 2})
    assert procs.sizes == {"hosts": 2, "gpus": 2}
    nodes = procs.spawn("nodes", Node)
    assert nodes.slice(hosts=1).sizes == {"gpus": 2}
    assert nodes.slice(gpus=slice(0, 1)).sizes == {"hosts": 2, "gpus": 1}
    values = await nodes.coords.call()
    assert [v for v in values.values()] == [{"hosts": h, "gpus": g} for h in range(2) for g in range(2)]
    assert await nodes.slice(hosts=1, gpus=0).coords.call_one() == {}
    await procs.stop()


async def test_a_mesh_passed_to_an_actor_is_callable_there():
    procs = this_host().spawn_procs(per_host={"gpus": 3})
    nodes = procs.spawn("nodes", Node)
    seen = await nodes.slice(gpus=0).ask.call_one(nodes.slice(gpus=slice(1, 3)))
    assert seen == [{"gpus": 0}, {"gpus": 1}]
    await procs.stop()


async def test_an_actor_spawns_on_its_own_process():
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    nodes = procs.spawn("nodes", Node)
    assert await nodes.spawn_child.call_one() == {}
    await procs.stop()


async def test_spawn_procs_without_dims_is_one_process_of_no_dims():
    procs = this_host().spawn_procs()
    assert procs.sizes == {}
    nodes = procs.spawn("nodes", Node)
    assert await nodes.coords.call_one() == {}
    assert list((await nodes.coords.call()).values()) == [{}]
    await procs.stop()
