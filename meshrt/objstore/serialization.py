"""User values <-> bytes: pickle protocol 5 with out-of-band buffers.

A :class:`Payload` is what travels and what the object table keeps: the pickle
stream, the large buffers beside it (numpy/torch data, bytes over 64 KiB), and the
ids of the ObjectRefs found inside the value, so reference counting can follow
refs that travel inside other values.

Plain ``pickle`` is tried first because it is several times faster than
cloudpickle's Python-level pickler; cloudpickle takes over for what pickle cannot
do or would do wrongly (lambdas, local functions, and anything defined in
``__main__``, which a worker could not import by name).
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import copyreg
import io
import pickle
import sys
import threading
import traceback
from typing import Any

import cloudpickle

from .exception_state import dumps_by_state

# Buffers smaller than this stay inside the pickle stream: a separate frame costs
# more than copying a few KiB.
INBAND_LIMIT = 64 * 1024
# Values whose out-of-band buffers add up to at least this go to the shared-memory
# store (when the caller gives a place for them); smaller ones travel inline.
SHM_THRESHOLD = 100 * 1024

_tls = threading.local()
_MAIN_MARK = b"__main__"
_client = None  # this process's StoreClient, for reading values kept in shared memory


def set_store_client(client) -> None:
    global _client
    _client = client


class Payload:
    """A serialized value: pickle bytes + out-of-band buffers + contained ref ids.

    Large buffers live either beside the pickle bytes (``buffers``) or in the host's
    shared-memory store (``shm``: (key, size, ((offset, nbytes), ...), stream_in_block);
    with ``stream_in_block`` the pickle bytes are the block's first part and ``data``
    is empty). ``copied_out``: every shared-memory buffer is copied by whoever
    unpickles it (a large ``bytes``), so a reader needs no mapping of its own.
    ``loans``: large ``bytes`` lent by a process of this machine, one per buffer
    (meshrt/_private/loans.py); only the loans travel, and the lender's payload keeps
    its own views of the values in ``buffers``.
    """

    __slots__ = ("data", "buffers", "refs", "is_error", "shm", "copied_out", "loans")

    def __init__(self, data: bytes, buffers: tuple = (), refs: tuple = (), is_error: bool = False,
                 shm: tuple | None = None, copied_out: bool = False, loans: tuple | None = None):
        self.data = data
        self.buffers = buffers
        # ((object_id, owner_worker_id), ...) of refs pickled inside the value.
        self.refs = refs
        self.is_error = is_error
        self.shm = shm
        self.copied_out = copied_out
        self.loans = loans

    def __reduce__(self):
        if self.loans is not None:
            return (Payload, (self.data, (), self.refs, self.is_error, None, False, self.loans))
        if self.buffers:
            bufs = tuple(pickle.PickleBuffer(b) for b in self.buffers)
            return (_rebuild_payload, (self.data, bufs, self.refs, self.is_error, self.shm))
        if self.copied_out:
            return (Payload, (self.data, (), self.refs, self.is_error, self.shm, True))
        return (Payload, (self.data, (), self.refs, self.is_error, self.shm))

    @property
    def nbytes(self) -> int:
        if self.shm is not None:
            return len(self.data) + self.shm[1]
        if self.loans is not None:
            return len(self.data) + sum(loan.nbytes for loan in self.loans)
        return len(self.data) + sum(memoryview(b).nbytes for b in self.buffers)

    def __repr__(self) -> str:
        kind = "error" if self.is_error else "value"
        where = " in shared memory" if self.shm is not None else (" lent" if self.loans is not None else "")
        return f"<Payload {kind} {self.nbytes} bytes{where}, {len(self.refs)} refs>"


def _rebuild_payload(data, buffers, refs, is_error, shm=None):
    # Received buffers are views into a receive buffer that several readers may
    # share: hand them out read-only so numpy arrays come back read-only (Ray's rule).
    return Payload(data, tuple(memoryview(b).toreadonly() for b in buffers), refs, is_error, shm)


def ref_sink() -> list | None:
    """The list collecting refs of the value being serialized on this thread, if any."""
    return getattr(_tls, "sink", None)


def serialize(value: Any, place=None, lend=None) -> tuple[Payload, list]:
    """Serialize ``value``; return the payload and the ObjectRef objects found inside.

    Large buffers are copied exactly once: into the shared-memory store through
    ``place(buffers) -> descriptor`` when they add up to SHM_THRESHOLD or more, and
    otherwise into bytes kept beside the pickle. Either way, later writes to the
    caller's array do not change what was sent (the snapshot semantics of ``put``
    and ``.remote()``). Large ``bytes`` only (immutable: no snapshot needed) may
    instead be lent in place by ``lend(buffers) -> loans or None``. Raises TypeError
    naming the type when the value cannot be pickled.
    """
    t = type(value)
    if t in _SCALARS or ((t is str or t is bytes) and len(value) < INBAND_LIMIT):
        # (most results: nothing to look for inside, one plain pickle does)
        return Payload(pickle.dumps(value, protocol=5)), []
    sink: list = []
    buffers: list = []
    copied: dict = {}  # id -> PickleBuffer of each large bytes (see _BigBytes; kept: ids stay unique)
    # id(raw view) -> (view, from copied?): every attempt's views kept alive too, as a
    # failed attempt (plain pickle, then our reducers) leaves its own behind
    kinds: dict = {}

    def keep(pb: pickle.PickleBuffer):
        raw = pb.raw()
        if raw.nbytes < INBAND_LIMIT:
            return True
        buffers.append(raw)
        kinds[id(raw)] = (raw, id(pb) in copied)
        return False

    previous, previous_copied = getattr(_tls, "sink", None), getattr(_tls, "copied", None)
    _tls.sink, _tls.copied = sink, copied
    try:
        data = _pickle_value(big_bytes_out_of_band(value), keep, sink, buffers)
    finally:
        _tls.sink, _tls.copied = previous, previous_copied
    n_copied = sum(1 for b in buffers if kinds[id(b)][1])
    refs: tuple = ()
    if sink:
        seen: dict = {}
        for ref in sink:
            seen.setdefault((ref._id, ref._owner), None)
        refs = tuple(seen)
    if lend is not None and buffers and n_copied == len(buffers) and len(data) < INBAND_LIMIT:
        loaned = lend(buffers)
        if loaned is not None:
            return Payload(data, tuple(buffers), refs, loans=loaned), sink
    if place is not None and (buffers or len(data) >= SHM_THRESHOLD):
        total = len(data) + sum(b.nbytes for b in buffers)
        if total >= SHM_THRESHOLD:
            # Big pickle streams (large bytes, long lists) go in the block too, first.
            if len(data) >= INBAND_LIMIT:
                return Payload(b"", (), refs, shm=place([data, *buffers]) + (True,)), sink
            if buffers:
                return Payload(data, (), refs, shm=place(buffers) + (False,), copied_out=n_copied == len(buffers)), sink
    if not buffers:
        return Payload(data, (), refs), sink
    return Payload(data, tuple(memoryview(bytes(b)) for b in buffers), refs), sink


_SCALARS = frozenset((type(None), bool, int, float))


class _BigBytes:
    """Marks a large bytes/bytearray for the out-of-band path.

    pickle copies ``bytes`` into its stream (its C fast path never asks a reducer),
    which for megabytes means a temporary copy, a scan of it, and a second copy into
    the store. Wrapped, the bytes go to the store in one copy, and the reader makes
    the one copy a ``bytes`` object needs.
    """

    __slots__ = ("value",)

    def __init__(self, value) -> None:
        self.value = value

    def __reduce_ex__(self, protocol):
        if protocol < 5:
            return (type(self.value), (bytes(self.value),))
        buffer = pickle.PickleBuffer(self.value)
        copied = getattr(_tls, "copied", None)
        if copied is not None:  # bytes(buffer) on the other side copies it out
            copied[id(buffer)] = buffer
        return (type(self.value), (buffer,))


def big_bytes_out_of_band(value: Any) -> Any:
    """``value``, marked for the out-of-band path when it is a large bytes/bytearray.

    Called on the values that are usually large (a result, a put, each call
    argument): looking deeper into every container would cost every call.
    """
    t = type(value)
    if (t is bytes or t is bytearray) and len(value) >= INBAND_LIMIT:
        return _BigBytes(value)
    return value


def _pickle_value(value: Any, keep, sink: list, buffers: list) -> bytes:
    """Plain pickle first (fastest); our reducers when torch is loaded or pickle refused
    (a memoryview); cloudpickle for code and anything defined in ``__main__``, which a
    worker could not import by name."""
    for dump in _FAST_DUMPS if "torch" not in sys.modules and not _CUSTOM else _TABLE_DUMPS:
        try:
            data = dump(value, keep)
            if _MAIN_MARK not in data:
                return data
        except Exception:
            pass
        sink.clear()  # a failed attempt may have collected refs and buffers
        buffers.clear()
    table = collections.ChainMap(_reducers(), cloudpickle.Pickler.dispatch_table)
    try:
        return _dump_with(_CloudPickler, table, value, keep)
    except Exception as exc:
        raise TypeError(f"cannot serialize a value of type {type(value).__qualname__}: {exc}") from exc


def _plain_dumps(value: Any, keep) -> bytes:
    return pickle.dumps(value, protocol=5, buffer_callback=keep)


def _table_dumps(value: Any, keep) -> bytes:
    return _dump_with(pickle.Pickler, _dispatch_table(), value, keep)


_FAST_DUMPS = (_plain_dumps, _table_dumps)
_TABLE_DUMPS = (_table_dumps,)


def _dump_with(pickler_class, table, value: Any, keep) -> bytes:
    out = io.BytesIO()
    if pickler_class is pickle.Pickler:
        pickler = pickler_class(out, protocol=5, buffer_callback=keep)
        pickler.dispatch_table = table
    else:
        pickler = pickler_class(out, protocol=5, buffer_callback=keep, table=table)
    pickler.dump(value)
    return out.getvalue()


class _CloudPickler(cloudpickle.Pickler):
    """cloudpickle's Pickler with our dispatch table. (Set before pickle's __init__,
    which reads it: cloudpickle's own class attribute hides the slot a later
    assignment would fill, so that table would never be used.)"""

    def __init__(self, file, *, table, **kwargs) -> None:
        self.dispatch_table = table
        super().__init__(file, **kwargs)


_TABLE: dict | None = None
_TABLE_HAS_TORCH = False
_CUSTOM: dict = {}  # type -> reducer, from meshrt.util.register_serializer (this process only)


def set_custom_reducer(cls: type, reducer) -> None:
    """Values of exactly ``cls`` are pickled as ``reducer(value)`` says, ahead of pickle's
    own way (``None``: back to pickle's)."""
    global _TABLE
    if reducer is None:
        _CUSTOM.pop(cls, None)
    else:
        _CUSTOM[cls] = reducer
    _TABLE = None  # (rebuilt with the change on next use)


def _reducers() -> dict:
    table = {memoryview: _reduce_memoryview}
    if "torch" in sys.modules:
        from .tensors import tensor_reducers

        table.update(tensor_reducers())
    table.update(_CUSTOM)
    return table


def _dispatch_table() -> dict:
    """copyreg's table plus ours (memoryviews; torch tensors once torch is imported)."""
    global _TABLE, _TABLE_HAS_TORCH
    has_torch = "torch" in sys.modules
    if _TABLE is None or (has_torch and not _TABLE_HAS_TORCH):
        table = copyreg.dispatch_table.copy()
        table.update(_reducers())
        _TABLE, _TABLE_HAS_TORCH = table, has_torch
    return _TABLE


def _reduce_memoryview(view: memoryview):
    if not view.contiguous:
        view = memoryview(view.tobytes()).cast(view.format, view.shape) if view.ndim > 1 else memoryview(view.tobytes())
    return (_rebuild_memoryview, (pickle.PickleBuffer(view), view.format, view.shape))


def _rebuild_memoryview(buf, fmt: str, shape: tuple) -> memoryview:
    view = memoryview(buf)
    if view.format != fmt or view.shape != shape:
        view = view.cast("B").cast(fmt, shape)
    return view


def inline_copy(payload: Payload) -> Payload:
    """The same value with its shared-memory buffers copied beside the pickle, for a
    process on another host (which cannot map this host's store). Blocks on a pin."""
    if payload.shm is None:
        return payload
    readonly, _ = _client.open(payload.shm[:3])
    data = payload.data
    if payload.shm[3]:
        data, readonly = bytes(readonly[0]), readonly[1:]
    buffers = tuple(memoryview(bytes(view)) for view in readonly)
    return Payload(data, buffers, payload.refs, payload.is_error)


def deserialize(payload: Payload) -> Any:
    """Rebuild a value; numpy arrays come back as read-only views of the stored bytes, or
    writable ones where values are owned (``owned_values``)."""
    if _values_owned or _owned.get():
        return deserialize_owned(payload)
    return _deserialize_shared(payload)


def _deserialize_shared(payload: Payload) -> Any:
    if payload.shm is not None:
        if _client is None:
            raise RuntimeError("this value lives in a shared-memory store this process cannot reach")
        if payload.copied_out:
            # A large bytes: copied straight out of this process's long-lived mapping of
            # the store, pinned only meanwhile. A private mapping of its own would fault
            # every page in again (about half the cost of the copy) for nothing.
            with _client.reading(payload.shm[:3]) as views:
                return pickle.loads(payload.data, buffers=views)
        readonly, writable = _client.open(payload.shm[:3])
        data = payload.data
        if payload.shm[3]:  # the pickle stream itself lives in the block, first
            data, readonly, writable = readonly[0], readonly[1:], writable[1:]
        # Tensors are rebuilt over the writable (copy-on-write) views; see tensors.py.
        previous = getattr(_tls, "writable", None)
        twins = _tls.writable = _Twins((id(r), w) for r, w in zip(readonly, writable, strict=True))
        try:
            value = pickle.loads(data, buffers=readonly)
        finally:
            _tls.writable = previous
        if not twins.lent and writable:  # (nothing can write to the mapping: the next get may share it)
            _client.share(payload.shm[0], writable[0])
        return value
    if payload.buffers:
        return pickle.loads(payload.data, buffers=payload.buffers)
    if payload.loans is not None:  # read from the lender into bytes that unpickling keeps
        from .._private.loans import read

        return pickle.loads(payload.data, buffers=[read(loan) for loan in payload.loans])
    return pickle.loads(payload.data)


# Monarch's values are their receiver's own (an endpoint may write to an array it was
# given, the client to one it got back), where Ray's are read-only views of the store.
# A process of an actor mesh owns every value it reads (``own_values_here``); the client
# owns what a mesh call gives it (``owned_values()`` around reading it). Stored buffers
# are then mapped copy-on-write, privately: pages are copied only as they are written.
_values_owned = False
_owned: contextvars.ContextVar = contextvars.ContextVar("meshrt_owned_values", default=False)


def own_values_here() -> None:
    global _values_owned
    _values_owned = True


@contextlib.contextmanager
def owned_values():
    token = _owned.set(True)
    try:
        yield
    finally:
        _owned.reset(token)


def deserialize_owned(payload: Payload) -> Any:
    """Rebuild a value its reader owns: arrays over private copy-on-write pages or copies."""
    if payload.shm is not None and not payload.copied_out and _client is not None:
        _, writable = _client.open(payload.shm[:3], fresh=True)
        data = payload.data
        if payload.shm[3]:
            data, writable = writable[0], writable[1:]
        return pickle.loads(data, buffers=writable)
    if payload.buffers:
        return pickle.loads(payload.data, buffers=[_writable(b) for b in payload.buffers])
    # (lent or copied-out large bytes are never written to, and an echo of a lent one is
    # known by the very object read, loans.py; the rest holds no buffer at all)
    return _deserialize_shared(payload)


def _writable(buf):
    """``buf``, or a copy of it that may be written to. A ``bytes`` is a lent bytes value
    (loans.py): immutable anyway, and kept as the very object (an echo is known by it)."""
    return bytearray(buf) if type(buf) is not bytes and memoryview(buf).readonly else buf


def writable_twin(buf) -> memoryview | None:
    """The copy-on-write view behind a read-only shared-memory buffer being unpickled."""
    table = getattr(_tls, "writable", None)
    if not table:
        return None
    twin = table.get(id(buf))
    if twin is not None:
        table.lent = True
    return twin


class _Twins(dict):
    """Read-only buffer id -> its writable twin; ``lent`` once one was handed out."""

    lent = False


def dumps_code(obj: Any) -> bytes:
    """Functions and classes travel by value once per worker (cloudpickle).

    cloudpickle renames the source file of code it sends by value to
    ``<dynamic-code>``; the real file travels beside it so remote tracebacks keep
    file names and source lines (see :func:`loads_code`).
    """
    try:
        return cloudpickle.dumps((_source_file(obj), obj), protocol=5)
    except (TypeError, pickle.PicklingError, AttributeError) as err:
        name = getattr(obj, "__qualname__", None) or repr(obj)
        raise TypeError(f"{name} cannot be sent to a worker: {err}. Something it uses from outside "
                        f"(a global or a variable it closes over: a lock, a file, a connection...) "
                        f"cannot be pickled; create that inside the function or the actor instead") from err


def loads_code(blob: bytes) -> Any:
    filename, obj = pickle.loads(blob)
    if filename:
        _restore_filenames(obj, filename)
    return obj


_DYNAMIC = "<dynamic-code>"


def _source_file(obj: Any) -> str | None:
    code = getattr(obj, "__code__", None)
    if code is not None:
        return code.co_filename
    for value in vars(obj).values() if isinstance(obj, type) else ():
        for fn in _functions_of(value):
            return fn.__code__.co_filename
    return None


def _functions_of(value: Any):
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if isinstance(value, property):
        return [f for f in (value.fget, value.fset, value.fdel) if hasattr(f, "__code__")]
    return [value] if hasattr(value, "__code__") else []


def _fixed(code, filename: str):
    consts = tuple(_fixed(c, filename) if isinstance(c, type(code)) else c for c in code.co_consts)
    if code.co_filename == _DYNAMIC:
        return code.replace(co_filename=filename, co_consts=consts)
    return code.replace(co_consts=consts) if consts != code.co_consts else code


def _restore_filenames(obj: Any, filename: str) -> None:
    targets = []
    if hasattr(obj, "__code__"):
        targets.append(obj)
    elif isinstance(obj, type):
        for value in vars(obj).values():
            targets.extend(_functions_of(value))
    for fn in targets:
        try:
            fn.__code__ = _fixed(fn.__code__, filename)
        except (AttributeError, TypeError, ValueError):
            pass


# -- errors ----------------------------------------------------------------------------


def error_payload(exc: BaseException, function_name: str, pid: int, skip_frames: int = 0) -> Payload:
    """Serialize an exception raised by user code, keeping its type and traceback."""
    from ..exceptions import TaskError

    tb = exc.__traceback__
    for _ in range(skip_frames):
        if tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
    tb_text = "".join(traceback.format_exception(type(exc), exc, tb))
    if isinstance(exc, TaskError):
        cause, cause_repr = exc.cause, exc.cause_repr
        cause_class = type(cause) if cause is not None else _base_cause_class(exc)
    else:
        cause, cause_repr, cause_class = exc, None, type(exc)
    record = ("task", _try_dumps(cause), _try_dumps(cause_class), cause_repr or _describe(exc),
              tb_text, function_name, pid)
    return Payload(pickle.dumps(record, protocol=5), is_error=True)


def system_error_payload(exc: BaseException) -> Payload:
    """Serialize one of meshrt's own errors (ActorDiedError, TaskCancelledError, ...)."""
    return Payload(pickle.dumps(("sys", _try_dumps(exc), repr(exc)), protocol=5), is_error=True)


def is_system_error(payload: Payload) -> bool:
    """An error payload of meshrt's own (``system_error_payload``), not one the user's code raised."""
    return pickle.loads(payload.data)[0] == "sys"


def error_from_payload(payload: Payload) -> BaseException:
    """The exception a ``get`` of this error payload raises."""
    from ..exceptions import MeshrtError, TaskError

    record = pickle.loads(payload.data)
    if record[0] == "sys":
        exc = _try_loads(record[1])
        return exc if isinstance(exc, BaseException) else MeshrtError(record[2])
    _, cause_blob, class_blob, cause_repr, tb_text, function_name, pid = record
    cause = _try_loads(cause_blob)
    cause_class = _try_loads(class_blob)
    if not isinstance(cause, BaseException):
        cause = None
    if not isinstance(cause_class, type):
        cause_class = None
    return TaskError.for_cause(cause, tb_text, function_name, pid, cause_class, cause_repr)


def _base_cause_class(err) -> type | None:
    for klass in type(err).__mro__[1:]:
        if klass.__module__ != "meshrt.exceptions" and issubclass(klass, BaseException):
            return klass if klass not in (Exception, BaseException) else None
    return None


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _try_dumps(obj: Any) -> bytes | None:
    if obj is None:
        return None
    try:
        data = pickle.dumps(obj, protocol=5)
        if _MAIN_MARK in data:
            data = cloudpickle.dumps(obj, protocol=5)
        pickle.loads(data)  # exceptions with odd __init__ signatures fail here, not at the caller
        return data
    except Exception:
        try:
            data = cloudpickle.dumps(obj, protocol=5)
            pickle.loads(data)
            return data
        except Exception:
            return dumps_by_state(obj) if isinstance(obj, BaseException) else None


def _try_loads(blob: bytes | None) -> Any:
    if blob is None:
        return None
    try:
        return pickle.loads(blob)
    except Exception:
        return None
