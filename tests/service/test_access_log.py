"""The access-log middleware on its own: an unhandled error becomes a JSON 500 carrying the request id, and
every response is counted under its route template (never the raw path)."""

from __future__ import annotations

import asyncio
import logging
import time

import httpx
import pytest
from fastapi import FastAPI

from service.access import AccessLog
from service.engine.metrics import Metrics


def _app(metrics: Metrics) -> FastAPI:
    app = FastAPI()

    @app.get("/items/{item}")
    async def item(item: int) -> dict[str, int]:
        if item == 13:
            raise RuntimeError("unlucky")
        return {"item": item}

    app.add_middleware(AccessLog, metrics=metrics)
    return app


def _get(app: FastAPI, paths: list[tuple[str, dict[str, str]]]) -> list[httpx.Response]:
    async def go() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            return [await c.get(p, headers=h) for p, h in paths]
    return asyncio.run(go())


def test_unhandled_error_is_a_json_500_with_request_id_and_counted() -> None:
    metrics = Metrics()
    ok, boom, missing = _get(_app(metrics),
                             [("/items/1", {"X-Request-ID": "abc"}), ("/items/13", {"X-Request-ID": 'q"x'}),
                                       ("/nope/1", {})])
    assert ok.status_code == 200 and ok.headers["X-Request-ID"] == "abc"
    assert boom.status_code == 500 and boom.json() == {"detail": "internal error", "request_id": 'q"x'}
    assert boom.headers["X-Request-ID"] == 'q"x'
    assert missing.status_code == 404 and len(missing.headers["X-Request-ID"]) == 32
    count = metrics.registry.get_sample_value
    assert count("strata_requests_total", {"endpoint": "/items/{item}", "method": "GET", "status": "200"}) == 1
    assert count("strata_requests_total", {"endpoint": "/items/{item}", "method": "GET", "status": "500"}) == 1
    assert count("strata_errors_total", {"endpoint": "unmatched", "status": "404"}) == 1
    assert count("strata_request_latency_seconds_count", {"endpoint": "/items/{item}", "method": "GET"}) == 2


def test_a_method_the_api_does_not_know_adds_no_label_value() -> None:
    """The `method` label is the client's word: any token uvicorn's h11 parser takes (httptools: some 35 WebDAV and
    other methods) was a new series of every request family. Methods outside HTTP's usual ones count as "other"."""
    metrics = Metrics()

    async def go() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=_app(metrics), raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            return [await c.request(m, "/items/1") for m in ("PROPFIND", "X-RANDOM-1", "X-RANDOM-2", "GET")]

    answers = asyncio.run(go())
    assert [r.status_code for r in answers] == [405, 405, 405, 200]
    methods = {s.labels["method"] for family in metrics.registry.collect() for s in family.samples
               if "method" in s.labels}
    assert methods == {"other", "GET"}, methods
    count = metrics.registry.get_sample_value
    assert count("strata_requests_total", {"endpoint": "/items/{item}", "method": "other", "status": "405"}) == 3


def test_a_collections_route_is_counted_under_its_own_template_not_the_default_collections(tmp_path) -> None:  # noqa: ANN001
    """The real app serves each collection operation twice (`service.routers.scoped`): `/search` and
    `/collections/{name}/search`. FastAPI (>= 0.160) keeps an included router's route as written in the scope, so a
    named collection's requests were counted (and traced) as the default collection's `/search`."""
    from service.main import create_app
    from service.settings import Settings
    from tests.service.test_tracing import InProcessServer

    for name in ("faq", "garden"):
        (tmp_path / name / "versions").mkdir(parents=True)
    app = create_app(Settings(collections_dir=tmp_path, default_collection="faq", watch_interval_s=0, workers=1,
                              threads=1))
    with InProcessServer(app) as srv, httpx.Client(base_url=srv.url, timeout=60) as c:
        assert c.post("/search", json={"query": "q"}).status_code == 503  # no version yet: past the routing
        for name in ("faq", "garden", "nope"):
            c.post(f"/collections/{name}/search", json={"query": "q"})
        c.get("/collections/garden/documents/a/b")
        c.get("/documents/a")
        metrics = c.get("/metrics").text
    count = app.state.metrics.registry.get_sample_value
    assert count("strata_request_latency_seconds_count", {"endpoint": "/search", "method": "POST"}) == 1
    assert count("strata_request_latency_seconds_count",
                 {"endpoint": "/collections/{name}/search", "method": "POST"}) == 3, metrics
    assert count("strata_request_latency_seconds_count",
                 {"endpoint": "/collections/{name}/documents/{doc_id}", "method": "GET"}) == 1, metrics
    assert count("strata_request_latency_seconds_count", {"endpoint": "/documents/{doc_id}", "method": "GET"}) == 1
    assert "nope" not in metrics  # a collection that does not exist names no series


def test_on_a_terminal_requests_are_summarised_not_logged_one_by_one(caplog: pytest.LogCaptureFixture) -> None:
    from service.access import AccessSummary

    summary = AccessSummary(every=3600)  # the window closes when the app stops (`close`), not on a timer here
    app = FastAPI()

    @app.get("/items/{item}")
    async def item(item: int) -> dict[str, int]:
        return {"item": item}

    app.add_middleware(AccessLog, metrics=Metrics(), summary=summary)
    with caplog.at_level(logging.INFO, logger="strata.access"):
        responses = _get(app, [(f"/items/{i}", {}) for i in range(50)] + [("/nope", {})])
        assert [r.status_code for r in responses] == [200] * 50 + [404]
        assert caplog.records == []  # nothing per request
        summary.close()
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith("51 requests in the last 3600s (GET /items/{item} 50, GET unmatched 1; 2xx 50, 4xx 1)")
    assert "p50 " in line and "/stats" in line
    summary.close()
    assert len(caplog.records) == 1  # an empty window prints nothing


def test_access_log_mode_follows_the_log_format(monkeypatch: pytest.MonkeyPatch) -> None:
    from service.settings import Settings

    assert Settings(log_format="text").access_log_mode() == "summary"
    assert Settings(log_format="json").access_log_mode() == "requests"
    assert Settings(log_format="text", access_log="requests").access_log_mode() == "requests"
    assert Settings(log_format="json", access_log="summary").access_log_mode() == "summary"


def test_a_response_is_counted_once_its_last_byte_is_sent_not_when_the_app_returns() -> None:
    """An app may go on after its response is complete (a static file closed on a worker thread, a background
    task): the client has the answer and may read /metrics at once, so the request is counted when its last body
    message is handed to the server. Counted after the app returned, such a read missed it (a flaky test_stats)."""
    metrics = Metrics()
    count = metrics.registry.get_sample_value
    labels = {"endpoint": "unmatched", "method": "GET", "status": "200"}
    release, sent = asyncio.Event(), asyncio.Event()

    async def app(scope: dict, receive: object, send: object) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})  # type: ignore[operator]
        await send({"type": "http.response.body", "body": b"ok"})  # type: ignore[operator]
        await release.wait()  # the tail the client does not wait for

    async def go() -> tuple[float | None, float | None]:
        async def send(message: dict) -> None:
            if message["type"] == "http.response.body" and not message.get("more_body"):
                sent.set()

        async def receive() -> dict:
            return {"type": "http.request", "body": b"", "more_body": False}

        scope = {"type": "http", "method": "GET", "path": "/file", "headers": [], "client": ("127.0.0.1", 1)}
        task = asyncio.create_task(AccessLog(app, metrics)(scope, receive, send))
        await sent.wait()
        await asyncio.sleep(0)  # what the event loop runs next: the client's next request
        during = count("strata_requests_total", labels)
        release.set()
        await task
        return during, count("strata_requests_total", labels)

    during, after = asyncio.run(go())
    assert during == 1 and after == 1  # counted once, before the app's tail ended


def test_a_path_cannot_forge_a_line_of_the_text_log_or_drive_the_terminal(tmp_path) -> None:  # noqa: ANN001
    """The text log (`STRATA_LOG_FORMAT=text`, a terminal's) with one access line per request: the path is
    percent-decoded, so `%0A` wrote a line of the client's choosing and `%1B` an escape sequence to the terminal.
    Control characters in a logged path are escaped; the JSON log keeps the path exact (JSON escapes it)."""
    from tests.conftest import start_server, stop_server

    (tmp_path / "c" / "faq" / "versions").mkdir(parents=True)
    forged = "03:40:00 WARNING service.auth: admin key accepted"
    srv = start_server(tmp_path, {"STRATA_COLLECTIONS_DIR": str(tmp_path / "c"), "STRATA_LOG_FORMAT": "text",
                                  "STRATA_ACCESS_LOG": "requests", "STRATA_WATCH_INTERVAL_S": "0"},
                       wait_ready=False)
    try:
        with srv.client() as c:
            assert c.get("/nothing%0A" + forged.replace(" ", "%20")).status_code == 404
            assert c.get("/clear%1B%5B2J%0D").status_code == 404
            assert c.get("/health").status_code == 200  # logged after the two above: their lines are written
        deadline = time.monotonic() + 60
        while "GET /health 200" not in srv.log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop_server(srv)
    lines = srv.log.read_text().splitlines()
    assert not [line for line in lines if line.startswith(forged)], lines
    assert not [line for line in lines if "\x1b" in line or "\r" in line], lines
    assert [line for line in lines if line.endswith("GET /nothing\\n" + forged + " 404")], lines
    assert [line for line in lines if line.endswith("GET /clear\\x1b[2J\\r 404")], lines
