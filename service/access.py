"""Request id, JSON access log, per-endpoint metrics and the request's trace span as plain ASGI middleware.

Plain ASGI rather than `@app.middleware("http")`: Starlette's BaseHTTPMiddleware wraps every request in an
anyio task group and memory streams, which cost about as much as the rest of the framework
on a search.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from typing import Any

from starlette.datastructures import Headers, MutableHeaders
from starlette.routing import Mount
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.engine.metrics import Metrics
from service.engine.tracing import Tracing
from service.errors import error_body
from service.logs import request_id

log = logging.getLogger(__name__)
access = logging.getLogger("strata.access")


SUMMARY_EVERY_S = 10.0
# the methods counted under their own name in the metrics' `method` label; any other is counted as "other"
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"})


class AccessSummary:
    """On a terminal, one line per `every` seconds that saw requests instead of one per request (a load test would
    push everything else out of the scrollback): counts by route and status class, p50 and max latency. The page
    and `/stats` have the details; off a terminal (JSON logs) every request keeps its own line."""

    def __init__(self, every: float = SUMMARY_EVERY_S) -> None:
        import threading

        self.every = every
        self._lock = threading.Lock()
        self._routes: dict[str, int] = {}
        self._status = {"2xx": 0, "3xx": 0, "4xx": 0, "5xx": 0}
        self._ms: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="access-summary", daemon=True)
        self._thread.start()

    def add(self, method: str, endpoint: str, status: int, ms: float) -> None:
        with self._lock:
            key = f"{method} {endpoint}"
            self._routes[key] = self._routes.get(key, 0) + 1
            cls = f"{min(max(status // 100, 2), 5)}xx"
            self._status[cls] += 1
            self._ms.append(ms)

    def line(self) -> str | None:
        """The window's summary (and a new window), or None when it saw no request."""
        with self._lock:
            if not self._ms:
                return None
            routes, status, ms = self._routes, self._status, sorted(self._ms)
            self._routes, self._status, self._ms = {}, dict.fromkeys(status, 0), []
        top = ", ".join(f"{k} {n:,}" for k, n in sorted(routes.items(), key=lambda kv: -kv[1])[:4])
        codes = ", ".join(f"{k} {n:,}" for k, n in status.items() if n)
        return (f"{len(ms):,} requests in the last {self.every:.0f}s ({top}; {codes}); p50 "
                f"{ms[len(ms) // 2]:.1f} ms, max {ms[-1]:.1f} ms (details: /stats and the page)")

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            text = self.line()
            if text:
                access.info("%s", text)

    def close(self) -> None:
        self._stop.set()
        text = self.line()
        if text:
            access.info("%s", text)


class AccessLog:
    """Outermost app middleware: tags the response with X-Request-ID, counts and times it by route template,
    logs one line (or feeds the terminal's `AccessSummary`), traces it (when tracing is on), and answers an
    unhandled exception with a 500 that carries the request id. The request's span ends before the last body
    message goes out: once the client has the response, the span is exported (ended after the send, a client
    reading its trace could miss it); the request is counted as that message is sent, for the same reason."""

    def __init__(self, app: ASGIApp, metrics: Metrics, tracing: Tracing | None = None,
                 summary: AccessSummary | None = None) -> None:
        self.app, self.metrics, self.tracing, self.summary = app, metrics, tracing, summary
        # (latency, count) series by (endpoint, method, status), looked up once: a `labels` call takes a lock and
        # builds its key on every request otherwise (prometheus keeps a series per label values anyway)
        self._series: dict[tuple[str, str, int], tuple[Any, Any]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        rid = headers.get("x-request-id", "")[:64] or os.urandom(16).hex()  # (uuid4().hex: 10x the CPU)
        token = request_id.set(rid)
        span = self.tracing.start_request(scope["method"], scope["path"], headers, rid) \
            if self.tracing is not None and self.tracing.enabled else None
        t0 = time.perf_counter()
        status = 0
        recorded = False

        async def tagged(message: Message) -> None:
            nonlocal status, recorded
            last = message["type"] == "http.response.pathsend" or (
                message["type"] == "http.response.body" and not message.get("more_body"))
            if message["type"] == "http.response.start":
                status = message["status"]
                MutableHeaders(scope=message).append("X-Request-ID", rid)
            elif span is not None and last:
                Tracing.end_request(span, scope["method"], _route(scope), status)
            await send(message)
            if last and not recorded:
                # counted as its last byte is handed to the server, before the event loop can take the client's
                # next request: a static file's response returns only after its file is closed on a worker
                # thread, and a /metrics read in between did not count it yet (a flaky test under load)
                recorded = True
                self._record(scope, status, time.perf_counter() - t0)

        try:
            try:
                await self.app(scope, receive, tagged)
            except Exception:  # answered here so that it is logged with its request id and counted
                log.exception("unhandled error on %s %s", scope["method"], printable(scope["path"]))
                if status:  # the response had started: nothing more can be sent
                    raise
                body = json.dumps(error_body(scope["path"], 500, "internal error") | {"request_id": rid}).encode()
                await tagged({"type": "http.response.start", "status": 500,
                              "headers": [(b"content-type", b"application/json"),
                                          (b"content-length", str(len(body)).encode())]})
                await tagged({"type": "http.response.body", "body": body})
            if not recorded:  # (a response that never finished: a disconnect, an app that sent nothing)
                self._record(scope, status, time.perf_counter() - t0)
        finally:
            if span is not None:  # ended already unless the response never finished (an error, a disconnect)
                Tracing.end_request(span, scope["method"], _route(scope), status)
                Tracing.leave_request(span)
            request_id.reset(token)

    def _record(self, scope: Scope, status: int, elapsed: float) -> None:
        # The matched route's template (routing sets it in the shared scope), never the raw path: unknown
        # URLs must not create new label values.
        endpoint = _route(scope) or "unmatched"
        method = scope["method"]
        if method not in METHODS:  # a client's word (PROPFIND, or any token h11 takes): one label value for them all
            method = "other"
        series = self._series.get((endpoint, method, status)) or self._new_series(endpoint, method, status)
        series[0].observe(elapsed)
        series[1].inc()
        if status >= 400:
            self.metrics.errors.labels(endpoint, str(status)).inc()
        if self.summary is not None:
            self.summary.add(method, endpoint, status, elapsed * 1000)
            return
        if not access.isEnabledFor(logging.INFO):  # (STRATA_LOG_LEVEL=warning: no line, so no fields to build)
            return
        client = scope.get("client")
        access.info("%s %s %d", method, printable(scope["path"]), status,
                    extra={"method": method, "path": scope["path"], "status": status,
                           "ms": round(elapsed * 1000, 3), "client": client[0] if client else None})


    def _new_series(self, endpoint: str, method: str, status: int) -> tuple[Any, Any]:
        m = self.metrics
        series = m.request_latency.labels(endpoint, method), m.requests.labels(endpoint, method, str(status))
        self._series[endpoint, method, status] = series
        return series


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """A request's path as a log message carries it: its control characters escaped (`\\n`, `\\x1b`). The path
    is percent-decoded: `/a%0A03:40:00 WARNING …` wrote a forged line into a text log, and `%1B[2J` cleared the
    operator's terminal. (The JSON log's `path` field keeps the path as it is: JSON escapes it.)"""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def _route(scope: Scope) -> str | None:
    """The matched route's template (routing sets it in the shared scope), None when nothing matched; without its
    parameters' convertors (Starlette's `path_format`: `/documents/{doc_id}`, not `/documents/{doc_id:doc_id}`),
    which are how it is parsed, not which endpoint it is. A mount (the page's files) is one endpoint: its own path,
    not `/static/{path}`."""
    route = scope.get("route")
    if isinstance(route, Mount):
        return route.path
    # FastAPI >= 0.160 keeps an included router's routes as written (`scope["route"]`: `/search` for a request to
    # `/collections/{name}/search`) and puts the route as served, its inclusion's prefix included, beside them
    served = scope.get("fastapi", {}).get("effective_route_context") if isinstance(scope.get("fastapi"), dict) \
        else None
    if served is not None and getattr(served, "original_route", None) is route:
        return getattr(getattr(served, "starlette_route", None), "path_format", None) or served.path_format
    return getattr(route, "path_format", None)
