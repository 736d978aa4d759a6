"""A real HTTP server on 127.0.0.1 that answers from a script (status, headers, JSON body), in order, and records
when each request arrived: for the retry rules against answers a Strata server gives only in passing (a 503 with
Retry-After while its write log is briefly unwritable)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Answer = tuple[int, dict[str, str], Any]


class Scripted:
    def __init__(self, answers: list[Answer]) -> None:
        self.answers, self.arrivals, self.paths = list(answers), [], []  # type: ignore[var-annotated]
        self.lock = threading.Lock()

    def next(self, path: str) -> Answer:
        with self.lock:
            self.arrivals.append(time.monotonic())
            self.paths.append(path)
            return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]  # the last one repeats


@contextmanager
def scripted_server(answers: list[Answer]) -> Iterator[tuple[str, Scripted]]:
    script = Scripted(answers)

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            status, headers, body = script.next(self.path)
            data = json.dumps(body).encode()
            self.send_response(status)
            for k, v in (headers | {"Content-Type": "application/json"}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = _answer

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", script
    finally:
        httpd.shutdown()
        httpd.server_close()
