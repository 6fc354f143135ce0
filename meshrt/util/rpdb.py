"""Breakpoints in tasks and actors (Ray's ``ray.util.rpdb``): ``breakpoint()`` in a
worker waits for ``meshrt debug``.

A worker has no terminal: plain pdb there reads end-of-file at once and ends the call
with BdbQuit. So in every worker ``breakpoint()`` calls ``set_trace`` (unless
``PYTHONBREAKPOINT`` says otherwise), which opens a pdb session on a private Unix
socket (meshrt/_private/debug_sessions.py), says where in the driver's output, and
waits. ``meshrt debug`` on that host lists the waiting breakpoints and attaches the
terminal to one. ``c`` resumes the call; so does closing the terminal; ``q`` ends the
call with BdbQuit, as pdb does. A session ends with its call at the latest (stepping
past its end, or a breakpoint set in it and not reached again). While a session is
attached, the process's ``sys.stdin`` and ``sys.stdout`` are the terminal's, so
``interact``, ``print`` and pdb's own questions reach it. ``MESHRT_DEBUG_POST_MORTEM=1``
also stops a task or actor method that raised, at the exception, before its error is
sent (``post_mortem``).
"""

from __future__ import annotations

import bdb
import os
import pdb
import socket
import sys
import threading

from .._private import context, debug_sessions
from .._private.debug_sessions import READY

__all__ = ["post_mortem", "set_trace"]


class _Wire:
    """The socket as pdb's stdin and stdout. Before each line it reads it sends READY,
    so the terminal knows a line is wanted whatever the prompt (``(com)``, ``((Pdb))``,
    a question). A terminal that went away reads as end of input (so the call goes on)
    and takes what is written without raising it into the call."""

    encoding = "utf-8"
    errors = "replace"

    def __init__(self, conn) -> None:
        self.conn = conn
        # (two files: one text file for both would drop the lines read ahead at each write)
        self.reader = conn.makefile("r", encoding="utf-8", errors="replace", newline="\n")
        self.writer = conn.makefile("w", buffering=1, encoding="utf-8", errors="replace", newline="\n")
        self.closed = False

    def readline(self, size: int = -1) -> str:
        if self.closed:
            return ""
        self.write(READY)
        self.flush()
        try:
            return self.reader.readline()
        except OSError:
            return ""

    def write(self, text: str) -> int:
        if not self.closed:
            try:
                self.writer.write(text)
            except OSError:
                self.closed = True
        return len(text)

    def flush(self) -> None:
        if not self.closed:
            try:
                self.writer.flush()
            except OSError:
                self.closed = True

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self.conn.fileno()

    def close(self) -> None:
        self.flush()
        self.closed = True
        for file in (self.reader, self.writer):
            try:
                file.close()
            except OSError:
                pass
        self.conn.close()


class _SocketPdb(pdb.Pdb):
    """pdb over one socket, for one call: it detaches (and the call goes on) when the
    user continues with no breakpoint left, or the terminal goes away, and ends when
    the call does."""

    def __init__(self, conn) -> None:
        self.wire = _Wire(conn)
        super().__init__(stdin=self.wire, stdout=self.wire, nosigint=True)
        self.use_rawinput = False
        self.thread = threading.get_ident()
        self.task_id = getattr(context.current_call(), "task_id", None)  # (its call: debug_sessions.call_ended)
        self._saved = (sys.stdin, sys.stdout)
        self.detached = False
        sys.stdin, sys.stdout = self.wire, self.wire  # (input(), print(), interact: the terminal's)
        debug_sessions.active[self.thread] = self

    def detach(self) -> None:
        """The terminal is let go: breakpoints set in this session are forgotten (pdb
        keeps them for the whole process) and the process's stdio is its own again."""
        if self.detached:
            return
        self.detached = True
        self.clear_all_breaks()
        if sys.stdin is self.wire:
            sys.stdin = self._saved[0]
        if sys.stdout is self.wire:
            sys.stdout = self._saved[1]
        self.wire.close()

    def call_ended(self) -> None:
        """The executor, on this session's thread: its call returned (or failed)."""
        if not self.wire.closed:
            self.wire.write("\n(the call returned: this session is over)\n")
        self.detach()
        self.quitting = False
        sys.settrace(None)
        frame = sys._getframe()
        while frame is not None:  # (frames still traced up the stack: the executor's own)
            frame.f_trace = None
            frame = frame.f_back

    def do_continue(self, arg):
        done = super().do_continue(arg)
        if not self.breaks:  # (nothing more can stop here: the terminal is free)
            self.detach()
        return done

    do_c = do_cont = do_continue

    def do_EOF(self, arg):
        """The terminal went away: the call goes on."""
        self.set_continue()
        self.detach()
        return 1

    def do_quit(self, arg):
        done = super().do_quit(arg)
        self.detach()
        return done

    do_q = do_exit = do_quit

    def _cmdloop(self) -> None:
        # pdb's own loop takes a KeyboardInterrupt as the user's Ctrl-C and carries on;
        # a cancel (meshrt.cancel) arrives as one too, and must end the call.
        from .._private.executor import TaskInterrupted

        while True:
            try:
                self.allow_kbdint = True
                self.cmdloop()
                self.allow_kbdint = False
                return
            except TaskInterrupted:
                self.message("\n(the call was cancelled)")
                self.detach()
                raise
            except KeyboardInterrupt:
                self.message("--KeyboardInterrupt--")


def _attach(frame, what: str, error: BaseException | None = None) -> _SocketPdb:
    from .. import get_runtime_context

    try:
        task = get_runtime_context().get_task_name()
    except Exception:  # noqa: BLE001 - (outside a runtime: the driver's own code)
        task = None
    where = {"task": task or os.path.basename(sys.argv[0] or "python"), "file": frame.f_code.co_filename,
             "line": frame.f_lineno, "function": frame.f_code.co_name, "kind": what,
             "error": None if error is None else f"{type(error).__name__}: {error}"}
    where.update(getattr(error, "__meshrt_actor__", None) or debug_sessions.mesh_actor())
    session = debug_sessions.Session(where)
    folder = os.environ.get("MESHRT_DEBUG_DIR")
    place = f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"
    sys.stderr.write(f"meshrt: {what} at {place} (pid {os.getpid()}) waits for a debugger: run "
                     f"`{f'MESHRT_DEBUG_DIR={folder} ' if folder else ''}meshrt debug` on host "
                     f"{socket.gethostname()} to attach\n")  # (one write: lines of threads do not mix)
    sys.stderr.flush()
    try:
        conn = session.accept()
    finally:
        session.close()
    return _SocketPdb(conn)


def set_trace(breakpoint_uuid=None) -> None:
    """Stop here and wait for ``meshrt debug`` to attach (``breakpoint()`` in a worker).
    ``breakpoint_uuid`` is accepted for Ray's signature."""
    stop_in(sys._getframe(1))


def stop_in(frame) -> None:
    """Stop at ``frame``'s next line and wait for ``meshrt debug``."""
    _attach(frame, "breakpoint()").set_trace(frame)


def post_mortem(tb=None) -> None:
    """Wait for ``meshrt debug`` at the exception being handled (or at traceback ``tb``),
    to look at the frames it came through."""
    error = sys.exc_info()[1] if tb is None else None
    tb = tb if tb is not None else getattr(error, "__traceback__", None)
    if tb is None:
        raise ValueError("post_mortem() needs a traceback: call it while an exception is handled, or pass one")
    _post_mortem(tb, error)


def stop_at(error: BaseException) -> None:
    """A call that raised ``error`` waits for ``meshrt debug`` before its error is sent
    (MESHRT_DEBUG_POST_MORTEM). Not for a cancel, an exit, or a debugger's own quit."""
    if isinstance(error, Exception) and not isinstance(error, bdb.BdbQuit) and error.__traceback__ is not None:
        _post_mortem(error.__traceback__, error)


def _post_mortem(tb, error: BaseException | None) -> None:
    last = tb
    while last.tb_next is not None:
        last = last.tb_next
    what = f"{type(error).__name__} raised" if error is not None else "an exception"
    debugger = _attach(last.tb_frame, what, error)
    try:
        debugger.reset()
        debugger.interaction(None, tb)
    finally:
        debugger.detach()
