"""``meshrt debug``: the breakpoints waiting on this host, and a terminal for them
(as ``ray debug``, with Monarch's ``monarch debug`` commands for meshes).

At its prompt: an index (or ``attach INDEX``, or ``attach NAME RANK`` for a mesh
actor) attaches the terminal to that breakpoint until its call goes on (``c``) or
returns; Ctrl-C detaches, leaving it waiting on this terminal (its index attaches
again); ``list`` (or Enter) lists them again;
``cast NAME ranks(...) COMMAND`` runs one pdb command in many of a mesh's actors at
once and prints each one's answer; ``continue`` lets every breakpoint here go on;
``quit`` (or the end of input) lets the ones this terminal attached to go on and
leaves the others waiting.

The terminal is read with select() on its raw descriptor, one line at a time, and a
line goes to a session only once it asks for one (debug_sessions.READY, whatever its
prompt): lines typed ahead (or piped) stay for whatever asks next, not lost to a
session that ended.
"""

from __future__ import annotations

import codecs
import os
import re
import select
import socket
import sys
import time

from . import debug_sessions
from .debug_sessions import READY

_CAST_WAIT_S = 30.0  # (for a session still running the previous command)


class _Terminal:
    """Lines from a descriptor, with what was read past the last line kept."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.pending = b""
        self.ended = False

    def line_ready(self) -> bool:
        return b"\n" in self.pending or (self.ended and bool(self.pending))

    def read_more(self) -> None:
        chunk = os.read(self.fd, 4096)
        if chunk:
            self.pending += chunk
        else:
            self.ended = True

    def take_line(self) -> str | None:
        """A complete line already read (without its newline), or None."""
        if b"\n" in self.pending:
            line, _, self.pending = self.pending.partition(b"\n")
        elif self.ended and self.pending:
            line, self.pending = self.pending, b""
        else:
            return None
        return line.decode(errors="replace")

    def readline(self) -> str | None:
        """The next line, waiting for it; None at the end of input."""
        while not self.line_ready() and not self.ended:
            self.read_more()
        return self.take_line()


class _Link:
    """This terminal's connection to one breakpoint's pdb."""

    def __init__(self, record: dict, conn: socket.socket) -> None:
        self.record = record
        self.conn = conn
        self.output = ""  # (read, not shown yet)
        self.ready = False  # (its pdb asked for a line: debug_sessions.READY)
        self.prompt = ""  # (what it showed as it asked: shown again when a terminal attaches after cast)
        self.open = True
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")  # (a character split between reads)

    def read_some(self) -> None:
        data = self.conn.recv(65536)
        if not data:
            self.open = self.ready = False
            return
        text = self._decoder.decode(data)
        if READY in text:
            self.ready = text.endswith(READY)  # (nothing follows the request until it has its line)
            text = text.replace(READY, "")
        self.output += text
        if self.ready:
            self.prompt = self.output.rpartition("\n")[2]

    def wait(self, timeout: float, for_end: bool = False) -> bool:
        """Read until it asks for a line (or, ``for_end``, the session ends); False when
        ``timeout`` passes first."""
        deadline = time.monotonic() + timeout
        while self.open and (for_end or not self.ready):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.conn], [], [], left)[0]:
                return False
            self.read_some()
        return for_end or self.ready

    def send(self, line: str) -> None:
        self.ready = False
        self.conn.sendall(line.encode() + b"\n")

    def close(self) -> None:
        self.open = self.ready = False
        self.conn.close()


class Client:
    def __init__(self, terminal: _Terminal, out) -> None:
        self.terminal = terminal
        self.out = out
        self.links: dict[str, _Link] = {}  # socket path -> the breakpoints attached to
        self.shown: list[dict] = []  # (the last list, by index)

    def say(self, text: str = "") -> None:
        print(text, file=self.out, flush=True)

    def breakpoints(self) -> list[dict]:
        """Those attached to here (whose records went when they were taken) and those
        waiting, oldest first."""
        self.links = {path: link for path, link in self.links.items() if link.open}
        attached = [link.record for link in self.links.values()]
        return sorted(attached + debug_sessions.waiting(), key=lambda r: r.get("time", 0))

    def run(self) -> int:
        self.show()
        try:
            while True:
                self.out.write("meshrt debug> ")
                self.out.flush()
                line = self.terminal.readline()
                if line is None:
                    self.say()
                    return 0
                try:
                    if not self.command(line.strip()):
                        return 0
                except KeyboardInterrupt:
                    self.say("\n(interrupted)")
        except KeyboardInterrupt:
            self.say()
            return 0
        finally:
            for link in self.links.values():  # (their calls go on: pdb reads the end of input)
                link.close()

    def command(self, text: str) -> bool:
        """One command; False to quit."""
        words = text.split(None, 1)
        verb, rest = (words[0], words[1] if len(words) > 1 else "") if words else ("", "")
        if verb in ("", "l", "list"):
            self.show()
        elif verb in ("q", "quit", "exit"):
            return False
        elif verb in ("h", "help"):
            self.say(__doc__.split("\n\n")[1])
        elif verb in ("c", "continue"):
            self.continue_all()
        elif verb == "cast":
            self.cast(rest)
        elif verb.isdigit() or verb in ("a", "attach"):
            record = self.pick(text if verb.isdigit() else rest)
            if record is not None:
                return self.attach(record)
        else:
            self.say(f"Unknown command {verb!r}: try help.")
        return True

    def show(self) -> None:
        self.shown = records = self.breakpoints()
        if not records:
            self.say("No breakpoint waits on this host (breakpoint() in a task or actor stops there). "
                     "Enter to look again, help for the commands, Ctrl-D to quit.")
            return
        rows = [("index", "since", "task", "actor rank", "where", "pid")]
        for i, r in enumerate(records):
            where = f"{os.path.basename(r.get('file', '?'))}:{r.get('line', '?')}"
            if r.get("error"):
                where += f" ({r['error'][:60]})"
            actor = f"{r['actor']} {r['rank']}" if "actor" in r else "-"
            attached = " (attached)" if r.get("socket") in self.links else ""
            rows.append((str(i), time.strftime("%H:%M:%S", time.localtime(r.get("time", 0))),
                         str(r.get("task")), actor, where, str(r.get("pid")) + attached))
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        self.say("Breakpoints on this host:")
        for row in rows:
            self.say(" | ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
        self.say("Enter an index to attach (or attach NAME RANK), list, cast NAME ranks(...) COMMAND, "
                 "continue, help, quit.")

    def pick(self, text: str) -> dict | None:
        """The breakpoint an index (of the last list) or ``NAME RANK`` names."""
        words = text.split()
        if len(words) == 1 and words[0].isdigit():
            if int(words[0]) < len(self.shown):
                return self.shown[int(words[0])]
            self.say(f"No breakpoint {words[0]}: give an index from the list.")
            return None
        if len(words) == 2 and words[1].isdigit():
            for record in self.breakpoints():
                if record.get("actor") == words[0] and record.get("rank") == int(words[1]):
                    return record
            self.say(f"No breakpoint waits in {words[0]} rank {words[1]} on this host.")
            return None
        self.say("attach takes an index from the list, or a mesh actor's NAME and RANK.")
        return None

    def link(self, record: dict) -> _Link | None:
        path = record.get("socket", "")
        link = self.links.get(path)
        if link is not None and link.open:
            return link
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(path)
        except OSError as err:
            conn.close()
            if isinstance(err, ConnectionRefusedError):  # (nobody listens: killed while it waited)
                debug_sessions.forget(record)
            self.say(f"The breakpoint of pid {record.get('pid')} went on meanwhile (or another terminal took it).")
            return None
        link = self.links[path] = _Link(record, conn)
        return link

    def attach(self, record: dict) -> bool:
        """This terminal is the session's until its call goes on (True) or the input ends
        (False); Ctrl-C detaches, leaving it waiting."""
        link = self.link(record)
        if link is None:
            return True
        terminal = self.terminal
        if link.ready and not link.output:
            link.output = link.prompt  # (read before, by cast: shown again)
        try:
            while True:
                if link.output:
                    self.out.write(link.output)
                    self.out.flush()
                    link.output = ""
                if not link.open:
                    self.say()
                    self.links.pop(record["socket"], None)
                    return True
                if link.ready and terminal.line_ready():
                    link.send(terminal.take_line())
                    continue
                if link.ready and terminal.ended:
                    return False
                waits = [link.conn] + ([terminal.fd] if link.ready else [])
                readable = select.select(waits, [], [])[0]
                if link.conn in readable:
                    link.read_some()
                if terminal.fd in readable:
                    terminal.read_more()
        except KeyboardInterrupt:
            self.say("\nDetached: it waits, attached to this terminal alone; give its index to go back to it "
                     "(quit lets it go on).")
            return True
        except OSError:
            link.close()
            self.links.pop(record["socket"], None)
            self.say("\nThe session ended (its process went away, or another terminal took it).")
            return True

    def cast(self, text: str) -> None:
        """``NAME ranks(...) COMMAND``: the command in each matching actor's pdb."""
        found = re.fullmatch(r"(\S+)\s+ranks\((.*?)\)\s+(.+)", text)
        if found is None:
            self.say("cast NAME ranks(...) COMMAND, e.g. cast trainers ranks(0:4) p loss")
            return
        name, ranks_text, pdb_command = found.groups()
        try:
            wanted = parse_ranks(ranks_text)
        except ValueError as err:
            self.say(str(err))
            return
        targets = [r for r in self.breakpoints() if r.get("actor") == name and wanted(r["rank"], r.get("coords", {}))]
        if not targets:
            self.say(f"No breakpoint of {name} ranks({ranks_text}) waits on this host.")
            return
        sent = []
        for link in filter(None, map(self.link, targets)):
            try:
                if link.wait(_CAST_WAIT_S):
                    link.output = ""  # (what it showed before: its stop, or an earlier answer)
                    link.send(pdb_command)
                    sent.append(link)
                    continue
            except OSError:  # (taken by another terminal as this one connected, or its process ended)
                self.drop(link)
            self.say(f"[{name} {link.record['rank']}] busy or gone: not sent")
        for link in sorted(sent, key=lambda k: k.record["rank"]):
            try:
                link.wait(_CAST_WAIT_S)
            except OSError:
                self.drop(link)
            answer, link.output = link.output, ""
            if link.ready:  # (its prompt for the next command ends the answer)
                answer = answer.removesuffix(link.prompt)
            answer = answer.rstrip("\n")
            for line in answer.splitlines() or [""]:
                self.say(f"[{name} {link.record['rank']}] {line}")
            if not link.open:
                self.drop(link)

    def continue_all(self) -> None:
        """Every breakpoint on this host goes on."""
        went = 0
        for record in self.breakpoints():
            link = self.link(record)
            if link is None:
                continue
            try:
                if link.wait(_CAST_WAIT_S):
                    link.send("c")
                    link.wait(_CAST_WAIT_S, for_end=True)  # (until its pdb lets go)
                    went += 1
            except OSError:  # (taken by another terminal as this one connected, or its process ended)
                pass
            self.drop(link)
        self.say(f"{went} breakpoint(s) went on.")

    def drop(self, link: _Link) -> None:
        link.close()
        self.links.pop(link.record.get("socket", ""), None)


def parse_ranks(text: str):
    """Monarch's rank selections: ``3``, ``1,2``, ``0:4``, ``0:8:2``, or by dimension
    ``gpus=0:2, hosts=1`` / ``gpus=(0,3)``; a test of (rank, coords)."""

    def one(part: str):
        part = part.strip().strip("()")
        if ":" in part:
            bounds = [int(b) if b.strip() else None for b in part.split(":")]
            if len(bounds) > 3:
                raise ValueError
            chosen = range(bounds[0] or 0, bounds[1] if bounds[1] is not None else 1 << 30,
                           bounds[2] if len(bounds) == 3 and bounds[2] else 1)
            return lambda value: value in chosen
        values = {int(v) for v in part.split(",") if v.strip()}
        return lambda value: value in values

    try:
        if "=" not in text:
            test = one(text)
            return lambda rank, coords: test(rank)
        dims = {}
        for name, value in re.findall(r"(\w+)\s*=\s*(\([^)]*\)|[^,]+)", text):
            dims[name] = one(value)
        if not dims:
            raise ValueError
        return lambda rank, coords: all(name in coords and test(coords[name]) for name, test in dims.items())
    except ValueError:
        raise ValueError(f"ranks({text}): give a rank, ranks 1,2, a range 0:4 (0:8:2), or dims as "
                         "gpus=0:2, hosts=1") from None


def main(stdin_fd: int | None = None, out=None) -> int:
    try:
        debug_sessions.directory()
    except RuntimeError as err:  # (the directory: says what to change)
        print(err, file=sys.stderr)
        return 1
    terminal = _Terminal(sys.stdin.fileno() if stdin_fd is None else stdin_fd)
    return Client(terminal, out or sys.stdout).run()
