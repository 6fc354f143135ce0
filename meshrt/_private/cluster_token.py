"""The cluster token every connection proves it knows (wire.py's HMAC handshake).

Both sides read it from ``MESHRT_TOKEN`` (hex or text) or from a file
(``--token-file`` / ``MESHRT_TOKEN_FILE``). A driver that listens on TCP with
neither generates one and writes it to DEFAULT_FILE (mode 0600), which an agent
on the same machine or a shared home directory reads by default.
"""

from __future__ import annotations

import os
import secrets

DEFAULT_FILE = os.path.join(os.path.expanduser("~"), ".meshrt", "cluster_token")


def _decode(text: str) -> bytes:
    text = text.strip()
    try:
        return bytes.fromhex(text)
    except ValueError:
        return text.encode()


def from_env_or_file(token_file: str | None = None) -> bytes | None:
    env = os.environ.get("MESHRT_TOKEN")
    if env:
        return _decode(env)
    path = token_file or os.environ.get("MESHRT_TOKEN_FILE")
    if path:
        try:
            with open(path) as f:
                return _decode(f.read())
        except OSError as err:
            raise ValueError(f"cannot read the cluster token file {path}: {err.strerror}") from None
    return None


def generate_and_write(path: str = DEFAULT_FILE) -> bytes:
    token = secrets.token_bytes(32)
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token.hex())
    return token
