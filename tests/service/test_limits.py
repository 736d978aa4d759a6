"""API keys, body and concurrency caps, timeouts, CORS, request ids in JSON logs, graceful shutdown — each
on a real server started with the settings under test."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import Server, assert_busy_answers_429, start_server, stop_server

USER, ADMIN = "user-key-0123456789", "admin-key-0123456789"
ENV_ADMIN = "env-admin-key-0123456789"  # scoped in STRATA_API_KEYS itself ("key:admin")
HEAVY = {"texts": [("many different words in a long sentence " * 45)[:1990]] * 64}  # 64 × 256 tokens
# Half of it for the graceful shutdown's test (held in flight by the test, not by its size)
SHUTDOWN_HEAVY = {"texts": HEAVY["texts"][:32]}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, quora_root: Path) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("secured")
    keys = tmp / "keys.txt"
    keys.write_text(f"# key scopes\n{ADMIN} admin\n")
    srv = start_server(tmp, {"STRATA_INDEX_ROOT": str(quora_root), "STRATA_API_KEYS": f"{USER}, {ENV_ADMIN}:admin",
                             "STRATA_API_KEYS_FILE": str(keys), "STRATA_PUBLIC_PATHS": '["/health"]',
                             "STRATA_MAX_BODY_BYTES": "4096", "STRATA_MAX_IN_FLIGHT": "1",
                             "STRATA_WORKERS": "1", "STRATA_RETRY_AFTER_S": "2",
                             "STRATA_CORS_ORIGINS": '["https://app.example"]'},
                       wait_ready=False)  # /ready needs a key here; the lifespan loads before /health answers
    yield srv
    stop_server(srv)


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_api_keys(secured: Server) -> None:
    with secured.client() as c:
        assert c.get("/health").status_code == 200  # public
        for path in ("/ready", "/metrics"):  # not public in this configuration
            assert c.get(path).status_code == 401
        missing = c.post("/search", json={"query": "q"})
        assert missing.status_code == 401 and missing.headers["WWW-Authenticate"] == "Bearer"
        assert "missing API key" in missing.json()["detail"]
        assert c.post("/search", json={"query": "q"}, headers=auth("wrong-key-000000")).status_code == 401
        assert c.post("/search", json={"query": "q"}, headers={"Authorization": f"Basic {USER}"}).status_code == 401
        assert c.post("/search", json={"query": "q"}, headers=auth(USER)).status_code == 200
        assert c.get("/metrics", headers=auth(USER)).status_code == 200
        forbidden = c.post("/admin/reload", headers=auth(USER))
        assert forbidden.status_code == 403 and "admin" in forbidden.json()["detail"]
        assert c.post("/admin/reload").status_code == 401
        ok = c.post("/admin/reload", headers=auth(ADMIN))
        assert ok.status_code == 200 and ok.json()["outcome"] == "unchanged"


def test_api_key_scopes_in_the_variable(secured: Server) -> None:
    """STRATA_API_KEYS="key1:admin,key2": the scope after the colon, no scope = any route but /admin/*."""
    with secured.client() as c:
        assert c.post("/search", json={"query": "geologist"}, headers=auth(ENV_ADMIN)).status_code == 200
        ok = c.post("/admin/reload", headers=auth(ENV_ADMIN))
        assert ok.status_code == 200 and ok.json()["outcome"] == "unchanged"
        assert c.post("/admin/reload", headers=auth(USER)).status_code == 403
        assert c.post("/search", json={"query": "q"}, headers=auth(f"{ENV_ADMIN}:admin")).status_code == 401


def test_body_cap_is_a_json_413(secured: Server) -> None:
    with secured.client() as c:
        big = c.post("/encode", json={"texts": ["x" * 1500] * 4}, headers=auth(USER))
        assert big.status_code == 413 and "the limit is 4096" in big.json()["detail"]

        def chunks() -> Iterator[bytes]:  # no Content-Length: counted while read
            yield b'{"texts": ["'
            for _ in range(10):
                yield b"y" * 1000
            yield b'"]}'

        streamed = c.post("/encode", content=chunks(), headers=auth(USER) | {"Content-Type": "application/json"})
        assert streamed.status_code == 413 and streamed.headers["content-type"] == "application/json"
        assert c.post("/encode", json={"texts": ["fits"]}, headers=auth(USER)).status_code == 200
        vector = c.post("/search", json={"vector": [0.123456789] * 384}, headers=auth(USER))  # ~5 kB of floats
        assert vector.status_code == 413 and "the limit is 4096" in vector.json()["detail"]


def test_full_server_answers_429_with_retry_after(secured: Server) -> None:
    assert_busy_answers_429(secured, "/encode", {"texts": ["z " * 900] * 2}, auth(USER))
    with secured.client() as c:
        assert c.get("/health").status_code == 200  # never blocked by inference load


def test_cors_and_request_id_in_json_logs(secured: Server) -> None:
    with secured.client() as c:
        pre = c.options("/search", headers={"Origin": "https://app.example", "Access-Control-Request-Method": "POST",
                                            "Access-Control-Request-Headers": "authorization,content-type"})
        assert pre.status_code == 200 and pre.headers["access-control-allow-origin"] == "https://app.example"
        other = c.options("/search", headers={"Origin": "https://evil.example",
                                              "Access-Control-Request-Method": "POST"})
        assert "access-control-allow-origin" not in other.headers
        r = c.post("/search", json={"query": "geologist"}, headers=auth(USER) | {"X-Request-ID": "trace-42"})
        generated = c.get("/health").headers["X-Request-ID"]
    assert r.headers["X-Request-ID"] == "trace-42" and len(generated) == 32

    def access_lines() -> list[dict]:
        lines = [json.loads(line) for line in secured.log.read_text().splitlines() if line.startswith("{")]
        return [x for x in lines if x.get("request_id") == "trace-42" and x["logger"] == "strata.access"]

    until(access_lines, "the access log line")  # written after the response is sent
    access = access_lines()
    assert access and access[0]["status"] == 200 and access[0]["path"] == "/search" and access[0]["ms"] > 0


def test_cors_lets_an_allowed_origin_use_every_method_the_api_takes(tmp_path: Path) -> None:
    """A browser preflights PUT and DELETE: allowing only GET and POST refused `PUT /documents`, a collection's
    config and deleting a collection or a snapshot (400 "Disallowed CORS method") before the request was sent.
    Every method a route of the app takes is allowed for the listed origins, and nothing for another."""
    from service.auth import served_routes
    from service.main import create_app
    from service.settings import Settings
    from tests.service.test_tracing import InProcessServer

    (tmp_path / "faq" / "versions").mkdir(parents=True)
    app = create_app(Settings(collections_dir=tmp_path, watch_interval_s=0, workers=1, threads=1,
                              cors_origins=["https://app.example"]))
    taken = {m for _, route in served_routes(app) for m in getattr(route, "methods", None) or ()} - {"OPTIONS"}
    calls = [("PUT", "/documents"), ("POST", "/documents/delete"), ("PUT", "/collections/faq/config"),
             ("DELETE", "/collections/faq"), ("DELETE", "/collections/faq/snapshots/s1"), ("POST", "/search"),
             ("GET", "/collections"), ("HEAD", "/")]
    assert {m for m, _ in calls} == taken, taken  # every method a route takes is preflighted below
    with InProcessServer(app) as srv, httpx.Client(base_url=srv.url, timeout=60) as c:
        for method, path in calls:
            pre = c.options(path, headers={"Origin": "https://app.example", "Access-Control-Request-Method": method,
                                           "Access-Control-Request-Headers": "authorization,content-type"})
            assert pre.status_code == 200, (method, path, pre.text)
            assert pre.headers["access-control-allow-origin"] == "https://app.example"
            assert method in pre.headers["access-control-allow-methods"].split(", ")
            other = c.options(path, headers={"Origin": "https://evil.example", "Access-Control-Request-Method": method})
            assert other.status_code == 400 and "access-control-allow-origin" not in other.headers
        sent = c.put("/collections/faq/config", json={}, headers={"Origin": "https://app.example"})
        assert sent.headers["access-control-allow-origin"] == "https://app.example"  # the answer is readable
        assert "X-Request-ID" in sent.headers["access-control-expose-headers"]


def until(condition, what: str, timeout: float = 120) -> None:  # noqa: ANN001 (a no-argument predicate)
    """Until `condition()` holds (a condition, not a pause: a loaded machine takes longer, never less)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout} s for {what}")
        time.sleep(0.05)


def in_flight(srv: Server) -> bool:
    """A request holds an inference slot (it reached the server and is being encoded)."""
    return "strata_inference_in_flight 1.0" in httpx.get(f"{srv.url}/metrics", timeout=30).text


def test_timeout_is_a_504(tmp_path: Path, quora_root: Path) -> None:
    # 1 s: the heavy call (64 × 256 tokens on one thread) takes several times that on a quiet machine, and one
    # short query well under it beside CPU burners; 0.05 s timed out every search there (200 of 200 in 120 s)
    srv = start_server(tmp_path, {"STRATA_INDEX_ROOT": str(quora_root), "STRATA_REQUEST_TIMEOUT_S": "1",
                                  "STRATA_THREADS": "1", "STRATA_WORKERS": "1"})
    try:
        with srv.client() as c:
            r = c.post("/encode", json=HEAVY)
            assert r.status_code == 504 and "longer than 1.0 s" in r.json()["detail"], r.text
            # The abandoned call finishes in the background and returns its lease and its worker: the one worker
            # then answers again (each try may still time out while the heavy batch runs, or on a loaded machine).
            deadline, statuses = time.monotonic() + 120, []
            while time.monotonic() < deadline:
                statuses.append(c.post("/search", json={"query": "geologist"}).status_code)
                if statuses[-1] == 200:
                    break
                time.sleep(0.5)
            assert statuses[-1] == 200 and set(statuses) <= {200, 504}, statuses
            assert "strata_rejected_total{reason=\"timeout\"}" in c.get("/metrics").text
            assert "strata_inference_in_flight 0.0" in c.get("/metrics").text
    finally:
        stop_server(srv)


def held_server(tmp: Path, quora_root: Path, grace_s: str) -> tuple[Server, Path]:
    """A server whose inference batches wait while the returned file exists (`tests.service.held_service`): a
    request stays in flight until the test removes it, however fast or loaded the machine. The request timeout is
    past any wait here, so no 504 can stand in for the shutdown's own answer."""
    hold = tmp / "hold"
    srv = start_server(tmp, {"STRATA_INDEX_ROOT": str(quora_root), "STRATA_THREADS": "1", "STRATA_WORKERS": "1",
                             "STRATA_SHUTDOWN_TIMEOUT_S": grace_s, "STRATA_REQUEST_TIMEOUT_S": "600",
                             "STRATA_TEST_HOLD": str(hold)}, module="tests.service.held_service")
    hold.touch()
    return srv, hold


def test_graceful_shutdown_finishes_in_flight_requests(tmp_path: Path, quora_root: Path) -> None:
    """A request held in flight when SIGTERM comes is answered once it is released, within the grace."""
    srv, hold = held_server(tmp_path, quora_root, "600")
    result: list[httpx.Response] = []
    t = threading.Thread(target=lambda: result.append(httpx.post(f"{srv.url}/encode", json=SHUTDOWN_HEAVY,
                                                                 timeout=600)))
    t.start()
    until(Path(f"{hold}.entered").exists, "the request's batch on the worker")
    srv.proc.send_signal(signal.SIGTERM)
    until(lambda: "Waiting for connections to close" in srv.log.read_text(), "the shutdown waiting for it")
    hold.unlink()
    t.join(timeout=600)
    assert srv.proc.wait(timeout=600) == 0  # a clean shutdown exits 0
    assert result and result[0].status_code == 200 and len(result[0].json()["vectors"]) == 32
    log = srv.log.read_text()
    # the server waited for the open request, within STRATA_SHUTDOWN_TIMEOUT_S
    assert "timeout graceful shutdown exceeded" not in log
    assert log.index("Waiting for connections to close") < log.index("POST /encode 200")


def test_shutdown_timeout_cuts_in_flight_requests_short(tmp_path: Path, quora_root: Path) -> None:
    """STRATA_SHUTDOWN_TIMEOUT_S: requests still running when it has passed get no answer. Three calls are held in
    flight by the test (`held_server`) until the grace has ended: every one is cut, none answered, whatever the
    machine's speed; released after the cut, the held batch ends and the server exits cleanly."""
    CALLS = 3
    srv, hold = held_server(tmp_path, quora_root, "1")
    result: list[object] = []

    def call() -> None:
        try:
            result.append(httpx.post(f"{srv.url}/encode", json={"texts": ["a held request"]}, timeout=120))
        except httpx.HTTPError as exc:
            result.append(exc)

    threads = [threading.Thread(target=call) for _ in range(CALLS)]
    for t in threads:
        t.start()
    until(Path(f"{hold}.entered").exists, "a batch on the worker")
    until(lambda: f"strata_inference_in_flight {CALLS}.0" in httpx.get(f"{srv.url}/metrics", timeout=30).text,
          "every call admitted")
    srv.proc.send_signal(signal.SIGTERM)
    until(lambda: "timeout graceful shutdown exceeded" in srv.log.read_text(), "the grace to end")
    for t in threads:
        t.join(timeout=120)
    hold.unlink()  # the held batch ends: the lifespan's shutdown waits for the worker, then the process exits
    assert srv.proc.wait(timeout=120) == 0
    # uvicorn answers a cancelled request 500 (or the connection drops): its vectors never came back
    cut = [r for r in result if isinstance(r, httpx.HTTPError) or r.status_code == 500]  # type: ignore[union-attr]
    assert len(result) == CALLS and len(cut) == CALLS, result
    assert "POST /encode 200" not in srv.log.read_text()


def test_inference_workers_run_faiss_with_the_configured_threads() -> None:
    """OpenMP thread counts are per thread: each worker sets its own, or batched searches would take a team of
    every core per worker."""
    import faiss

    from service.engine import Collection
    from service.settings import Settings

    collection = Collection(Settings(workers=2, threads=1))
    try:
        counts = {collection.pool.submit(faiss.omp_get_max_threads).result() for _ in range(8)}
    finally:
        collection.pool.shutdown()
    assert counts == {1}
