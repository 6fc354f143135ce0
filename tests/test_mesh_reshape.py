"""Reshaping meshes (rename, split, flatten) and Monarch's smaller helpers: ValueMesh.get,
Future.result/exception/as_asyncio, current_actor_name, Accumulator."""

from __future__ import annotations

import asyncio
import threading

import pytest

import meshrt
from meshrt import (
    Accumulator,
    Actor,
    ValueMesh,
    context,
    current_actor_name,
    current_rank,
    endpoint,
    this_host,
)
from meshrt.mesh.shape import Shape


class Where(Actor):
    @endpoint
    def where(self):
        return context().actor_instance.rank.rank, dict(context().message_rank), current_actor_name()

    @endpoint
    def in_thread(self):
        seen = []
        thread = threading.Thread(target=lambda: seen.append((current_actor_name(), current_rank().rank)))
        thread.start()
        thread.join()
        return seen[0]

    @endpoint
    def dims(self):
        return dict(context().actor_instance.extent), dict(meshrt.current_size())

    @endpoint
    def count(self, base):
        return base + current_rank().rank

    @endpoint
    def fail_at(self, rank):
        if context().actor_instance.rank.rank == rank:
            raise KeyError(f"rank {rank} refuses")
        return rank


def test_split_rename_flatten_keep_the_ranks_in_order():
    mesh = Shape.dense(("hosts", "gpus"), (4, 6))
    split = mesh.split(hosts=("dp", "pp"), gpus=("tp", "cp"), pp=2, cp=3)
    assert split.extent == {"dp": 2, "pp": 2, "tp": 2, "cp": 3} and split.ranks() == mesh.ranks()
    assert mesh.rename(gpus="g").extent == {"hosts": 4, "g": 6}
    assert mesh.flatten("r").extent == {"r": 24} and mesh.flatten("r").ranks() == mesh.ranks()
    every_other = mesh.slice(gpus=slice(0, 6, 2))  # (one step along the inner dim: still flat)
    assert every_other.flatten("x").ranks() == every_other.ranks()
    assert every_other.split(gpus=("a", "b"), b=3).ranks() == every_other.ranks()
    with pytest.raises(ValueError, match="flatten the mesh before slicing"):
        mesh.slice(hosts=slice(0, 4, 2), gpus=slice(1, 3)).flatten("x")
    with pytest.raises(ValueError, match="give the size of all but one"):
        mesh.split(hosts=("a", "b"))
    with pytest.raises(ValueError, match="size 4, which 3 does not divide"):
        mesh.split(hosts=("a", "b"), a=3)
    with pytest.raises(ValueError, match=r"\['zz'\] named no dimension"):
        mesh.split(zz=2)
    with pytest.raises(ValueError, match="'gpus' would appear twice"):
        mesh.rename(hosts="gpus")
    with pytest.raises(ValueError, match="no dimension 'nope'"):
        mesh.rename(nope="x")
    with pytest.raises(TypeError, match="tuple of identifiers"):
        mesh.split(hosts="dp")


def test_value_mesh_reshapes_and_gets_by_rank():
    values = ValueMesh(Shape.dense(("hosts", "gpus"), (2, 3)), list(range(6)))
    assert values.get(4) == 4 == values.item(hosts=1, gpus=1)
    assert list(values.flatten("r").values()) == list(range(6))
    assert values.rename(gpus="g").item(hosts=1, g=2) == 5
    sliced = values.slice(gpus=slice(0, 3, 2))  # {hosts: 2, gpus: 2}: 0, 2, 3, 5
    assert list(sliced.flatten("r").values()) == [0, 2, 3, 5] and sliced.flatten("r").get(3) == 5
    with pytest.raises(IndexError, match="ranks 0 .. 5"):
        values.get(6)
    with pytest.raises(TypeError, match="item"):
        values.get({"hosts": 0})
    shape = Shape.dense(("hosts", "gpus"), (2, 2))
    built = ValueMesh.from_indexed(shape, [(0, "a"), (1, "b"), (2, "c"), (3, "d"), (1, "B")])  # (the last wins)
    assert list(built.values()) == ["a", "B", "c", "d"] and built.item(hosts=1, gpus=0) == "c"
    with pytest.raises(ValueError, match=r"no value for rank\(s\) \[1, 2, 3\]"):
        ValueMesh.from_indexed(shape, [(0, "a")])
    with pytest.raises(ValueError, match="rank 4 is not in 0 .. 3"):
        ValueMesh.from_indexed(shape, [(4, "a")])
    point = built.flatten("r").items().__next__()[0]
    assert point.size("r") == 4 and list(built.items())[3][0].size("gpus") == 2
    with pytest.raises(ValueError, match="no such dimension"):
        point.size("hosts")


async def test_reshaped_meshes_are_called_with_their_new_dims(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 4})
    mesh = procs.spawn("w", Where)
    grid = mesh.split(gpus=("dp", "tp"), tp=2)
    assert grid.sizes == {"dp": 2, "tp": 2}
    replies = await grid.slice(tp=1).where.call()
    # each actor keeps its own rank; the message rank is in the addressed (reshaped) mesh
    assert [(r, m) for r, m, _ in replies.values()] == [(1, {"dp": 0}), (3, {"dp": 1})]
    assert [name for _, _, name in replies.values()] == ["w[1]", "w[3]"]
    flat = grid.flatten("all")
    assert [r for r, _, _ in (await flat.slice(all=slice(1, 3)).where.call()).values()] == [1, 2]
    assert (await mesh.rename(gpus="ranks").where.call()).item(ranks=2)[0] == 2
    # processes reshaped before a spawn: the actors' own dims are the new ones
    on_grid = procs.split(gpus=("dp", "tp"), dp=2).spawn("g", Where)
    # (current_size(): the addressed mesh's, as in Monarch)
    assert await on_grid.slice(dp=1, tp=0).dims.call_one() == ({"dp": 2, "tp": 2}, {})
    assert (await on_grid.slice(tp=0).dims.call()).item(dp=1) == ({"dp": 2, "tp": 2}, {"dp": 2})
    assert this_host().rename().sizes == {}  # (nothing to rename)
    await procs.stop()


async def test_accumulator_folds_the_replies(rt):
    mesh = this_host().spawn_procs(per_host={"gpus": 3}).spawn("w", Where)
    total = Accumulator(mesh.count, 0, lambda acc, n: acc + n)
    assert await total.accumulate(10) == 33  # 10 + 11 + 12
    assert await asyncio.to_thread(lambda: total.accumulate(base=1).get(timeout=30)) == 6
    with pytest.raises(meshrt.ActorError, match="rank 1 refuses"):
        await Accumulator(mesh.fail_at, [], lambda acc, r: acc + [r]).accumulate(1)
    with pytest.raises(TypeError, match="give a mesh endpoint"):
        Accumulator(len, 0, max)


async def test_future_result_exception_and_asyncio(rt):
    mesh = this_host().spawn_procs(per_host={"gpus": 2}).spawn("w", Where)
    ok = mesh.slice(gpus=0).fail_at.call_one(1)
    bad = mesh.slice(gpus=1).fail_at.call_one(1)
    assert await asyncio.to_thread(ok.result, 30) == 1
    assert await asyncio.to_thread(ok.exception, 30) is None
    err = await asyncio.to_thread(bad.exception, 30)
    assert isinstance(err, meshrt.ActorError) and "rank 1 refuses" in str(err)
    done, _ = await asyncio.wait([mesh.slice(gpus=0).count.call_one(5).as_asyncio()], timeout=30)
    assert [t.result() for t in done] == [5]
    with pytest.raises(RuntimeError, match="call it from async code, or use .get"):
        await asyncio.to_thread(mesh.slice(gpus=0).count.call_one(5).as_asyncio)  # (no loop there)
    assert await mesh.initialized is None  # (as Monarch's)


def test_outside_an_actor_context_is_the_clients():
    """As in Monarch: the driver, and a thread an endpoint starts, see the client's instance."""
    assert current_actor_name() == "client"
    instance = context().actor_instance
    assert (instance.name, instance.rank.rank, dict(instance.rank.extent)) == ("client", 0, {})
    with pytest.raises(RuntimeError, match="runs outside one"):
        instance.stop("no")


async def test_a_thread_an_endpoint_starts_sees_the_client(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    mesh = procs.spawn("threads", Where)
    assert await mesh.slice(gpus=1).in_thread.call_one() == ("client", 0)
    await procs.stop()


class Shadowed(Actor):
    @endpoint
    def stop(self):
        return "the endpoint"

    @endpoint
    def split(self, text):
        return text.split()


async def test_endpoints_the_mesh_hides_are_named_at_spawn_and_reachable(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    with pytest.warns(UserWarning, match=r"\['split', 'stop'\] hide the endpoint.*mesh\.endpoint\('split'\)"):
        mesh = procs.spawn("s", Shadowed)
    assert await mesh.endpoint("stop").call_one() == "the endpoint"
    assert await mesh.endpoint("split").call_one("a b") == ["a", "b"]
    with pytest.raises(AttributeError, match="did you mean 'stop'"):
        mesh.endpoint("stpo")
    await mesh.stop()  # (the mesh's own stop)
    await procs.stop()


class NamedEndpoint(Actor):
    @endpoint
    def endpoint(self):
        return "mine"


async def test_an_endpoint_named_endpoint_is_the_actor_s(rt):
    """Monarch's meshes have no endpoint() of their own: an endpoint of that name works."""
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    mesh = procs.spawn("e", NamedEndpoint)  # (no warning: nothing hides it)
    assert await mesh.endpoint.call_one() == "mine"
    assert await mesh.slice(gpus=0).endpoint.call_one() == "mine"
    await procs.stop()


async def test_initialized_and_host_mesh(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    assert await procs.initialized is True
    assert await this_host().initialized is True
    host = procs.slice(gpus=1).host_mesh
    assert host.extent == {}
    more = host.spawn_procs(per_host={"extra": 1})  # the same host takes more processes
    assert await more.initialized is True
    await more.stop()
    await procs.stop()


def test_to_table_lays_the_processes_out_by_the_meshs_dims(rt):
    procs = this_host().spawn_procs(per_host={"hosts": 2, "gpus": 2})
    table = procs.to_table().splitlines()
    assert table[1].split("|")[1].strip() == "hosts \\ gpus"
    assert [cell.strip() for cell in table[3].split("|")[1:-1]] == ["0", "0.gpu[0]", "0.gpu[1]"]
    assert [cell.strip() for cell in table[5].split("|")[1:-1]] == ["1", "0.gpu[2]", "0.gpu[3]"]
    row = procs.slice(hosts=1).to_table().splitlines()[3]
    assert [cell.strip() for cell in row.split("|")[1:-1]] == ["", "0.gpu[2]", "0.gpu[3]"]
    deep = this_host().spawn_procs(per_host={"a": 2, "b": 1, "c": 2}).to_table()
    assert deep.startswith("a=0\n") and "\n\na=1\n" in deep and deep.count("0.gpu[") == 4
    procs.stop().get()
