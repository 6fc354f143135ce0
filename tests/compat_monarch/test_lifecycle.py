"""A Monarch-style program: constructors, actors in the driver, ValueMesh items.

(Not here: a call to a stopped actor mesh is an unhandled fault in Monarch 0.7, which
by default ends the program; meshrt fails that call, naming the stop:
tests/test_mesh_stop.py. A constructor that raises: test_fault_hook.py.)"""

from meshrt import Actor, context, current_rank, current_size, endpoint, this_host, this_proc


class Picky(Actor):
    def __init__(self, ok):
        if not ok:
            raise RuntimeError("refused to start")
        self.born_at = (current_rank().rank, current_size())

    @endpoint
    def birth(self):
        return self.born_at


async def test_the_constructor_sees_its_own_rank():
    procs = this_host().spawn_procs(per_host={"gpus": 3})
    picky = procs.spawn("picky", Picky, True)
    assert list((await picky.slice(gpus=slice(1, 3)).birth.call()).values()) == [(1, {"gpus": 3}), (2, {"gpus": 3})]
    await procs.stop()


async def test_actors_in_the_driver_process():
    here = this_proc().spawn("here", Picky, True)
    assert await here.birth.call_one() == (0, {})


async def test_iterating_a_value_mesh():
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    picky = procs.spawn("picky", Picky, True)
    values = await picky.birth.call()
    pairs = [(point.rank, value[0]) for point, value in values.items()]
    assert pairs == [(0, 0), (1, 1)]
    await procs.stop()


def _setup():
    import os

    point = current_rank()  # (the process's own point, as its actors' will be)
    os.environ["SET_BY_BOOTSTRAP"] = "yes"
    os.environ["BOOTSTRAP_SAW"] = f"{point.rank} {dict(point)} {current_size()} {context().actor_instance.name}"


class EnvReader(Actor):
    @endpoint
    def read(self):
        import os

        return os.environ.get("SET_BY_BOOTSTRAP")

    @endpoint
    def seen_by_bootstrap(self):
        import os

        return os.environ.get("BOOTSTRAP_SAW")


async def test_bootstrap_runs_in_each_process_first():
    procs = this_host().spawn_procs(per_host={"gpus": 2}, bootstrap=_setup)
    readers = procs.spawn("readers", EnvReader)
    assert list((await readers.read.call()).values()) == ["yes", "yes"]
    await procs.stop()


async def test_bootstrap_sees_its_process_s_rank():
    procs = this_host().spawn_procs(per_host={"hosts": 2, "gpus": 2}, bootstrap=_setup)
    seen = list((await procs.spawn("readers", EnvReader).seen_by_bootstrap.call()).values())
    assert seen == [f"{r} {{'hosts': {r // 2}, 'gpus': {r % 2}}} {{'hosts': 2, 'gpus': 2}} setup" for r in range(4)]
    await procs.stop()


class Kid(Actor):
    @endpoint
    def hello(self):
        return "hello from " + context().actor_instance.class_name.rsplit(".", 1)[-1]


class Parent(Actor):
    @endpoint
    async def spawn_kid(self):
        kid = context().actor_instance.proc.spawn("kid", Kid)  # (in this actor's own process)
        return await kid.hello.call_one()


async def test_an_actor_instance_knows_its_class_and_process():
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    parent = procs.spawn("parent", Parent)
    assert await parent.spawn_kid.call_one() == "hello from Kid"
    await procs.stop()
