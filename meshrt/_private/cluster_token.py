"""The cluster token every connection proves it knows (wire.py's HMAC handshake).

Both sides read it from ``MESHRT_TOKEN`` (hex or text) or from a file
(``--token-file`` / ``MESHRT_TOKEN_FILE``). A driver that listens on TCP with
neither uses the one in DEFAULT_FILE, or generates one and writes it there (mode
0600), which an agent on the same machine or a shared home directory reads by
default. Drivers of one user share it: a second driver must not lock out the
agents of the first.
"""

from __future__ import annotations

import os
import secrets
import tempfile

DEFAULT_FILE = os.path.join(os.path.expanduser("~"), ".meshrt", "cluster_token")


def _decode(text: str) -> bytes:
    text = text.strip()
    try:
        return bytes.fromhex(text)
    except ValueError:
        return text.encode()


def from_env_or_file(token_file: str | None = None) -> bytes | None:
    """The token from, in order: the file given (``--token-file``), ``MESHRT_TOKEN``,
    ``MESHRT_TOKEN_FILE``; None if none is set. A file named explicitly wins over
    the environment, which may be left over from another cluster."""
    where = source(token_file)
    return None if where is None else read(where)


def read(where: str) -> bytes:
    """The token at ``where``, as ``source`` names it."""
    if where == "MESHRT_TOKEN":
        return _decode(os.environ["MESHRT_TOKEN"])
    try:
        with open(where) as f:
            return _decode(f.read())
    except OSError as err:
        raise ValueError(f"cannot read the cluster token file {where}: {err.strerror}") from None


def source(token_file: str | None = None) -> str | None:
    """Where from_env_or_file reads the token: a file's path, "MESHRT_TOKEN", or None."""
    if token_file:
        return token_file
    if os.environ.get("MESHRT_TOKEN"):
        return "MESHRT_TOKEN"
    return os.environ.get("MESHRT_TOKEN_FILE") or None


def generate_or_reuse(path: str = DEFAULT_FILE) -> tuple[bytes, bool]:
    """The token in ``path`` if there is one (another driver of this user wrote it, and
    agents may already use it), else a fresh one written there; (token, fresh). The
    file appears whole or not at all (linked into place), so two drivers starting at
    once agree on one token."""
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    token = secrets.token_bytes(32)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".cluster_token.")  # (mode 0600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(token.hex())
        try:
            os.link(tmp, path)
            return token, True
        except FileExistsError:
            with open(path) as f:
                existing = _decode(f.read())
            if not existing:
                raise ValueError(f"the cluster token file {path} is empty: delete it (a new token is "
                                 "generated) or write the cluster's token into it") from None
            return existing, False
    finally:
        os.unlink(tmp)
