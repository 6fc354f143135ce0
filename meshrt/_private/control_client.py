"""One request to a controller from outside the cluster's processes (the command
line, a driver attaching to a long-running head): connect with the token, ask, close."""

from __future__ import annotations

import asyncio

from . import messages as m
from . import wire


async def request_once(address: str, token: bytes, method: str, args: tuple) -> m.Response:
    loop = asyncio.get_running_loop()
    reply = loop.create_future()

    def on_messages(conn, msgs):
        for msg in msgs:
            if type(msg) is m.Response and not reply.done():
                reply.set_result(msg)

    conn = await wire.connect(address, token, on_messages=on_messages)
    try:
        conn.send(m.Request(1, method, args))
        return await reply
    finally:
        conn.close()
