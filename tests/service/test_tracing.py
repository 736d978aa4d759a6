"""Tracing: the app served by a real uvicorn on 127.0.0.1 (in this process, so that the SDK's in-memory exporter
can be read), a real encoder and FAISS index; and the OTLP/HTTP export, received by a real HTTP listener."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from service.engine.tracing import REQUEST_ID, Tracing, traces_url
from service.main import create_app
from service.settings import Settings
from tests.conftest import REPO, free_port, start_server, stop_server

STEPS = ["queue", "encode", "faiss_search", "store_lookup"]


class InProcessServer:
    """uvicorn serving `app` from a thread of this process."""

    def __init__(self, app: object) -> None:
        import uvicorn

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_config=None,
                                                    access_log=False))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> InProcessServer:
        self.thread.start()
        deadline = time.monotonic() + 120
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "uvicorn did not start"
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


@pytest.fixture(scope="module")
def traced(quora_root: Path) -> Iterator[tuple[InProcessServer, InMemorySpanExporter, Tracing]]:
    settings = Settings(index_root=quora_root, threads=2, watch_interval_s=0)
    exporter = InMemorySpanExporter()
    tracing = Tracing.from_settings(settings, exporter=exporter)
    with InProcessServer(create_app(settings, tracing=tracing)) as srv:
        yield srv, exporter, tracing
    assert tracing.provider is None  # the lifespan shut it down


def spans_of(exporter: InMemorySpanExporter, rid: str) -> dict[str, ReadableSpan]:
    found = {s.name: s for s in exporter.get_finished_spans() if s.attributes.get(REQUEST_ID) == rid}
    return found


def test_a_search_is_one_request_span_with_its_steps_as_children(traced) -> None:  # noqa: ANN001
    srv, exporter, _ = traced
    r = httpx.post(f"{srv.url}/search", json={"query": "How can I be a good geologist?", "top_k": 5},
                   headers={"X-Request-ID": "trace-search-1"}, timeout=30)
    assert r.status_code == 200
    spans = spans_of(exporter, "trace-search-1")
    assert set(spans) == {"POST /search", *STEPS}, set(spans)
    root = spans["POST /search"]
    assert root.kind == SpanKind.SERVER and root.parent is None
    assert root.attributes["http.route"] == "/search" and root.attributes["http.response.status_code"] == 200
    assert root.status.status_code == StatusCode.UNSET
    steps = [spans[name] for name in STEPS]
    for step in steps:  # children of the request span, in its trace, carrying its request id
        assert step.parent is not None and step.parent.span_id == root.context.span_id
        assert step.context.trace_id == root.context.trace_id
        assert step.attributes[REQUEST_ID] == "trace-search-1"
        assert step.attributes["strata.index_version"] == r.json()["index_version"]
        assert root.start_time <= step.start_time <= step.end_time <= root.end_time
    for earlier, later in zip(steps, steps[1:], strict=False):  # one after the other
        assert earlier.end_time <= later.start_time
    assert spans["encode"].attributes["strata.texts"] == 1 and spans["encode"].attributes["strata.batch_texts"] >= 1
    assert spans["encode"].end_time - spans["encode"].start_time > 100_000  # a real ONNX run: > 0.1 ms
    assert spans["encode"].attributes["strata.mode"] == "dense"  # the shared index's default
    # the mode that ran and its stages are on the steps
    r = httpx.post(f"{srv.url}/search", json={"query": "How can I be a good geologist?", "mode": "hybrid"},
                   headers={"X-Request-ID": "trace-search-2"}, timeout=30)
    assert r.status_code == 200
    hybrid = spans_of(exporter, "trace-search-2")["encode"].attributes
    assert hybrid["strata.mode"] == "hybrid" and hybrid["strata.lexical_ms"] > 0 and hybrid["strata.fusion_ms"] > 0


def test_encode_has_no_search_steps_and_a_4xx_is_not_an_error(traced) -> None:  # noqa: ANN001
    srv, exporter, _ = traced
    ok = httpx.post(f"{srv.url}/encode", timeout=30, json={"texts": ["a", "b"]}, headers={"X-Request-ID": "trace-enc"})
    bad = httpx.post(f"{srv.url}/encode", timeout=30, json={"texts": [""]}, headers={"X-Request-ID": "trace-bad"})
    assert ok.status_code == 200 and bad.status_code == 422
    assert set(spans_of(exporter, "trace-enc")) == {"POST /encode", "queue", "encode"}
    bad_spans = spans_of(exporter, "trace-bad")
    assert set(bad_spans) == {"POST /encode"}  # refused before the engine
    assert bad_spans["POST /encode"].attributes["http.response.status_code"] == 422
    assert bad_spans["POST /encode"].status.status_code == StatusCode.UNSET


def test_the_request_span_joins_the_callers_trace(traced) -> None:  # noqa: ANN001
    srv, exporter, _ = traced
    trace_id, parent_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    r = httpx.post(f"{srv.url}/search", json={"query": "geologist"},
                   headers={"X-Request-ID": "trace-joined", "traceparent": f"00-{trace_id}-{parent_id}-01"})
    assert r.status_code == 200
    spans = spans_of(exporter, "trace-joined")
    root = spans["POST /search"]
    assert root.context.trace_id == int(trace_id, 16) and root.parent.span_id == int(parent_id, 16)
    assert {s.context.trace_id for s in spans.values()} == {int(trace_id, 16)}



def test_the_request_span_is_exported_before_the_last_byte_goes_out() -> None:
    """A client that has its response can read its trace: the span ends before the last body message is sent,
    not after (the in-process tests above read the exporter as soon as their response arrives)."""
    import asyncio

    from fastapi import FastAPI

    from service.access import AccessLog
    from service.engine.metrics import Metrics

    exporter = InMemorySpanExporter()
    tracing = Tracing(exporter=exporter)
    tracing.start()
    app = FastAPI()

    @app.get("/items/{item}")
    async def item(item: int) -> dict[str, int]:
        if item == 13:
            raise RuntimeError("unlucky")
        return {"item": item}

    app.add_middleware(AccessLog, metrics=Metrics(), tracing=tracing)

    def exported_at_last_byte(path: str) -> tuple[int, set[str]]:
        seen: dict[str, object] = {}

        async def receive() -> dict[str, object]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict[str, object]) -> None:
            if message["type"] == "http.response.start":
                seen["status"] = message["status"]
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                seen["names"] = {s.name for s in exporter.get_finished_spans()
                                 if s.attributes.get("url.path") == path}

        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "path": path,
                 "raw_path": path.encode(), "query_string": b"", "headers": [], "scheme": "http",
                 "server": ("t", 80), "client": ("127.0.0.1", 1), "root_path": ""}
        asyncio.run(app(scope, receive, send))
        return seen["status"], seen["names"]  # type: ignore[return-value]

    try:
        assert exported_at_last_byte("/items/1") == (200, {"GET /items/{item}"})
        assert exported_at_last_byte("/items/13") == (500, {"GET /items/{item}"})  # the middleware's own 500
        assert exported_at_last_byte("/nope") == (404, {"GET"})
        assert len(exporter.get_finished_spans()) == 3  # each ended once
    finally:
        tracing.shutdown()

def test_the_apps_provider_is_its_own_not_the_global_one(traced) -> None:  # noqa: ANN001
    _, _, tracing = traced
    assert tracing.provider is not None
    assert trace.get_tracer_provider() is not tracing.provider  # OpenTelemetry's global state is left alone


def test_tracing_off_has_no_provider_and_imports_no_sdk() -> None:
    code = ("import sys\nfrom service.main import create_app\napp = create_app()\n"
            "assert not app.state.tracing.enabled and app.state.tracing.provider is None\n"
            "assert app.state.default_collection.tracing is app.state.tracing\n"
            "sdk = sorted(m for m in sys.modules if m.startswith('opentelemetry.sdk'))\n"
            "assert not sdk, sdk\nprint('ok')\n")
    env = {k: v for k, v in os.environ.items() if k != "STRATA_OTLP_ENDPOINT"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_an_endpoint_without_the_exporter_installed_is_a_clear_error() -> None:
    code = ("import sys\nclass Block:\n    def find_spec(self, name, path=None, target=None):\n"
            "        if name.startswith('opentelemetry.exporter'):\n            raise ModuleNotFoundError(name)\n"
            "sys.meta_path.insert(0, Block())\n"
            "from service.main import create_app\nfrom service.engine.tracing import TracingConfigError\n"
            "try:\n    create_app()\nexcept TracingConfigError as exc:\n    print(exc)\n")
    env = os.environ | {"STRATA_OTLP_ENDPOINT": "http://127.0.0.1:1"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env)
    assert "STRATA_OTLP_ENDPOINT is set but opentelemetry-exporter-otlp-proto-http is not installed" in r.stdout, \
        r.stdout + r.stderr


def test_traces_url() -> None:
    assert traces_url("http://collector:4318") == "http://collector:4318/v1/traces"
    assert traces_url("http://collector:4318/") == "http://collector:4318/v1/traces"
    assert traces_url("https://c.example/v1/traces") == "https://c.example/v1/traces"


def test_spans_are_exported_over_otlp_http(tmp_path: Path, quora_root: Path) -> None:
    """`python -m service` with STRATA_OTLP_ENDPOINT: what a collector receives is an OTLP/HTTP protobuf export
    holding the request's spans (flushed on shutdown at the latest)."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    received: list[tuple[str, bytes]] = []

    class Collector(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            received.append((self.path, self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    collector = ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=collector.serve_forever, daemon=True).start()
    srv = start_server(tmp_path, {"STRATA_INDEX_ROOT": str(quora_root),
                                  "STRATA_OTLP_ENDPOINT": f"http://127.0.0.1:{collector.server_port}",
                                  "OTEL_SERVICE_NAME": "strata-test"})
    try:
        r = httpx.post(f"{srv.url}/search",
                       timeout=30, json={"query": "geologist"}, headers={"X-Request-ID": "trace-otlp"})
        assert r.status_code == 200
    finally:
        stop_server(srv)  # the lifespan's shutdown flushes the batch processor
        collector.shutdown()
    assert received and {path for path, _ in received} == {"/v1/traces"}
    names, service_names = set(), set()
    for _, payload in received:
        export = ExportTraceServiceRequest.FromString(payload)
        for rs in export.resource_spans:
            service_names |= {a.value.string_value for a in rs.resource.attributes if a.key == "service.name"}
            for ss in rs.scope_spans:
                names |= {s.name for s in ss.spans
                          if any(a.key == REQUEST_ID and a.value.string_value == "trace-otlp" for a in s.attributes)}
    assert names == {"POST /search", *STEPS} and service_names == {"strata-test"}
