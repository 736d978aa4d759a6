"""The sharded backend (`python -m service sharded`) on the session's local Ray: the single-process service's
app over shard deployments. The same answers as the merged index, the same validation, and the features the
sharded mode gained with the shared app — API keys, 413, 429 with Retry-After, 504, `/metrics`, and
`/admin/reload` hot-swapping the shard deployments behind the same gates — plus the command's own Ray instance,
stopped with it.

Servers are `python -m service sharded --ray-address <the session's Ray>` subprocesses on 127.0.0.1, as an
operator runs them against a cluster; the last test runs the command with a Ray of its own.
"""

from __future__ import annotations

import io
import os
import shutil
import signal
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

ray = pytest.importorskip("ray")

from indexer.runtime.layout import IndexRoot, new_version_name  # noqa: E402
from indexer.runtime.manifest import Manifest  # noqa: E402
from indexer.runtime.version import IndexVersion  # noqa: E402
from tests.conftest import REPO, Server, assert_busy_answers_429, start_server, stop_server  # noqa: E402
from tests.service.test_swap import _edit_manifest  # noqa: E402

USER, ADMIN = "user-key-0123456789", "admin-key-0123456789"
HEAVY = {"texts": [("many different words in a long sentence " * 45)[:1990]] * 64}  # 64 × 256 tokens
QUERY = "How can I be a good geologist?"


def start_sharded(tmp: Path, root: Path, address: str, env: dict[str, str] | None = None, **kw: object) -> Server:
    return start_server(tmp, {"STRATA_INDEX_ROOT": str(root), "STRATA_WATCH_INTERVAL_S": "0", **(env or {})},
                        args=("sharded", "--ray-address", address), timeout=300, **kw)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def sharded_server(ray_sharded: Path, ray_cluster: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    srv = start_sharded(tmp_path_factory.mktemp("sharded"), ray_sharded.parent.parent, ray_cluster)
    yield srv.url
    stop_server(srv)


@pytest.fixture(scope="module")
def secured_root(ray_sharded: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the sharded index root that the swap tests may add versions to."""
    root = tmp_path_factory.mktemp("sharded-swaps") / "quora"
    shutil.copytree(ray_sharded.parent.parent, root, symlinks=True)
    return root


@pytest.fixture(scope="module")
def secured(secured_root: Path, ray_cluster: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Keys in STRATA_API_KEYS (with the scope syntax), a 4 kB body cap, one request in flight, one worker."""
    srv = start_sharded(tmp_path_factory.mktemp("sharded-secured"), secured_root, ray_cluster,
                        {"STRATA_API_KEYS": f"{USER},{ADMIN}:admin", "STRATA_PUBLIC_PATHS": '["/health"]',
                         "STRATA_MAX_BODY_BYTES": "4096", "STRATA_MAX_IN_FLIGHT": "1", "STRATA_WORKERS": "1",
                         "STRATA_RETRY_AFTER_S": "2"},
                        wait_ready=False)  # /ready needs a key here
    yield srv
    stop_server(srv)


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def shard_apps() -> set[str]:
    """Serve applications alive in the session's cluster (one per shard of each deployed version)."""
    from ray import serve

    return set(serve.status().applications)


def metric(text: str, name: str) -> float:
    line = next((ln for ln in text.splitlines() if ln.startswith(name + " ")), None)
    return float(line.rsplit(" ", 1)[1]) if line else 0.0


def add_version(root: Path, source: Path, mutate=None) -> str:  # noqa: ANN001 (callable on the copied folder)
    """A copy of `source` under a newer version name in `root`, changed by `mutate`, made current."""
    r = IndexRoot(root)
    name = new_version_name()
    shutil.copytree(source, r.version_dir(name))
    manifest = Manifest.load(r.version_dir(name))
    manifest.version = name
    manifest.save(r.version_dir(name))
    if mutate is not None:
        mutate(r.version_dir(name))
    r.set_current(name)
    return name


def test_two_shard_service_answers_like_the_merged_index(sharded_server: str, ray_sharded: Path) -> None:

    merged = IndexVersion(ray_sharded)  # the two shards merged in one process
    try:
        qids, qtexts, _ = merged.store.eval_set()
        _, expected = merged.search(merged.query_vectors(), 10)
    finally:
        merged.close()
    with httpx.Client(base_url=sharded_server, timeout=120) as client:
        ready = client.get("/ready").json()
        assert ready["ready"] and ready["index_size"] == Manifest.load(ray_sharded).index.ntotal
        one = client.post("/search", json={"query": qtexts[0], "top_k": 3, "mode": "dense"}).json()
        assert [h["id"] for h in one["hits"]] == expected[0, :3].tolist() and one["hits"][0]["text"]
        assert client.post("/search", json={"query": "", "top_k": 3}).status_code == 422  # same validation
        none = client.post("/search", json={"query": qtexts[0], "filter": {"bucket": 1}})  # no metadata: no match
        assert none.status_code == 200 and none.json()["hits"] == []
        refused = client.post("/search", json={"query": qtexts[0], "filter": {"bucket": {"near": 1}}})
        assert refused.status_code == 422 and "unknown operator 'near'" in refused.json()["detail"][0]["msg"]
        got: list[list[int]] = []
        for start in range(0, len(qtexts), 64):
            r = client.post("/search", json={"queries": qtexts[start : start + 64], "top_k": 10, "mode": "dense"})
            assert r.status_code == 200, r.text
            got += [[h["id"] for h in res["hits"]] for res in r.json()["results"]]
    same_list = np.mean([g == e.tolist() for g, e in zip(got, expected, strict=True)])
    overlap = np.mean([len(set(g) & set(e.tolist())) / 10 for g, e in zip(got, expected, strict=True)])
    print(f"\n{len(got)} paper-protocol queries: top-10 overlap sharded vs merged {overlap:.5f}, identical "
          f"ranked lists {same_list:.5f}")
    assert overlap >= 0.999 and same_list >= 0.99


def test_sharded_serves_every_mode_as_one_process_does(sharded_server: str, ray_sharded: Path,
                                                       tmp_path: Path) -> None:
    """Parity with one process: the same version served by the local backend (its shards merged in memory) and by
    the shard deployments gives the same hits for dense, lexical and hybrid, and the version's default (hybrid)
    when a request names no mode. The lexical side of the sharded backend is the version's BM25 index read in the
    API process."""

    manifest = Manifest.load(ray_sharded)
    assert (manifest.lexical is not None and manifest.lexical.n_docs == manifest.index.ntotal
            and manifest.search_mode() == "hybrid")
    merged = IndexVersion(ray_sharded)
    try:
        _, texts, _ = merged.store.eval_set()
    finally:
        merged.close()
    texts = [QUERY, "best way to invest money in india", *texts[:40]]
    local = start_server(tmp_path, {"STRATA_INDEX_ROOT": str(ray_sharded.parent.parent),
                                    "STRATA_WATCH_INTERVAL_S": "0"})
    try:
        answers: dict[str, list[list[tuple[int, float]]]] = {}
        for name, url in (("local", local.url), ("sharded", sharded_server)):
            with httpx.Client(base_url=url, timeout=120) as client:
                for mode in ("dense", "lexical", "hybrid", None):
                    body = {"queries": texts, "top_k": 10, **({"mode": mode} if mode else {})}
                    r = client.post("/search", json=body)
                    assert r.status_code == 200, r.text
                    assert r.json()["mode"] == (mode or "hybrid")
                    answers[f"{name}-{mode}"] = [[(h["id"], h["score"]) for h in res["hits"]]
                                                 for res in r.json()["results"]]
    finally:
        stop_server(local)
    for mode in ("dense", "lexical", "hybrid", None):
        got, want = answers[f"sharded-{mode}"], answers[f"local-{mode}"]
        assert [[i for i, _ in q] for q in got] == [[i for i, _ in q] for q in want], mode
        assert np.allclose([s for q in got for _, s in q], [s for q in want for _, s in q], atol=1e-5), mode
        assert all(len(q) == 10 for q in got), mode
    assert answers["sharded-lexical"] != answers["sharded-dense"] != answers["sharded-hybrid"]


def test_sharded_api_keys(secured: Server) -> None:
    with secured.client() as c:
        assert c.get("/health").status_code == 200  # public
        for path in ("/ready", "/metrics"):  # not public in this configuration
            assert c.get(path).status_code == 401
        missing = c.post("/search", json={"query": "q"})
        assert missing.status_code == 401 and missing.headers["WWW-Authenticate"] == "Bearer"
        assert c.post("/search", json={"query": "q"}, headers=auth("wrong-key-000000")).status_code == 401
        ok = c.post("/search", json={"query": QUERY, "top_k": 1}, headers=auth(USER))
        assert ok.status_code == 200 and ok.json()["hits"][0]["id"] == 16
        forbidden = c.post("/admin/reload", headers=auth(USER))  # USER has no scope
        assert forbidden.status_code == 403 and "admin" in forbidden.json()["detail"]
        reload = c.post("/admin/reload", headers=auth(ADMIN))  # "key:admin" in STRATA_API_KEYS
        assert reload.status_code == 200 and reload.json()["outcome"] == "unchanged"


def test_sharded_body_cap_is_a_json_413(secured: Server) -> None:
    with secured.client() as c:
        big = c.post("/encode", json={"texts": ["x" * 1500] * 4}, headers=auth(USER))
        assert big.status_code == 413 and "the limit is 4096" in big.json()["detail"]
        assert c.post("/encode", json={"texts": ["fits"]}, headers=auth(USER)).status_code == 200


def test_sharded_full_server_answers_429_with_retry_after(secured: Server) -> None:
    assert_busy_answers_429(secured, "/search", {"queries": ["z " * 900] * 2, "top_k": 3}, auth(USER))


def test_sharded_metrics(secured: Server, secured_root: Path) -> None:
    with secured.client() as c:
        assert c.post("/search", json={"query": QUERY}, headers=auth(USER)).status_code == 200
        text = c.get("/metrics", headers=auth(USER)).text
        version = c.get("/ready", headers=auth(USER)).json()["index_version"]
    assert 'strata_requests_total{endpoint="/search",method="POST",status="200"}' in text
    assert 'strata_request_latency_seconds_count{endpoint="/search",method="POST"}' in text
    assert "strata_search_seconds_count" in text and 'strata_encode_seconds_count{endpoint="/search"}' in text
    size = Manifest.load(IndexRoot(secured_root).current_dir()).index.ntotal
    assert f"strata_index_size {float(size)}" in text and f'version="{version}"' in text


def test_sharded_admin_reload_hot_swaps_the_shard_deployments(secured: Server, secured_root: Path) -> None:
    root = IndexRoot(secured_root)
    with secured.client() as c:
        old = c.get("/ready", headers=auth(ADMIN)).json()["index_version"]
        before = c.post("/search", json={"query": QUERY, "top_k": 5}, headers=auth(USER)).json()
        swaps = metric(c.get("/metrics", headers=auth(USER)).text, 'strata_index_swaps_total{result="swapped"}')
        new = add_version(secured_root, root.current_dir())  # a newer copy: the watcher is off, nothing swaps yet
        assert c.get("/ready", headers=auth(ADMIN)).json()["index_version"] == old
        r = c.post("/admin/reload", headers=auth(ADMIN), timeout=300)
        assert r.status_code == 200 and r.json() == {"outcome": "swapped", "index_version": new, "candidate": new,
                                                     "reason": None}, r.text
        after = c.post("/search", json={"query": QUERY, "top_k": 5}, headers=auth(USER)).json()
        assert after["index_version"] == new and after["hits"] == before["hits"]  # the same shards, redeployed
        mine = sorted(a for a in shard_apps() if new in a)  # "<this server's prefix>-<version>-shard-<i>"
        assert len(mine) == 2, mine
        prefix = mine[0].split(new)[0]
        deadline = time.monotonic() + 120  # the old version's deployments go once its last batch is done
        while any(a.startswith(prefix + old) for a in shard_apps()) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not {a for a in shard_apps() if a.startswith(prefix + old)}, shard_apps()
        text = c.get("/metrics", headers=auth(USER)).text
    assert metric(text, 'strata_index_swaps_total{result="swapped"}') == swaps + 1
    assert metric(text, "strata_engines_loaded") == 1


def _truncate_shard(folder: Path) -> None:
    shard = folder / "shards" / "shard-00001.faiss"
    shard.write_bytes(shard.read_bytes()[:1000])


@pytest.mark.parametrize(("case", "kind", "reason"), [
    ("truncated shard", "corrupt", "shard-00001.faiss is 1,000 bytes but the manifest records"),  # checksums
    ("lower MRR@10", "quality", "below the served"),
    ("not sharded", "mismatch", "is not sharded"),
])
def test_sharded_bad_version_is_refused_and_the_old_one_keeps_serving(secured: Server, secured_root: Path,
                                                                      quora_root: Path, case: str, kind: str,
                                                                      reason: str) -> None:
    root = IndexRoot(secured_root)
    served = root.current_version()
    assert served is not None
    if case == "not sharded":  # the single-machine build of the same rows: one index.faiss
        bad = add_version(secured_root, IndexRoot(quora_root).current_dir())
    else:
        bad = add_version(secured_root, root.current_dir(), _truncate_shard if case == "truncated shard" else
                          _edit_manifest(eval__mrr_at_10=lambda v: v - 0.1))
    try:
        with secured.client() as c:
            r = c.post("/admin/reload", headers=auth(ADMIN), timeout=300)
            assert r.status_code == 409 and r.json()["outcome"] == "refused", r.text
            assert r.json()["index_version"] == served and r.json()["candidate"] == bad
            assert reason in r.json()["reason"], r.text
            ready = c.get("/ready", headers=auth(ADMIN)).json()
            assert ready["ready"] and ready["index_version"] == served
            assert ready["swap_refused"]["kind"] == kind and ready["swap_refused"]["version"] == bad
            hit = c.post("/search", json={"query": QUERY, "top_k": 1}, headers=auth(USER)).json()
            assert hit["index_version"] == served and hit["hits"][0]["id"] == 16
        deadline = time.monotonic() + 120  # a refused candidate's deployments are removed (in the background)
        while any(bad in a for a in shard_apps()) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not any(bad in a for a in shard_apps())
    finally:
        root.set_current(served)
        shutil.rmtree(root.version_dir(bad))
    with secured.client() as c:
        assert c.post("/admin/reload", headers=auth(ADMIN)).json()["outcome"] == "unchanged"


def test_sharded_timeout_is_a_504(ray_sharded: Path, ray_cluster: str, tmp_path: Path) -> None:
    srv = start_sharded(tmp_path, ray_sharded.parent.parent, ray_cluster,
                        {"STRATA_REQUEST_TIMEOUT_S": "0.05", "STRATA_THREADS": "1", "STRATA_WORKERS": "1"})
    try:
        with srv.client() as c:
            r = c.post("/encode", json=HEAVY)
            assert r.status_code == 504 and "longer than 0.05 s" in r.json()["detail"]
            assert 'strata_rejected_total{reason="timeout"} 1.0' in c.get("/metrics").text
    finally:
        stop_server(srv)


def test_sharded_422_does_not_echo_the_input(sharded_server: str) -> None:
    """The sharded ingress answers bad input like the single-process service: a 422 without the echoed input,
    so that NaN or a lone surrogate cannot turn it into a 500."""

    with httpx.Client(base_url=sharded_server, timeout=60) as client:
        for body in (b'{"query": "what is ray", "top_k": NaN}', b'{"query": ["\\ud800"], "top_k": 3}',
                     b'{"queries": [], "top_k": 1e400}'):
            r = client.post("/search", content=body, headers={"content-type": "application/json"})
            assert r.status_code == 422, (body, r.status_code, r.text)
            detail = r.json()["detail"]
            assert detail and all(set(e) == {"type", "loc", "msg"} for e in detail), detail
        r = client.post("/encode", json={"texts": "not a list"})
        assert r.status_code == 422 and "input" not in r.text


def test_sharded_collections_over_http_are_a_501_naming_what_to_use(secured: Server, ray_cluster: str,
                                                                    tmp_path: Path) -> None:
    """Creating, deleting or restoring a collection over HTTP needs a collections folder, which the sharded backend
    refuses at startup: each is a 501 that says so and what to use instead (not a 409 or 422 pointing at
    STRATA_COLLECTIONS_DIR). The root's own collection is served, and its snapshots are made (a write included),
    listed, downloaded (the shard files in the archive) and deleted as on one process; restored with the runtime's
    `restore` (`indexer snapshot restore`), the root is served by `python -m service sharded` with the same answers."""
    with secured.client() as c:
        c.headers.update(auth(ADMIN))
        for r in (c.post("/collections", json={"name": "more"}), c.delete("/collections/default"),
                  c.post("/collections/copy/snapshots/upload", content=b"not read",
                         headers={"content-type": "application/x-tar"})):
            assert r.status_code == 501, (r.request.url, r.status_code, r.text)
            detail = r.json()["detail"]
            assert "sharded" in detail and "STRATA_COLLECTIONS_DIR" in detail, detail
            assert "python -m service sharded" in detail and "indexer snapshot restore" in detail, detail
        assert c.get("/collections/default").json()["ready"] is True
        written = {"id": "snap-1", "text": "Which glacier is the largest in Iceland?", "metadata": {}}
        assert c.put("/documents", json={"documents": [written]}).status_code == 200
        made = c.post("/collections/default/snapshots")
        assert made.status_code == 201, made.text
        name = made.json()["name"]
        assert [s["name"] for s in c.get("/collections/default/snapshots").json()["snapshots"]] == [name]
        archive = c.get(f"/collections/default/snapshots/{name}")
        assert archive.status_code == 200 and archive.headers["x-snapshot-sha256"] == made.json()["sha256"]
        with tarfile.open(fileobj=io.BytesIO(archive.content)) as tar:
            members = tar.getnames()
        assert sum(m.endswith(".faiss") and "/shards/" in m for m in members) == 2, members
        assert c.delete(f"/collections/default/snapshots/{name}").status_code == 204
        asked = {"query": written["text"], "top_k": 5, "mode": "dense"}
        want = [(h["id"], h["score"]) for h in c.post("/search", json=asked).json()["hits"]]
        count = c.post("/documents/count", json={}).json()["count"]
    from indexer.runtime.restore import restore

    (tmp_path / "snap.tar").write_bytes(archive.content)
    restore(tmp_path / "snap.tar", tmp_path / "restored")
    srv = start_sharded(tmp_path, tmp_path / "restored", ray_cluster)
    try:
        with srv.client() as c:
            assert [(h["id"], h["score"]) for h in c.post("/search", json=asked).json()["hits"]] == want
            assert want[0][0] == "snap-1" and c.post("/documents/count", json={}).json()["count"] == count
            assert c.get("/documents/snap-1").json()["text"] == written["text"]
    finally:
        stop_server(srv)


def _session_processes(driver_pid: int) -> list[int]:
    """Live processes of the Ray instance a driver started (its session is named after the driver's pid)."""
    import re

    pattern = re.compile(rb"session_\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d_\d+_" + str(driver_pid).encode() + rb"\b")
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != driver_pid:
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if pattern.search(cmd):
                found.append(int(entry))
    return found


def _descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = set(), [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.add(c)
            todo.append(c)
    return out


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _stat(pid: int) -> list[str]:
    """/proc/PID/stat's fields after the command name (state first, niceness at index 16)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def _niceness(pid: int) -> int:
    return int(_stat(pid)[16])


def _alive(pid: int) -> bool:
    try:
        state = _stat(pid)[0]
    except OSError:
        return False
    return state != "Z"


def test_python_m_service_sharded_command(ray_sharded: Path, tmp_path: Path) -> None:
    """`python -m service sharded` as a command: its own local Ray, the API on a free port, and on SIGTERM it
    exits 0 having deleted its shard deployments and stopped the Ray instance it started: no process left."""
    import subprocess
    import sys

    from tests.conftest import free_port

    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "STRATA_LOG_FORMAT": "text"}
    env.pop("RAY_ADDRESS", None)
    log_file = tmp_path / "sharded.log"
    with log_file.open("wb") as log_out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "service", "sharded", "--host", "127.0.0.1", "--port", str(port),
             "--index-root", str(ray_sharded.parent.parent)],
            cwd=REPO, env=env, stdout=log_out, stderr=subprocess.STDOUT)
    started: set[int] = set()
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 240
        with httpx.Client(base_url=base, timeout=60) as client:
            while True:
                assert proc.poll() is None, f"exited {proc.returncode}: {log_file.read_text()[-3000:]}"
                assert time.monotonic() < deadline, f"no answer: {log_file.read_text()[-3000:]}"
                try:
                    if client.get("/health").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(1)
            assert client.get("/health").json() == {"status": "ok"}
            merged = IndexVersion(ray_sharded)
            try:
                _, qtexts, _ = merged.store.eval_set()
                qvecs = merged.query_vectors()
                assert qvecs is not None
                _, expected = merged.search(qvecs[:1], 5)
            finally:
                merged.close()
            r = client.post("/search", json={"query": qtexts[0], "top_k": 5, "mode": "dense"})
            assert r.status_code == 200, r.text
            body = r.json()
            assert [h["id"] for h in body["hits"]] == expected[0].tolist()
            assert body["index_version"] == ray_sharded.name and body["hits"][0]["text"]
            assert client.post("/search", json={"query": "x", "top_k": 0}).status_code == 422
        started = _descendants(proc.pid) | set(_session_processes(proc.pid))
        assert started, "no Ray processes found under the command"
        # the shard replicas answer searches: in the Ray the command starts they run at its priority, not Ray's
        # default nice 15 (beside normal-priority work that is ~3 % of a core)
        replicas = {p: _niceness(p) for p in started if b"ServeReplica" in _cmdline(p)}
        assert len(replicas) == 2, [_cmdline(p)[:80] for p in started]
        assert set(replicas.values()) == {os.nice(0)}, replicas

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0, log_file.read_text()[-3000:]
        deadline = time.monotonic() + 120
        while (left := [p for p in started | set(_session_processes(proc.pid)) if _alive(p)]) and \
                time.monotonic() < deadline:
            time.sleep(1)
        assert not left, f"left behind: {[Path(f'/proc/{p}/cmdline').read_bytes()[:80] for p in left]}"
        with pytest.raises(httpx.TransportError):  # the Serve proxy is gone with it
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in started | set(_session_processes(proc.pid)):  # only what this command started
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
