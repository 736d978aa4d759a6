"""One POST to an ASGI app in this process, without a socket or an HTTP parser: what the benches that time the
serving layers (`bench/serving_cpu.py`, `bench/served_overhead.py`, `bench/request_path.py`) call to measure the
app alone, below uvicorn."""

from __future__ import annotations

from typing import Any


async def post(app: Any, body: bytes, path: str = "/search") -> None:  # noqa: ANN401 (any ASGI app)
    """POST `body` (JSON) to `path`; the answer must be a 200 (its body is read by the app and dropped here)."""
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(b"host", b"bench"), (b"content-type", b"application/json"),
                         (b"content-length", str(len(body)).encode())],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80), "state": {}, "app": app}
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    status: list[int] = []

    async def receive() -> dict[str, object]:
        return messages.pop() if messages else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            status.append(message["status"])

    await app(scope, receive, send)
    if status != [200]:
        raise RuntimeError(f"POST {path} answered {status}")
