"""Local directories of a ``runtime_env`` (``working_dir``, ``py_modules``), as zip packages.

The owner packs a directory into a zip named by the hash of its bytes
(``meshrt-pkg://<sha>.zip``) and hands it to the controller once, which keeps it for
the job as Ray's GCS keeps uploaded packages. A process that runs a task or actor
asking for it unpacks it once per host, under the host's runtime directory
(``MESHRT_ENV_DIR``, made and removed by the controller or the host's agent): the first
process takes a file lock and unpacks, the others find it there. So a host that does
not share the driver's file system runs the driver's code, and tasks on the head host
see a copy, as they do under Ray (they may write into it without touching the
original).
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import os
import shutil
import tempfile
import uuid
import zipfile

import pathspec

from ..exceptions import RuntimeEnvSetupError
from . import temp_root

SCHEME = "meshrt-pkg://"
MAX_PACKAGE_BYTES = 512 << 20  # (Ray's limit on an uploaded package, too)
_SKIPPED_DIRS = ("__pycache__", ".git")  # (bytecode is made again where it runs; history is not code)
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)  # same files -> same bytes -> same name, whenever packed
_packed: dict = {}  # (path, prefix, excludes) -> (fingerprint, (uri, zip bytes))
_unpacked: dict = {}  # uri -> where this process found it unpacked on its host


def pack(path: str, excludes: tuple = (), prefix: str = "", what: str = "runtime_env") -> tuple[str, bytes]:
    """(uri, zip bytes) of a directory, or of one ``.py`` file; ``prefix`` is the name its
    files are put under in the zip (a py_module's own name)."""
    path = os.path.abspath(path)
    if not os.path.exists(path):
        raise ValueError(f"{what}: {path} does not exist on this host (a directory of a runtime_env is packed "
                         "where the task or actor is submitted)")
    files = list(_files(path, excludes))
    key, fingerprint = (path, prefix, excludes), _fingerprint(files)
    if key in _packed and _packed[key][0] == fingerprint:
        return _packed[key][1]
    total = sum(file[2] for file in files)
    if total > MAX_PACKAGE_BYTES:
        how = ("move them out of the directory" if what.startswith("sync_workspace") else
               "runtime_env={'excludes': [...]} (patterns like 'data/' or '*.ckpt')")
        raise ValueError(f"{what}: {path} holds {total / (1 << 20):.0f} MiB, more than the "
                         f"{MAX_PACKAGE_BYTES >> 20} MiB a package may hold; leave large files out: {how}")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        for rel, full, _size, mode, _mtime in files:
            info = zipfile.ZipInfo(prefix + rel, date_time=_FIXED_TIME)
            info.external_attr = (mode & 0o777) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            with open(full, "rb") as src:
                archive.writestr(info, src.read())
    data = buffer.getvalue()
    packed = (f"{SCHEME}{hashlib.sha256(data).hexdigest()[:32]}.zip", data)
    _packed[key] = (fingerprint, packed)  # (the latest only: an edited directory replaces its old zip)
    return packed


def _files(path: str, excludes: tuple):
    """(name in the zip, path, size, mode, mtime) of each file under ``path``, in a fixed
    order, leaving out what ``excludes`` and the directory's ``.gitignore`` files name."""
    if os.path.isfile(path):
        st = os.stat(path)
        yield os.path.basename(path), path, st.st_size, st.st_mode, st.st_mtime_ns
        return
    use_gitignore = os.environ.get("MESHRT_RUNTIME_ENV_IGNORE_GITIGNORE", "0") != "1"
    given = [("", pathspec.GitIgnoreSpec.from_lines(excludes))] if excludes else []
    rules = {"": _gitignore(path, "") if use_gitignore else []}
    for root, dirs, names in os.walk(path):
        rel_root = os.path.relpath(root, path)
        rel_root = "" if rel_root == "." else rel_root.replace(os.sep, "/") + "/"
        inherited = rules.pop(rel_root)
        specs = inherited + given  # (the user's excludes have the last word)
        kept = []
        for d in sorted(dirs):
            inner = rel_root + d + "/"
            if d in _SKIPPED_DIRS or _ignored(inner, specs):
                continue
            kept.append(d)
            rules[inner] = inherited + (_gitignore(os.path.join(root, d), inner) if use_gitignore else [])
        dirs[:] = kept
        for name in sorted(names):
            rel = rel_root + name
            full = os.path.join(root, name)
            if _ignored(rel, specs) or not os.path.isfile(full):
                continue
            st = os.stat(full)
            yield rel, full, st.st_size, st.st_mode, st.st_mtime_ns


def _gitignore(directory: str, rel: str) -> list:
    """The rules of ``directory/.gitignore`` (as Ray honours them), as [(``rel``, the
    directory's place, where they apply from; spec)]; none where it has no such file."""
    try:
        with open(os.path.join(directory, ".gitignore")) as f:
            return [(rel, pathspec.GitIgnoreSpec.from_lines(f))]
    except OSError:
        return []


def _ignored(rel: str, specs: list) -> bool:
    """Whether the last rule that speaks of ``rel`` (a directory ends in "/") leaves it
    out: deeper .gitignore files speak after shallower ones, as in git."""
    ignored = False
    for base, spec in specs:
        if rel.startswith(base):
            verdict = spec.check_file(rel[len(base):]).include
            if verdict is not None:
                ignored = verdict
    return ignored


def _fingerprint(files: list) -> int:
    """Names, sizes and modification times: a changed file packs again."""
    return hash(tuple((rel, size, mtime) for rel, _full, size, _mode, mtime in files))


def new_host_dir() -> str:
    """Where this host's processes unpack packages; its owner removes it as it stops. Made
    by the first process that needs it (``host_dir``), so a host that never unpacks
    anything leaves nothing behind, even if it is killed."""
    return os.path.join(temp_root.root(), f"meshrt-env-{uuid.uuid4().hex[:16]}")


def host_dir() -> str:
    """This host's directory (``MESHRT_ENV_DIR``), made on first use (owner-only)."""
    root = os.environ.get("MESHRT_ENV_DIR")
    if not root:
        raise RuntimeEnvSetupError("this process has no host runtime directory to unpack into "
                                   "(runtime_env is applied in worker processes only)")
    os.makedirs(root, mode=0o700, exist_ok=True)
    return root


def remove_host_dir(path: str | None) -> None:
    if path:
        shutil.rmtree(path, ignore_errors=True)


def sha_of(uri: str) -> str:
    return uri.removeprefix(SCHEME).removesuffix(".zip")


def fetch(core, uri: str) -> bytes:
    """The package's bytes, from the controller, checked against its name."""
    data = core.request_sync("get_package", uri)
    if data is None:
        raise RuntimeEnvSetupError(f"{uri}: the driver does not hold this package (was it packed by "
                                   "a process of another job?)")
    if hashlib.sha256(data).hexdigest()[:32] != sha_of(uri):
        raise RuntimeEnvSetupError(f"{uri}: the bytes received do not match the package's hash")
    return data


def local_copy(core, uri: str) -> str:
    """The package unpacked on this host (fetched from the controller the first time);
    known afterwards without a look at the disk (a task's environment asks each time)."""
    known = _unpacked.get(uri)
    if known is not None:
        return known
    root = host_dir()
    target = os.path.join(root, sha_of(uri))
    if not os.path.isdir(target):
        _unpack(core, uri, root, target)
    _unpacked[uri] = target
    return target


def _unpack(core, uri: str, root: str, target: str) -> None:
    with open(target + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # (one process per host unpacks; the rest wait for it)
        if os.path.isdir(target):
            return
        data = fetch(core, uri)
        staging = tempfile.mkdtemp(prefix=".unpacking-", dir=root)
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                for info in archive.infolist():
                    written = archive.extract(info, staging)
                    mode = (info.external_attr >> 16) & 0o777
                    if mode:
                        os.chmod(written, mode)
            os.rename(staging, target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
