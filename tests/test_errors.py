"""Errors: remote exceptions keep their type; bad input fails at the call site."""

from __future__ import annotations

import threading

import pytest

import meshrt
from meshrt import exceptions
from meshrt.exceptions import TaskError


@meshrt.remote
def fail(kind, message):
    raise kind(message)


def test_remote_exception_is_instance_of_original_with_remote_traceback(rt):
    with pytest.raises(KeyError) as info:
        meshrt.get(fail.remote(KeyError, "missing"))
    err = info.value
    assert isinstance(err, TaskError) and isinstance(err, exceptions.RayTaskError)
    assert isinstance(err.cause, KeyError)
    assert "fail" in err.traceback_str and "raise kind(message)" in err.traceback_str
    assert err.pid and err.function_name == "fail"


class CustomError(Exception):
    def __init__(self, code):
        super().__init__(f"code {code}")
        self.code = code


def test_custom_exception_attributes_read_through(rt):
    @meshrt.remote
    def raise_custom():
        raise CustomError(42)

    with pytest.raises(CustomError) as info:
        meshrt.get(raise_custom.remote())
    assert info.value.code == 42


class CodedError(Exception):
    """Its __init__ cannot take back its own args (pickle's way to rebuild it)."""

    def __init__(self, code, message, *, lock=None):
        super().__init__(message)
        self.code, self.lock = code, lock


def test_an_exception_whose_init_takes_other_arguments_keeps_its_class_and_attributes(rt):
    @meshrt.remote
    def raise_coded():
        raise CodedError(42, "bad code", lock=threading.Lock())  # (an attribute that cannot travel is left out)

    with pytest.raises(CodedError, match="bad code") as info:
        meshrt.get(raise_coded.remote())
    assert info.value.code == 42 and isinstance(info.value.cause, CodedError)
    assert info.value.cause.args == ("bad code",) and not hasattr(info.value.cause, "lock")


class MissingConfig(FileNotFoundError):
    def __init__(self, path):
        super().__init__(2, "no such config", path)


class Slotted(Exception):
    __slots__ = ("code",)

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


def test_os_errors_and_slotted_exceptions_keep_their_fields(rt):
    @meshrt.remote
    def raise_it(which):
        raise MissingConfig("/etc/app.toml") if which == "os" else Slotted(7, "bad")

    with pytest.raises(MissingConfig) as info:
        meshrt.get(raise_it.remote("os"))
    cause = info.value.cause
    assert (cause.errno, cause.strerror, cause.filename) == (2, "no such config", "/etc/app.toml")
    assert str(cause) == "[Errno 2] no such config: '/etc/app.toml'"
    with pytest.raises(Slotted) as info:
        meshrt.get(raise_it.remote("slots"))
    assert info.value.cause.code == 7


def test_errors_chain_through_nested_tasks(rt):
    @meshrt.remote
    def middle():
        return meshrt.get(fail.remote(ZeroDivisionError, "deep"))

    @meshrt.remote
    def top():
        return meshrt.get(middle.remote())

    with pytest.raises(ZeroDivisionError) as info:
        meshrt.get(top.remote())
    text = str(info.value)
    assert "deep" in text and "middle" in text and "top" in text


def test_unpicklable_exception_falls_back_to_text(rt):
    @meshrt.remote
    def raise_unpicklable():
        class Local(Exception):
            def __init__(self):
                super().__init__("held a lock")
                self.lock = threading.Lock()

        raise Local()

    with pytest.raises(TaskError, match="held a lock") as info:
        meshrt.get(raise_unpicklable.remote())
    assert info.value.traceback_str


def test_unpicklable_argument_is_named_at_call_site(rt):
    @meshrt.remote
    def f(a, b):
        return a

    with pytest.raises(TypeError, match=r"argument 1 of type lock"):
        f.remote(1, threading.Lock())
    with pytest.raises(TypeError, match=r"keyword argument 'b'"):
        f.remote(1, b=threading.Lock())
    with pytest.raises(TypeError, match="put"):
        meshrt.put(threading.Lock())
    lock = threading.Lock()

    @meshrt.remote
    def uses_a_lock():
        with lock:
            return 1

    with pytest.raises(TypeError, match="uses_a_lock cannot be sent to a worker: cannot pickle '_thread.lock'"):
        uses_a_lock.remote()  # (the function, not an argument: say which)


def test_wrong_arguments_fail_at_remote(rt):
    @meshrt.remote
    def two(a, b):
        return a + b

    with pytest.raises(TypeError, match=r"two.remote\(\)"):
        two.remote(1)
    with pytest.raises(TypeError, match="unexpected"):
        two.remote(1, 2, c=3)

    @meshrt.remote
    class A:
        def __init__(self, x):
            self.x = x

        def m(self, y):
            return y

    with pytest.raises(TypeError, match="__init__"):
        A.remote()
    a = A.remote(1)
    with pytest.raises(TypeError, match=r"A.m.remote\(\)"):
        a.m.remote()

    @meshrt.remote
    class NoConstructor:
        def m(self):
            return 1

    with pytest.raises(TypeError, match=r"NoConstructor.__init__.remote\(\): too many positional arguments"):
        NoConstructor.remote(1)  # (as Ray: at the call, not as a dead actor later)
    handle = NoConstructor.remote()
    assert meshrt.get(handle.m.remote(), timeout=30) == 1 and "m" in dir(handle)


def test_missing_method_names_the_class_and_suggests(rt):
    @meshrt.remote
    class Shop:
        def checkout(self):
            return 1

    s = Shop.remote()
    with pytest.raises(AttributeError, match="Shop has no method 'chekout'.*checkout"):
        s.chekout.remote()


def test_direct_calls_are_refused_with_the_fix(rt):
    @meshrt.remote
    def f():
        return 1

    @meshrt.remote
    class C:
        def m(self):
            return 1

    with pytest.raises(TypeError, match=r"f.remote"):
        f()
    with pytest.raises(TypeError, match=r"C.remote"):
        C()
    with pytest.raises(TypeError, match=r"\.m\.remote"):
        C.remote().m()


def test_get_of_non_ref(rt):
    with pytest.raises(TypeError, match="int"):
        meshrt.get(5)
    with pytest.raises(TypeError, match="item 1"):
        meshrt.get([meshrt.put(1), "x"])
    with pytest.raises(ValueError, match="timeout"):
        meshrt.get(meshrt.put(1), timeout=-1)


def test_get_inside_the_runtime_loop_is_refused(rt):
    from meshrt._private import state

    core = state.core()
    ref = meshrt.put(1)

    async def inside():
        return core.get([ref], None)

    with pytest.raises(RuntimeError, match="event loop"):
        core.io.run_sync(inside(), timeout=10)


async def test_blocking_get_in_async_code_warns(rt):
    ref = meshrt.put(1)
    with pytest.warns(RuntimeWarning, match="await ref"):
        assert meshrt.get(ref) == 1


def test_bad_options_fail_at_decoration(rt):
    with pytest.raises(ValueError, match="num_cpuss"):
        meshrt.remote(num_cpuss=1)(lambda: 1)
    with pytest.raises(ValueError, match="num_returns"):
        meshrt.remote(num_returns=-2)(lambda: 1)
    with pytest.raises(ValueError, match="must be >= 0"):
        meshrt.remote(num_cpus=-1)(lambda: 1)
    with pytest.raises(TypeError, match="keyword"):
        meshrt.remote(1, 2)
    with pytest.raises(ValueError, match="'num_return'.* num_returns"):
        meshrt.method(num_return=2)
    meshrt.method(max_task_retries=1, enable_task_events=False)  # (Ray's, accepted)
    with pytest.warns(RuntimeWarning, match=r"runtime_env\['conda'\] is not supported by meshrt yet") as seen:
        meshrt.remote(runtime_env={"conda": "myenv"})(lambda: 1)
    assert seen[0].filename == __file__  # (at the user's line)


def test_infeasible_request_fails_at_once_naming_resource(rt):
    @meshrt.remote(num_gpus=1)
    def needs_gpu():
        return 1

    with pytest.raises(exceptions.TaskUnschedulableError, match="GPU=1.*GPU=0"):
        needs_gpu.remote()

    @meshrt.remote(resources={"TPU": 4})
    class Big:
        pass

    with pytest.raises(exceptions.ActorUnschedulableError, match="TPU"):
        Big.remote()


def test_infeasible_request_from_a_worker_fails_the_ref(rt):
    @meshrt.remote(num_cpus=64)
    def huge():
        return 1

    @meshrt.remote
    def submit():
        return meshrt.get(huge.remote())

    with pytest.raises(exceptions.TaskUnschedulableError, match="CPU=64"):
        meshrt.get(submit.remote(), timeout=30)


def test_ray_exception_aliases():
    assert issubclass(exceptions.ActorDiedError, exceptions.RayActorError)  # (as in Ray, with its sibling)
    assert issubclass(exceptions.ActorUnavailableError, exceptions.RayActorError)
    assert not issubclass(exceptions.ActorUnavailableError, exceptions.ActorDiedError)
    assert exceptions.RayError is exceptions.MeshrtError
    assert issubclass(exceptions.GetTimeoutError, TimeoutError)
    assert issubclass(exceptions.ObjectStoreFullError, exceptions.MeshrtError)


_UNHANDLED = """
import meshrt

meshrt.init(num_cpus=1)

@meshrt.remote
def fail(message):
    raise ValueError(message)

@meshrt.remote
def passes_on(value):
    return value

fail.remote("dropped without a look")  # (the ref goes at once: reported as its error arrives)
read = fail.remote("read by get")
try:
    meshrt.get(read)
except ValueError:
    pass
del read
handed = fail.remote("handed to another task")
try:
    meshrt.get(passes_on.remote(handed))
except ValueError:
    pass
del handed
waited = fail.remote("waited on")
meshrt.wait([waited], timeout=60)
del waited  # (as in Ray: waited on is not unhandled)
cancelled = fail.options(num_cpus=1).remote("never runs")
meshrt.cancel(cancelled)
del cancelled  # (meshrt's own error: not reported)
meshrt.shutdown()
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("quiet", [False, True])
def test_an_error_nobody_read_is_reported_as_its_ref_goes(quiet):
    """Ray's "Unhandled error" line: a failed task fired and forgotten is not lost silently."""
    import os

    from tests.helpers import run_python

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=repo)
    if quiet:
        env["RAY_IGNORE_UNHANDLED_ERRORS"] = "1"
    done = run_python(_UNHANDLED, 60, env=env)
    assert done.returncode == 0, done.stderr
    reports = done.stderr.count("meshrt: unhandled error")
    if quiet:
        assert reports == 0, done.stderr
        return
    assert reports == 1, done.stderr
    assert "ValueError: dropped without a look" in done.stderr and "fail (pid=" in done.stderr
    assert "read by get" not in done.stderr and "handed to another task" not in done.stderr
    assert "waited on" not in done.stderr


@pytest.mark.timeout(30)
def test_asking_about_the_cluster_before_init_does_not_start_one():
    assert not meshrt.is_initialized()
    for question in (meshrt.cluster_resources, meshrt.available_resources, meshrt.nodes):
        with pytest.raises(exceptions.RaySystemError, match=r"call meshrt.init\(\) first"):
            question()
    assert not meshrt.is_initialized()
