"""A long-running head (``meshrt start --head``) and drivers that come and go
(``meshrt.init(address="auto")``), as Ray's ``ray start`` and its drivers: each driver
is a job of its own; what its tasks print reaches it; detached actors outlive it and
the next driver finds them by name; the rest of its job ends with it; ``meshrt stop``
leaves nothing running."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import textwrap

import psutil
import pytest

pytestmark = pytest.mark.timeout(180)

TOKEN = "c0ffee" * 8
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _meshrt(env: dict, *args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "meshrt", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


# Prepended to each driver program: its stdout, watched, so that it can wait for a line
# the cluster prints for it (output travels apart from results) before it ends.
WATCH = """
import sys as _sys, threading as _threading

class _Watched:
    def __init__(self, stream):
        self.stream, self.text, self.changed = stream, "", _threading.Condition()

    def write(self, s):
        self.stream.write(s)
        with self.changed:
            self.text += s
            self.changed.notify_all()
        return len(s)

    def flush(self):
        self.stream.flush()

    def wait_for(self, needle, timeout=30):
        with self.changed:
            return self.changed.wait_for(lambda: needle in self.text, timeout)

_sys.stdout = _Watched(_sys.stdout)
"""


def _driver(env: dict, cwd, code: str, *argv: str, timeout: float = 90) -> subprocess.CompletedProcess:
    """A driver program (``argv`` its arguments), run to its end."""
    script = cwd / "driver.py"
    script.write_text(WATCH + textwrap.dedent(code))
    return subprocess.run([sys.executable, str(script), *argv], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def _ended(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE  # (ended; its reaper not done yet)
    except psutil.NoSuchProcess:
        return True


@pytest.fixture
def head(tmp_path, request):
    """A head started from the command line, in a temp dir of its own (its cluster file,
    sockets and logs there, out of the way of anything else on this machine); a test's
    ``head`` parameter: more arguments for `meshrt start` ("TMP" standing for tmp_path)."""
    temp = tmp_path / "t"
    temp.mkdir()
    env = dict(os.environ, TMPDIR=str(temp), MESHRT_TOKEN=TOKEN)
    more = [arg.replace("TMP", str(tmp_path)) for arg in getattr(request, "param", ())]
    started = _meshrt(env, "start", "--head", "--port", "0", "--num-cpus", "2", "--object-store-memory",
                      str(128 << 20), *more)
    assert started.returncode == 0, started.stderr
    with open(temp / "meshrt-sessions" / "cluster.json") as f:
        info = json.load(f)
    work = tmp_path / "work"
    work.mkdir()
    yield env, work, info
    stopped = _meshrt(env, "stop")
    assert stopped.returncode == 0 and "stopped the head" in stopped.stdout, stopped.stdout + stopped.stderr
    assert _ended(info["pid"])
    left = [p.pid for p in psutil.process_iter(["cmdline"])
            if "meshrt._private.zygote" in " ".join(p.info["cmdline"] or ()) and str(info["pid"]) in p.info["cmdline"]]
    assert not left, f"processes of the head left running: {left}"
    assert not (temp / "meshrt-sessions" / "cluster.json").exists()


def test_drivers_come_and_go_and_detached_actors_stay(head):
    env, work, info = head
    (work / "helpers.py").write_text("def triple(x):\n    return 3 * x\n")  # (the job's own module)
    first = _driver(env, work, """
        import os
        import sys
        import meshrt
        import helpers

        info = meshrt.init(address="auto", namespace="team", runtime_env={"env_vars": {"JOB_SAYS": "hi"}})
        assert info["tcp_address"] == sys.argv[1]
        HERE = sys.argv[2]

        @meshrt.remote
        def hello(x):
            print("hello from a task", x, os.getcwd() == HERE, os.environ.get("JOB_SAYS"))
            return helpers.triple(x), meshrt.get_runtime_context().get_job_id()

        @meshrt.remote
        class Counter:
            def __init__(self):
                self.n = 0

            def inc(self):
                self.n += 1
                return self.n

        job = meshrt.get_runtime_context().get_job_id()
        assert meshrt.get([hello.remote(i) for i in range(3)]) == [(0, job), (3, job), (6, job)]
        assert sys.stdout.wait_for("hello from a task 2")
        kept = Counter.options(name="kept", namespace="shared", lifetime="detached").remote()
        assert meshrt.get(kept.inc.remote()) == 1
        scoped = Counter.options(name="scoped", namespace="shared").remote()
        assert meshrt.get(scoped.inc.remote()) == 1
        from meshrt.util.placement_group import placement_group
        pinned = placement_group([{"CPU": 1}], name="pinned", lifetime="detached")
        passing = placement_group([{"CPU": 1}], name="passing")
        assert pinned.wait(30) and passing.wait(30)
        print("job", job, "namespace", meshrt.get_runtime_context().namespace)
    """, info["address"], str(work))
    assert first.returncode == 0, first.stdout + first.stderr
    assert "hello from a task 2 True hi" in first.stdout and "(hello pid=" in first.stdout
    first_job = first.stdout.split("job ")[1].split()[0]
    second = _driver(env, work, """
        import sys
        import meshrt
        from meshrt.util.state import list_jobs

        meshrt.init(address="auto", namespace="team")
        kept = meshrt.get_actor("kept", namespace="shared")
        assert meshrt.get(kept.inc.remote()) == 2  # (the same actor: it outlived its driver)
        try:
            meshrt.get_actor("scoped", namespace="shared")
        except ValueError:
            print("scoped actor ended with its job")
        from meshrt.util.placement_group import get_placement_group, remove_placement_group
        remove_placement_group(get_placement_group("pinned"))  # (outlived its driver)
        try:
            get_placement_group("passing")
        except ValueError:
            print("its group ended with its job")
        jobs = {j.job_id: j.status for j in list_jobs()}
        print("first job", jobs[sys.argv[1]], "this job", jobs[meshrt.get_runtime_context().get_job_id()])
        meshrt.kill(kept)
    """, first_job)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "scoped actor ended with its job" in second.stdout and "its group ended with its job" in second.stdout
    assert "first job SUCCEEDED this job RUNNING" in second.stdout
    pooled = _driver(env, work, """
        import meshrt
        from meshrt.util.multiprocessing import Pool

        with Pool(2, ray_address="auto") as pool:  # (attaches to the head)
            print("squares", pool.map(abs, [-1, -2, 3]))
    """)
    assert "squares [1, 2, 3]" in pooled.stdout, pooled.stdout + pooled.stderr
    status = _meshrt(env, "status")  # (no --address: this host's head)
    assert status.returncode == 0 and info["address"] in status.stdout, status.stderr


def test_a_driver_killed_ends_its_job(head):
    env, work, _info = head
    script = work / "stuck.py"
    script.write_text(textwrap.dedent("""
        import sys
        import meshrt

        meshrt.init(address="auto", namespace="mine")

        @meshrt.remote
        class Holder:
            def ping(self):
                return "here"

        holder = Holder.options(name="holder").remote()
        assert meshrt.get(holder.ping.remote()) == "here"
        print("ready", flush=True)
        sys.stdin.read()  # (until killed)
    """))
    with subprocess.Popen([sys.executable, str(script)], env=env, cwd=work, stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True) as stuck:
        try:
            assert stuck.stdout.readline().strip() == "ready"
        finally:
            os.kill(stuck.pid, signal.SIGKILL)
            stuck.wait(30)
    after = _driver(env, work, """
        import sys
        sys.path.insert(0, sys.argv[1])
        import meshrt
        from tests.helpers import wait_until

        meshrt.init(address="auto", namespace="mine")

        def gone():
            try:
                meshrt.get_actor("holder")
            except ValueError:
                return True
            return False

        assert wait_until(gone, timeout=30), "the killed driver's actor is still there"
        print("its actor ended")
    """, REPO)
    assert after.returncode == 0, after.stdout + after.stderr
    assert "its actor ended" in after.stdout


def test_attaching_without_a_head_and_starting_two_say_what_to_do(head, tmp_path):
    env, work, _info = head
    again = _meshrt(env, "start", "--head", "--port", "0")
    assert again.returncode == 1 and "already runs" in again.stderr
    elsewhere = dict(env, TMPDIR=str(tmp_path))  # (no head recorded there)
    lonely = _driver(elsewhere, work, """
        import meshrt
        try:
            meshrt.init(address="auto")
        except ConnectionError as err:
            print("refused:", err)
    """)
    assert "refused:" in lonely.stdout and "meshrt start --head" in lonely.stdout, lonely.stdout + lonely.stderr


@pytest.mark.parametrize("head", [("--temp-dir", "TMP/logs")], indirect=True)
def test_a_head_started_with_a_temp_dir_keeps_its_logs_there(head, tmp_path):
    env, work, info = head
    logs = tmp_path / "logs" / "meshrt-sessions"
    assert (logs / "head.log").exists() and not (tmp_path / "t" / "meshrt-sessions" / "head.log").exists()
    driver = _driver(env, work, """
        import sys
        import meshrt

        meshrt.init(address="auto")  # (found where it always is, without saying where its logs are)

        @meshrt.remote
        def hello():
            print("a line for the log")

        meshrt.get(hello.remote())
        assert sys.stdout.wait_for("a line for the log")
        print("TEMP", meshrt.get_runtime_context().get_temp_dir())
    """)
    assert driver.returncode == 0, driver.stdout + driver.stderr
    session = driver.stdout.split("TEMP ")[1].split()[0]
    assert session.startswith(str(logs / "session_"))
    files = [pathlib.Path(session, "logs", name) for name in os.listdir(os.path.join(session, "logs"))]
    assert any("a line for the log" in path.read_text() for path in files), files


def test_an_agent_joins_the_head_and_serves_its_drivers(head):
    env, work, info = head
    agent = subprocess.Popen([sys.executable, "-m", "meshrt", "agent", "--address", info["address"], "--token-file",
                              info["token_file"], "--name", "other", "--num-cpus", "1", "--resources",
                              '{"there": 1}', "--object-store-memory", str(64 << 20)],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        ran = _driver(env, work, """
            import sys
            import meshrt

            meshrt.init(address="auto")
            meshrt.hosts(min_hosts=1, timeout=60)

            @meshrt.remote(resources={"there": 1})
            def where():
                print("printed on the other host")
                return meshrt.get_runtime_context().get_job_id()

            assert meshrt.get(where.remote(), timeout=60) == meshrt.get_runtime_context().get_job_id()
            assert sys.stdout.wait_for("printed on the other host")
            from meshrt.experimental import tqdm_ray
            for _ in tqdm_ray.tqdm(range(2), desc="here"):  # (drawn in this program, as a driver's are)
                pass
        """)
        assert ran.returncode == 0, ran.stdout + ran.stderr
        assert "__meshrt_tqdm_state__" not in ran.stdout and "2/2" in ran.stderr, ran.stdout + ran.stderr
        assert "(where pid=" in ran.stdout and "printed on the other host" in ran.stdout, ran.stdout
    finally:
        agent.terminate()
        agent.wait(30)
