"""What tracing and the OpenAI-compatible route cost per request: the tracing hooks alone, and over real HTTP.

First the hooks alone, in this process: what the middleware and the engine run per `/search` request (request
span, then queue/encode/faiss_search/store_lookup), with tracing off and on (SDK, batch processor, an exporter
that drops the spans), in µs per request: a figure small enough to survive a busy machine. Then over HTTP: it
starts `python -m service` twice on the same index, tracing off and tracing on (STRATA_OTLP_ENDPOINT pointing
at a local OTLP/HTTP sink that accepts and discards the exports, so the batch exporter really serialises and
posts). One client sends requests back to back, passes interleaved between the two servers (the machine is
shared; interleaving spreads its noise over both); prints p50 latency per endpoint and the on/off ratio, and
`/v1/embeddings` against `/encode` on the tracing-off server.

    python bench/tracing_overhead.py --root ~/.strata/indexes/quora [--requests 300] [--passes 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.search_latency import free_port, wait_ready  # noqa: E402

QUERY = "How can I be a good geologist?"


class Sink(BaseHTTPRequestHandler):
    exports = 0

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers["Content-Length"]))
        Sink.exports += 1
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def start(root: Path, extra: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = os.environ | {"STRATA_INDEX_ROOT": str(root), "STRATA_PORT": str(port), "STRATA_LOG_LEVEL": "warning",
                        "STRATA_WATCH_INTERVAL_S": "0"} | extra
    proc = subprocess.Popen([sys.executable, "-m", "service"], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    return proc, wait_ready(proc, f"http://127.0.0.1:{port}", "server", 120)


class DropExporter:
    """A SpanExporter that discards: what is left is the SDK's own cost."""

    def export(self, spans: object) -> object:
        from opentelemetry.sdk.trace.export import SpanExportResult

        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def hook_cost_us(enabled: bool, n: int) -> float:
    """µs per request of the tracing hooks as AccessLog and Collection._call run them."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from service.engine.searcher import Timeline
    from service.engine.tracing import Tracing

    tracing = Tracing()
    if enabled:  # the OTLP setup, with the network left out
        tracing.enabled = True
        tracing.provider = TracerProvider()
        tracing.provider.add_span_processor(BatchSpanProcessor(DropExporter()))  # type: ignore[arg-type]
        tracing.tracer = tracing.provider.get_tracer("strata")
    headers = {"content-type": "application/json"}
    now = time.time_ns()
    timeline = Timeline(now + 1000, now + 2000, now + 3000, now + 4000)
    attrs = {"strata.index_version": "v", "strata.texts": 1, "strata.batch_texts": 1}
    t0 = time.perf_counter()
    for _ in range(n):
        span = tracing.start_request("POST", "/search", headers, "rid") if tracing.enabled else None
        admitted = time.time_ns()
        if tracing.enabled:
            tracing.record_batch(admitted, timeline, attrs)
        if span is not None:
            Tracing.end_request(span, "POST", "/search", 200)
    elapsed = time.perf_counter() - t0
    tracing.shutdown()
    return elapsed / n * 1e6


def p50_ms(client: httpx.Client, path: str, body: dict, n: int) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        r = client.post(path, json=body)
        times.append(time.perf_counter() - t0)
        assert r.status_code == 200, r.text
    return statistics.median(times) * 1000


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", type=Path, required=True, help="index root to serve")
    p.add_argument("--requests", type=int, default=300, help="requests per endpoint per pass")
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--hook-requests", type=int, default=20000)
    args = p.parse_args()

    off_us = statistics.median(hook_cost_us(False, args.hook_requests) for _ in range(5))
    on_us = statistics.median(hook_cost_us(True, args.hook_requests) for _ in range(5))
    print(f"tracing hooks per /search request (median of 5 × {args.hook_requests}): off {off_us:.2f} µs, "
          f"on {on_us:.1f} µs (5 spans, batch processor, exporter dropping them)")

    sink = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    off, off_url = start(args.root, {})
    on, on_url = start(args.root, {"STRATA_OTLP_ENDPOINT": f"http://127.0.0.1:{sink.server_port}",
                                   "OTEL_BSP_SCHEDULE_DELAY": "200"})
    model = httpx.get(f"{off_url}/v1/models").json()["data"][0]["id"]
    cases: dict[str, dict[str, object]] = {"/search": {"query": QUERY, "top_k": 10}, "/encode": {"texts": [QUERY]},
             "/v1/embeddings": {"input": QUERY, "model": model, "encoding_format": "float"},
             "/v1/embeddings base64": {"input": QUERY, "model": model, "encoding_format": "base64"}}
    results: dict[tuple[str, str], list[float]] = {}
    try:
        with httpx.Client(base_url=off_url, timeout=30) as c_off, httpx.Client(base_url=on_url, timeout=30) as c_on:
            for c in (c_off, c_on):  # warm-up
                for name, body in cases.items():
                    p50_ms(c, name.split()[0], body, 20)
            for _ in range(args.passes):
                for label, c in (("off", c_off), ("on", c_on)):
                    for name, body in cases.items():
                        results.setdefault((label, name), []).append(p50_ms(c, name.split()[0], body,
                                                                            args.requests))
    finally:
        for proc in (off, on):
            proc.terminate()
            proc.wait(timeout=30)
        sink.shutdown()
    print(f"p50 ms, median of {args.passes} interleaved passes of {args.requests} sequential requests")
    print(f"{'endpoint':<24}{'tracing off':>12}{'tracing on':>12}{'on/off':>8}")
    for name in cases:
        a, b = statistics.median(results[("off", name)]), statistics.median(results[("on", name)])
        print(f"{name:<24}{a:>12.3f}{b:>12.3f}{b / a:>8.3f}")
    enc, v1 = statistics.median(results[("off", "/encode")]), statistics.median(results[("off", "/v1/embeddings")])
    print(f"/v1/embeddings vs /encode (tracing off): {v1 / enc:.3f}; OTLP exports received: {Sink.exports}")


if __name__ == "__main__":
    main()
