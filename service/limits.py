"""Request body cap as plain ASGI middleware: the body is read (up to the cap) before the app sees it. A snapshot
upload (`POST …/snapshots/upload`) is not buffered: its route streams it to disk under `max_snapshot_bytes`."""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.errors import error_body

STREAMED_SUFFIX = "/snapshots/upload"  # a snapshot upload: streamed to disk by its route, under its own cap


class BodySizeLimit:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def _too_large(self, scope: Scope, send: Send, size: str) -> None:
        message = f"request body is {size} bytes; the limit is {self.max_bytes}"
        body = json.dumps(error_body(scope["path"], 413, message)).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (scope["method"] == "POST" and scope["path"].endswith(STREAMED_SUFFIX)):
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            await self._too_large(scope, send, length.decode())  # refused before reading a byte of it
            return
        chunks, size = [], 0
        while True:  # chunked bodies have no length header: count while reading, stop at the cap
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._too_large(scope, send, f"more than {self.max_bytes}")
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()  # after the body: wait for the disconnect like the server would

        await self.app(scope, replay, send)
