"""Writes over HTTP on real servers (uvicorn on 127.0.0.1, real ONNX encoder, FAISS and SQLite): acknowledged
writes are searchable at once, survive SIGKILL and restarts, survive swaps to a version rebuilt from the source
data and `indexer compact`; deletes never come back; concurrent writes and searches give no errors; bad bodies get
4xx with a reason; the admin scope guards writes. A 300-document JSONL corpus (IVF8, nprobe 2) keeps it small."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from indexer.quora import read_rows
from indexer.runtime.layout import IndexRoot
from indexer.runtime.manifest import Manifest
from indexer.runtime.store import STORE, Store
from tests.conftest import REPO, Server, start_server, stop_server
from tests.service.test_fuzz import SCHEMATHESIS_CHECKS

DOCS = 300
ADMIN, USER = "admin-key-0123456789", "user-key-0123456789"


def indexer_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "indexer.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=600, env=os.environ | {"OMP_NUM_THREADS": "1"})


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory, quora_file: Path) -> Path:
    """300 distinct Quora questions (rows < 300,000) as JSONL: three in four keep their integer qid, every fourth
    gets a string id "q<qid>"; metadata `bucket`."""
    path = tmp_path_factory.mktemp("writes-data") / "docs.jsonl"
    seen: dict[str, int] = {}
    for row in read_rows(quora_file):
        for qid, text in ((row.qid1, row.question1), (row.qid2, row.question2)):
            if text and text not in seen and len(seen) < DOCS:
                seen[text] = qid
        if len(seen) >= DOCS:
            break
    with open(path, "w") as fh:
        for n, (text, qid) in enumerate(seen.items()):
            fh.write(json.dumps({"id": qid if n % 4 else f"q{qid}", "text": text, "bucket": n % 5}) + "\n")
    return path


def base_docs(corpus: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in corpus.read_text().splitlines()]


def build(root: Path, corpus: Path, model: Path) -> str:
    # dense by default: these tests check cosine scores; the lexical side is checked with explicit modes
    r = indexer_cli("build", "--root", str(root), "--data", str(corpus), "--model", str(model), "--nlist", "8",
                    "--nprobe", "2", "--threads", "1", "--keep", "20", "--default-mode", "dense")
    assert r.returncode == 0, r.stderr
    return IndexRoot(root).current_version() or ""


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory, corpus: Path, minilm_mean: Path) -> Path:
    root = tmp_path_factory.mktemp("writes-template") / "root"
    build(root, corpus, minilm_mean)
    return root


@pytest.fixture()
def root(template: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "root"
    shutil.copytree(template, dst, symlinks=True)
    return dst


def serve(tmp: Path, root: Path, **env: str) -> Server:
    return start_server(tmp, {"STRATA_INDEX_ROOT": str(root), "STRATA_WATCH_INTERVAL_S": "0", "STRATA_THREADS": "1",
                              "STRATA_WORKERS": "2"} | env)


def kill(server: Server) -> None:
    server.proc.send_signal(signal.SIGKILL)
    server.proc.wait(timeout=30)


def until(condition, what: str, timeout: float = 300) -> None:  # noqa: ANN001 (a no-argument predicate)
    """Until `condition()` holds; the deadline only bounds a hang."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout} s for {what}")
        time.sleep(0.05)


def written_text(n: int) -> str:
    return f"Strata write number {n}: how would a {['red', 'blue', 'green'][n % 3]} kite fly in weather {n * 7}?"


class Truth:
    """What the clients were told: the state every later answer must show (last acknowledged op per id wins), and
    every text an id ever had (none but the current one may be served under it)."""

    def __init__(self, base: list[dict[str, Any]]) -> None:
        self.lock = threading.Lock()
        self.docs: dict[int | str, str | None] = {}  # id -> text, or None once deleted
        self.texts: dict[int | str, set[str]] = {d["id"]: {d["text"]} for d in base}

    def upserted(self, docs: list[dict[str, Any]]) -> None:
        with self.lock:
            for d in docs:
                self.docs[d["id"]] = d["text"]
                self.texts.setdefault(d["id"], set()).add(d["text"])

    def deleted(self, ids: list[int | str]) -> None:
        with self.lock:
            self.docs.update(dict.fromkeys(ids))


def top_hit(c: httpx.Client, text: str, **kw: Any) -> dict[str, Any]:
    r = c.post("/search", json={"query": text, "top_k": 10}, **kw)
    assert r.status_code == 200, r.text
    return r.json()["hits"][0]


def assert_served(c: httpx.Client, truth: Truth, **kw: Any) -> None:
    """Every acknowledged upsert is the top hit for its own text (integer ids come back as themselves); no earlier
    text of a written id, and no text of a deleted id, is served any more (nor, for integer ids, the id)."""
    for doc_id, text in truth.docs.items():
        if text is not None:
            hit = top_hit(c, text, **kw)
            assert hit["text"] == text and hit["score"] > 0.99, (doc_id, hit)
            if isinstance(doc_id, int):
                assert hit["id"] == doc_id
        for old in truth.texts.get(doc_id, set()) - {text}:
            hits = c.post("/search", json={"query": old, "top_k": 10}, **kw).json()["hits"]
            assert all(h["text"] != old for h in hits), (doc_id, old, hits[:2])
            if isinstance(doc_id, int) and text is None:
                assert doc_id not in [h["id"] for h in hits], (doc_id, hits[:2])


def test_acknowledged_writes_survive_sigkill(root: Path, corpus: Path, tmp_path: Path) -> None:
    """A writer runs PUTs and deletes (each checked searchable or gone at once) until the server is SIGKILLed
    mid-stream; after a restart every acknowledged write is there and every acknowledged delete is gone."""
    docs = base_docs(corpus)
    base_ints = [d["id"] for d in docs if isinstance(d["id"], int)]
    truth = Truth(docs)
    server = serve(tmp_path, root)
    visible_ms: list[float] = []
    problems: list[str] = []
    acked = threading.Event()
    stop = threading.Event()

    def writer() -> None:
        with server.client() as c:
            n = 0
            while not stop.is_set():
                n += 1
                docs = [{"id": 10_000_000 + n, "text": written_text(10_000_000 + n), "metadata": {"n": n}},
                        {"id": f"w-{n}", "text": written_text(n), "metadata": {"tag": "w"}}]
                try:
                    r = c.put("/documents", json={"documents": docs})
                    if r.status_code == 200:
                        truth.upserted(docs)
                        t0 = time.perf_counter()
                        hit = top_hit(c, docs[1]["text"])  # visible at once: the first search after the 200
                        visible_ms.append((time.perf_counter() - t0) * 1000)
                        if hit["text"] != docs[1]["text"]:
                            problems.append(f"not visible: {docs[1]} (top hit {hit})")
                    if n % 3 == 0:
                        gone = [base_ints[n], 10_000_000 + n - 1]
                        r = c.post("/documents/delete", json={"ids": gone})
                        if r.status_code == 200:
                            truth.deleted(gone)
                            hits = c.post("/search", json={"query": written_text(gone[1]), "top_k": 10}).json()
                            if any(h["id"] in gone for h in hits["hits"]):
                                problems.append(f"deleted {gone} still served: {hits['hits'][:2]}")
                except httpx.TransportError:
                    return  # the server is gone: what was not answered was not acknowledged
                if n >= 12:
                    acked.set()

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        assert acked.wait(180), server.log.read_text()[-2000:]
        kill(server)  # SIGKILL, most likely mid-write
    finally:
        stop.set()
        thread.join(60)
        if server.proc.poll() is None:
            kill(server)
    assert not problems, problems[:3]
    assert len(truth.docs) >= 24 and max(visible_ms) < 1000
    restarted = serve(tmp_path, root)
    try:
        with restarted.client() as c:
            assert_served(c, truth)
    finally:
        stop_server(restarted)


def test_writes_survive_a_rebuild_from_source_data_compaction_and_restart(root: Path, corpus: Path,
                                                                          minilm_mean: Path, tmp_path: Path) -> None:
    docs = base_docs(corpus)
    truth = Truth(docs)
    server = serve(tmp_path, root)
    try:
        with server.client() as c:
            v0 = c.get("/ready").json()["index_version"]
            replaced = next(d for d in docs if isinstance(d["id"], int))
            new = [{"id": 20_000_001, "text": written_text(20_000_001), "metadata": {"year": 2024}},
                   {"id": "fresh", "text": written_text(5), "metadata": {"lang": "en"}},
                   {"id": replaced["id"], "text": written_text(replaced["id"]), "metadata": {"bucket": 99}}]
            r = c.put("/documents", json={"documents": new})
            assert r.status_code == 200, r.text
            body = r.json()
            assert (body["upserted"], body["created"], body["replaced"]) == (3, 2, 1)
            assert body["index_size"] == DOCS + 2 and body["index_version"] == v0
            truth.upserted(new)
            deleted_ids = [d["id"] for d in docs[2:40:4] if isinstance(d["id"], int)][:5] + ["fresh"]
            r = c.post("/documents/delete", json={"ids": [*deleted_ids, 987654321]})
            assert r.status_code == 200, r.text
            assert (r.json()["deleted"], r.json()["missing"]) == (6, 1)
            truth.deleted(deleted_ids)
            assert_served(c, truth)  # the replaced document's old text is gone too

            # a version built from the source data (which still holds the deleted and replaced documents)
            v1 = build(root, corpus, minilm_mean)
            assert Manifest.load(IndexRoot(root).current_dir()).writes is None
            r = c.post("/admin/reload")
            assert r.json() == {"outcome": "swapped", "index_version": v1, "candidate": v1, "reason": None}
            assert_served(c, truth)
            assert c.get("/ready").json()["index_size"] == DOCS + 1 - 5

            # compaction folds the log into a version of its own
            r = indexer_cli("compact", "--root", str(root), "--threads", "1")
            assert r.returncode == 0, r.stderr
            assert "folded 5 write log entries" not in r.stdout and "folded 10 write log entries" in r.stdout
            folder = IndexRoot(root).current_dir()
            manifest = Manifest.load(folder)
            assert manifest.parent_version == v1 and manifest.writes is not None
            assert ((manifest.writes.folded_seq, manifest.writes.entries, manifest.writes.upserted,
                     manifest.writes.deleted) == (10, 10, 2, 5))
            assert manifest.index.ntotal == manifest.data.n_docs == DOCS + 1 - 5
            assert manifest.data.metadata_schema == {"bucket": "int", "year": "int"}  # "fresh" (lang) was deleted
            store = Store(folder / STORE)
            try:
                fid = store.ids_of([20_000_001, "fresh"])
                assert fid == {20_000_001: 20_000_001}  # "fresh" was deleted
                doc = store.documents([replaced["id"]])[replaced["id"]]
                assert doc.text == written_text(replaced["id"]) and doc.metadata == {"bucket": 99}
            finally:
                store.close()
            r = c.post("/admin/reload")
            assert r.json()["outcome"] == "swapped"
            assert_served(c, truth)
            again = indexer_cli("compact", "--root", str(root))
            assert again.returncode == 0 and "nothing to fold" in again.stdout
    finally:
        kill(server)
    restarted = serve(tmp_path, root)  # replays nothing: the version holds the whole log
    try:
        with restarted.client() as c:
            assert_served(c, truth)
        assert "replayed" not in restarted.log.read_text()
    finally:
        stop_server(restarted)


def lexical_ids(c: httpx.Client, query: str, mode: str = "lexical", **body: Any) -> list[int | str]:
    r = c.post("/search", json={"query": query, "top_k": 10, "mode": mode} | body)
    assert r.status_code == 200, r.text
    assert r.json()["mode"] == mode
    return [h["id"] for h in r.json()["hits"]]


def test_acknowledged_writes_are_searchable_lexically_and_survive_sigkill_and_compaction(
        root: Path, corpus: Path, tmp_path: Path) -> None:
    """The lexical side of the write path: an acknowledged upsert is found by BM25 at once (filters applied to it),
    a replaced or deleted document is not; after SIGKILL the log's replay restores the same lexical answers; and
    `indexer compact` folds them into the new version's own lexical index, which then answers with no replay."""
    docs = base_docs(corpus)
    replaced = next(d for d in docs if isinstance(d["id"], int))
    new = [{"id": "lex-a", "text": "Where do alphaquokka kites nest?", "metadata": {"bucket": 1}},
           {"id": 50_000_001, "text": "Why is the betaquokka river green?", "metadata": {"bucket": 2}},
           {"id": replaced["id"], "text": "How loud is a gammaquokka?", "metadata": {"bucket": 3}}]

    def check(c: httpx.Client) -> None:
        assert lexical_ids(c, "alphaquokka")[:1] == ["lex-a"]
        assert "lex-a" in lexical_ids(c, "alphaquokka", mode="hybrid")
        assert lexical_ids(c, "alphaquokka", filter={"bucket": 1}) == ["lex-a"]
        assert lexical_ids(c, "alphaquokka", filter={"bucket": 2}) == []
        assert lexical_ids(c, "gammaquokka")[:1] == [replaced["id"]]
        assert replaced["id"] not in lexical_ids(c, replaced["text"])  # its old text is gone
        assert lexical_ids(c, "betaquokka") == []  # deleted

    server = serve(tmp_path, root)
    try:
        with server.client() as c:
            r = c.put("/documents", json={"documents": new})
            assert r.status_code == 200, r.text
            assert lexical_ids(c, "betaquokka") == [50_000_001]  # visible at once
            r = c.post("/documents/delete", json={"ids": [50_000_001]})
            assert r.status_code == 200 and r.json()["deleted"] == 1
            check(c)
    finally:
        kill(server)  # SIGKILL: nothing but the log holds the writes
    restarted = serve(tmp_path, root)
    try:
        with restarted.client() as c:
            check(c)
        assert "replayed 4 write(s)" in restarted.log.read_text()
    finally:
        stop_server(restarted)

    r = indexer_cli("compact", "--root", str(root), "--threads", "1")
    assert r.returncode == 0, r.stderr
    folder = IndexRoot(root).current_dir()
    manifest = Manifest.load(folder)
    assert (manifest.writes is not None and manifest.lexical is not None
            and manifest.lexical.n_docs == manifest.index.ntotal == DOCS + 1)
    from indexer.runtime.lexical import open_lexical

    lexical, store = open_lexical(folder, manifest.lexical), Store(folder / STORE)
    try:
        fid = store.ids_of(["lex-a"])["lex-a"]
        assert lexical.search("alphaquokka", 5)[1].tolist() == [fid]  # in the version's own BM25 index now
        assert lexical.search("betaquokka", 5)[1].size == 0
    finally:
        store.close()
    compacted = serve(tmp_path, root)
    try:
        with compacted.client() as c:
            check(c)
            assert c.get("/ready").json()["index_version"] == folder.name
        # nothing replayed onto the compacted version (the restart first opens the version served last, with its
        # replay, to judge the new one against it: the swap gates hold at startup too)
        assert f"onto {folder.name}" not in compacted.log.read_text()
    finally:
        stop_server(compacted)


def test_concurrent_writes_and_searches_across_a_swap(root: Path, corpus: Path, minilm_mean: Path,
                                                      tmp_path: Path) -> None:
    """2 writers and 4 searchers without pause while a rebuilt version is swapped in: every request answers
    200, and every acknowledged write (some acknowledged during the swap) is served afterwards."""
    truth = Truth(base_docs(corpus))
    server = serve(tmp_path, root)
    stop = threading.Event()
    failures: list[str] = []
    counts = {"write": 0, "search": 0}
    lock = threading.Lock()

    def writer(w: int) -> None:
        with server.client() as c:
            n = 0
            while not stop.is_set():
                n += 1
                key = 30_000_000 + w * 100_000 + n
                docs = [{"id": key, "text": written_text(key)}]
                r = c.put("/documents", json={"documents": docs})
                if r.status_code != 200:
                    failures.append(f"PUT {r.status_code} {r.text[:200]}")
                    continue
                truth.upserted(docs)
                if n % 4 == 0:
                    r = c.post("/documents/delete", json={"ids": [key - 1]})
                    if r.status_code != 200:
                        failures.append(f"delete {r.status_code} {r.text[:200]}")
                        continue
                    truth.deleted([key - 1])
                with lock:
                    counts["write"] += 1

    def searcher(s: int) -> None:
        with server.client() as c:
            n = 0
            while not stop.is_set():
                n += 1
                r = c.post("/search", json={"query": written_text(30_000_000 + s * 7 + n), "top_k": 10})
                if r.status_code != 200:
                    failures.append(f"search {r.status_code} {r.text[:200]}")
                with lock:
                    counts["search"] += 1

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(2)]
    threads += [threading.Thread(target=searcher, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    try:
        # the load runs before the build, and goes on across and after the swap: counted, not timed (the same
        # seconds carry a fraction of the requests on a loaded machine)
        until(lambda: counts["write"] >= 5 and counts["search"] >= 10 or bool(failures), "load before the build")
        v1 = build(root, corpus, minilm_mean)  # built while the load runs
        r = httpx.post(f"{server.url}/admin/reload", timeout=120)
        assert r.status_code == 200 and r.json()["index_version"] == v1, r.text
        at_swap = dict(counts)
        until(lambda: counts["write"] >= at_swap["write"] + 5 and counts["search"] >= at_swap["search"] + 10
              or bool(failures), "writes and searches on the new version")
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    try:
        assert not failures, failures[:5]
        assert counts["write"] >= 10 and counts["search"] >= 20, counts
        with server.client() as c:
            assert c.get("/ready").json()["index_version"] == v1
            assert_served(c, truth)
    finally:
        stop_server(server)


BAD_BODIES: list[tuple[str, str, object, str]] = [
    ("PUT", "/documents", {"documents": [{"id": 1, "text": "   "}]}, "empty or whitespace"),
    ("PUT", "/documents", {"documents": [{"id": 1, "text": ""}]}, "empty or whitespace"),
    ("PUT", "/documents", {"documents": [{"text": "no id"}]}, "missing"),
    ("PUT", "/documents", {"documents": [{"id": 1.5, "text": "float id"}]}, "valid integer"),
    ("PUT", "/documents", {"documents": [{"id": True, "text": "bool id"}]}, "valid integer"),
    ("PUT", "/documents", {"documents": [{"id": "", "text": "empty id"}]}, "must not be empty"),
    ("PUT", "/documents", {"documents": [{"id": 1 << 64, "text": "huge id"}]}, "64 bits"),
    ("PUT", "/documents", {"documents": [{"id": 1, "text": "t", "metadata": [1, 2]}]}, "valid dictionary"),
    ("PUT", "/documents", {"documents": [{"id": 1, "text": "t", "metadata": "x"}]}, "valid dictionary"),
    ("PUT", "/documents", {"documents": [{"id": 1, "text": "t", "metadata": {"": 1}}]}, "names must not be empty"),
    ("PUT", "/documents", {"documents": [{"id": 1, "text": "t", "extra": 1}]}, "Extra inputs"),
    ("PUT", "/documents", {"documents": []}, "at least 1"),
    ("PUT", "/documents", {"documents": [{"id": i, "text": "t"} for i in range(129)]}, "at most 128"),
    ("PUT", "/documents", {"docs": []}, "Field required"),
    ("POST", "/documents/delete", {"ids": []}, "at least 1"),
    ("POST", "/documents/delete", {"ids": [None]}, "valid"),
    ("POST", "/documents/delete", {"ids": [{"a": 1}]}, "valid"),
    ("POST", "/documents/delete", {"ids": list(range(1001))}, "at most 1000"),
]


def test_bad_bodies_get_4xx_with_a_reason_and_nothing_is_logged(root: Path, tmp_path: Path) -> None:
    server = serve(tmp_path, root, STRATA_MAX_BODY_BYTES="65536")
    try:
        with server.client() as c:
            for method, path, body, reason in BAD_BODIES:
                r = c.request(method, path, json=body)
                assert r.status_code == 422, (path, body if len(str(body)) < 200 else "…", r.status_code, r.text)
                assert reason in r.text, (body if len(str(body)) < 200 else "…", r.text)
            raw = b'{"documents": [{"id": 1, "text": "t", "metadata": {"x": NaN}}]}'  # Python's parser reads NaN
            nan = c.request("PUT", "/documents", content=raw, headers={"Content-Type": "application/json"})
            assert nan.status_code == 422 and "finite" in nan.text, nan.text
            big = c.put("/documents", json={"documents": [{"id": i, "text": "y" * 1500} for i in range(60)]})
            assert big.status_code == 413 and "limit is 65536" in big.json()["detail"]
            assert c.get("/ready").json()["index_size"] == DOCS
            assert not (root / "writes" / "log.sqlite").exists()  # nothing was logged
            ok = c.put("/documents", json={"documents": [{"id": "x", "text": "a valid document"}]})
            assert ok.status_code == 200 and ok.json()["seq"] == 1
        # the write endpoints of the app's OpenAPI schema, fuzzed: no 5xx, documented statuses and bodies only
        fuzz = subprocess.run([sys.executable, "-m", "schemathesis.cli", "run", f"{server.url}/openapi.json",
                               "--checks", SCHEMATHESIS_CHECKS, "--include-tag", "documents", "--max-examples", "40",
                               "--seed", "20260101", "--request-timeout", "30", "--no-color",
                               "--generation-database", "none"], capture_output=True, text=True, timeout=600,
                              cwd=tmp_path)
        assert fuzz.returncode == 0, fuzz.stdout[-4000:]
        generated = re.search(r"(\d+) generated", fuzz.stdout)
        assert generated and int(generated.group(1)) >= 40, fuzz.stdout[-2000:]
        with server.client() as c:
            assert top_hit(c, "a valid document")["text"] == "a valid document"
    finally:
        stop_server(server)


def test_quora_versions_take_string_ids_and_metadata_like_any_corpus(tmp_path: Path, minilm_mean: Path,
                                                                    quora_file: Path) -> None:
    """One store schema: a Quora build's store is a corpus store (its qids are its external ids), so it takes
    writes of any id and metadata, and `indexer compact` folds them (it refused them with a 409 before)."""
    root = tmp_path / "quora"
    r = indexer_cli("build", "--root", str(root), "--model", str(minilm_mean), "--data", str(quora_file), "--rows",
                    "200", "--threads", "1", "--nlist", "4", "--no-eval")
    assert r.returncode == 0, r.stderr
    server = serve(tmp_path, root)
    try:
        with server.client() as c:
            docs = [{"id": "s", "text": written_text(7), "metadata": {"a": 1}},
                    {"id": 999_999, "text": written_text(999_999)}]
            ok = c.put("/documents", json={"documents": docs})
            assert ok.status_code == 200, ok.text
            for doc in docs:
                hit = top_hit(c, doc["text"])
                assert hit["id"] == doc["id"] and hit["text"] == doc["text"]
            assert top_hit(c, written_text(7))["metadata"] == {"a": 1}
        r = indexer_cli("compact", "--root", str(root), "--threads", "1", "--no-eval")
        assert r.returncode == 0 and "folded 2 write log entries" in r.stdout, r.stderr
        manifest = Manifest.load(IndexRoot(root).current_dir())
        assert manifest.data.protocol != "corpus" and manifest.data.metadata_schema == {"a": "int"}
        store = Store(IndexRoot(root).current_dir() / STORE)
        try:
            assert store.ids_of(["s", 999_999]).keys() == {"s", 999_999}
        finally:
            store.close()
    finally:
        stop_server(server)


def test_writes_need_the_admin_scope_and_an_unwritable_log_is_503(root: Path, tmp_path: Path) -> None:
    (root / "writes").write_text("a file where the write log's folder should be")
    server = start_server(tmp_path, {"STRATA_INDEX_ROOT": str(root), "STRATA_WATCH_INTERVAL_S": "0",
                                     "STRATA_THREADS": "1", "STRATA_API_KEYS": f"{USER},{ADMIN}:admin"},
                          wait_ready=False)
    body = {"documents": [{"id": 1, "text": "needs a key"}]}
    try:
        with server.client() as c:
            until(lambda: c.get("/ready", headers={"Authorization": f"Bearer {USER}"}).status_code == 200, "ready")
            assert c.put("/documents", json=body).status_code == 401
            for method, path, payload in (("PUT", "/documents", body), ("POST", "/documents/delete", {"ids": [1]})):
                r = c.request(method, path, json=payload, headers={"Authorization": f"Bearer {USER}"})
                assert r.status_code == 403 and "admin" in r.json()["detail"], r.text
            r = c.put("/documents", json=body, headers={"Authorization": f"Bearer {ADMIN}"})
            assert r.status_code == 503 and "cannot open the write log" in r.json()["detail"], r.text
            hits = c.post("/search", json={"query": "needs a key"}, headers={"Authorization": f"Bearer {USER}"})
            assert hits.status_code == 200 and all(h["text"] != "needs a key" for h in hits.json()["hits"])
    finally:
        stop_server(server)



def test_written_fields_and_types_filter_at_once_and_the_same_after_restart_and_compaction(
        template: Path, tmp_path: Path) -> None:
    """A field first written over HTTP (`newfield`), and a value of another type in a field of the build (`bucket`
    holds ints; a str is written), filter at once — dense, lexical and hybrid, on `/search` and on the collection's
    route — and give the same answers after SIGKILL and the log's replay, and after `indexer compact` (the 422
    "unknown field" until compaction was the defect)."""
    root = tmp_path / "coll" / "garden"
    shutil.copytree(template, root, symlinks=True)
    new = [{"id": "nf-1", "text": "Where do alphaquokka kites nest?", "metadata": {"newfield": 5, "bucket": "five"}},
           {"id": "nf-2", "text": "Why is the betaquokka river green?", "metadata": {"newfield": 7.5}},
           {"id": 50_000_009, "text": "How loud is a gammaquokka?", "metadata": {"newfield": "x", "bucket": 2}}]
    query = "alphaquokka betaquokka gammaquokka kites river"
    expected: dict[str, set[int | str]] = {
        json.dumps({"newfield": 5}): {"nf-1"},
        json.dumps({"newfield": {"gte": 6}}): {"nf-2"},
        json.dumps({"newfield": {"in": ["x", 5]}}): {"nf-1", 50_000_009},
        json.dumps({"bucket": "five"}): {"nf-1"},
        json.dumps({"and": [{"bucket": {"in": ["five", 2]}}, {"newfield": {"lt": 100}}]}): {"nf-1"},
        json.dumps({"or": [{"newfield": "x"}, {"bucket": {"gt": "a"}}]}): {"nf-1", 50_000_009},
    }

    def answers(c: httpx.Client) -> dict[tuple[str, str, str], list[int | str]]:
        out = {}
        for flt in expected:
            for mode in ("dense", "lexical", "hybrid"):
                for path in ("/search", "/collections/garden/search"):
                    r = c.post(path, json={"query": query, "top_k": 10, "mode": mode, "filter": json.loads(flt)})
                    assert r.status_code == 200, (flt, mode, path, r.text)
                    ids = [h["id"] for h in r.json()["hits"]]
                    assert set(ids) == expected[flt], (flt, mode, path, ids)
                    out[(flt, mode, path)] = ids
        return out

    env = {"STRATA_COLLECTIONS_DIR": str(root.parent), "STRATA_DEFAULT_COLLECTION": "garden",
           "STRATA_WATCH_INTERVAL_S": "0", "STRATA_THREADS": "1", "STRATA_WORKERS": "2"}
    server = start_server(tmp_path, env)
    try:
        with server.client() as c:
            r = c.put("/collections/garden/documents", json={"documents": new})
            assert r.status_code == 200, r.text
            first = answers(c)  # at once
            r = c.post("/search", json={"query": query, "filter": {"nofield": 1}})
            assert r.status_code == 200 and r.json()["hits"] == []  # a field nobody holds matches nothing
    finally:
        kill(server)
    restarted = start_server(tmp_path, env)
    try:
        with restarted.client() as c:
            assert answers(c) == first
    finally:
        stop_server(restarted)
    r = indexer_cli("compact", "--root", str(root), "--threads", "1", "--no-eval")
    assert r.returncode == 0, r.stderr
    assert Manifest.load(IndexRoot(root).current_dir()).data.metadata_schema["newfield"] == "float|str"
    compacted = start_server(tmp_path, env)
    try:
        with compacted.client() as c:
            assert answers(c) == first
    finally:
        stop_server(compacted)


def test_a_manifest_changed_after_compaction_is_refused_and_no_write_is_lost(root: Path, corpus: Path,
                                                                             tmp_path: Path) -> None:
    """The manifest decides which logged writes a version holds (`writes.folded_seq`): after a compaction and 10
    more writes, adding 10 to the new version's folded_seq made `POST /admin/reload` swap to it and drop the 10
    writes. The manifest's own checksum refuses it as damaged (reload 409, `indexer verify` names the file), and
    every acknowledged write stays served."""
    truth = Truth(base_docs(corpus))
    server = serve(tmp_path, root)
    try:
        with server.client() as c:
            def write(ids: range) -> None:
                docs = [{"id": 30_000_000 + n, "text": written_text(30_000_000 + n)} for n in ids]
                r = c.put("/documents", json={"documents": docs})
                assert r.status_code == 200, r.text
                truth.upserted(docs)

            write(range(20))
            r = indexer_cli("compact", "--root", str(root), "--threads", "1", "--no-eval")
            assert r.returncode == 0, r.stderr
            folder = IndexRoot(root).current_dir()
            assert Manifest.load(folder).writes.folded_seq == 20  # type: ignore[union-attr]
            write(range(20, 30))
            raw = json.loads((folder / "manifest.json").read_text())
            raw["writes"]["folded_seq"] += 10  # the 10 documents acknowledged after the compaction
            (folder / "manifest.json").write_text(json.dumps(raw, indent=2))
            r = c.post("/admin/reload")
            assert r.status_code == 409 and r.json()["outcome"] == "refused", r.text
            assert "manifest.json does not match its own checksum" in r.json()["reason"], r.text
            assert_served(c, truth)
            verify = indexer_cli("verify", "--root", str(root))
            assert verify.returncode != 0 and f"{folder}/manifest.json" in verify.stderr, verify.stderr
    finally:
        stop_server(server)


def test_a_long_document_is_written_whole_and_one_over_the_limit_is_a_422(root: Path, tmp_path: Path) -> None:
    """A document's text may run far past a query's 2,000 characters: kept whole (read back, BM25 over all of it;
    the vector is its first window's, as a build's). Over `MAX_DOCUMENT_CHARS` it is a 422 naming the limit."""
    from service.schemas.common import MAX_DOCUMENT_CHARS, MAX_TEXT_CHARS

    filler = " ".join(f"sentence {i} about gardens and the weather." for i in range(400))
    text = filler + " The last word is zyzzyva."
    assert len(text) > 5 * MAX_TEXT_CHARS
    server = serve(tmp_path, root)
    try:
        with server.client() as c:
            ok = c.put("/documents", json={"documents": [{"id": "long", "text": text}]})
            assert ok.status_code == 200, ok.text
            assert c.get("/documents/long").json()["text"] == text
            hits = c.post("/search", json={"query": "zyzzyva", "mode": "lexical"}).json()["hits"]
            assert [h["id"] for h in hits] == ["long"]
            over = c.put("/documents", json={"documents": [{"id": "over", "text": "y" * (MAX_DOCUMENT_CHARS + 1)}]})
            assert over.status_code == 422 and f"limit is {MAX_DOCUMENT_CHARS}" in over.text, over.text[:300]
            query = c.post("/search", json={"query": "y" * (MAX_TEXT_CHARS + 1)})  # queries keep their limit
            assert query.status_code == 422 and f"limit is {MAX_TEXT_CHARS}" in query.text
    finally:
        stop_server(server)
