"""The swap gates that protect a served root from a bad new version, on real servers (uvicorn on 127.0.0.1, the real
ONNX encoder, FAISS, SQLite and files):

- the shrink guard (STRATA_MAX_SHRINK): a much smaller build into a served root is refused by the watcher, SIGHUP
  and `/admin/reload`, visible in /ready, /metrics and the log, and served with `force=true`; a rebuild from source
  after a compaction, which the write log tops back up, is not refused (sizes compared after replay);
- a refusal is shown only while `current` points at the refused version (`indexer rollback` clears it);
- a refused version stays refused after SIGKILL and restarts (the serving record), until forced;
- integrity: a version whose files do not match their checksums (2 MiB overwritten in the middle of index.faiss,
  64 KiB of its IVF centroids, 1 MiB of random bytes in store.sqlite, a truncated file) is refused at swap and at
  startup with the file named (a restart serves the version that passed last; a root with none is not ready), and
  `indexer verify` names it; a manifest older than checksums still loads.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from indexer.quora import read_rows
from indexer.runtime.integrity import write_manifest
from indexer.runtime.layout import IndexRoot, new_version_name
from indexer.runtime.manifest import Manifest
from tests.conftest import REPO, Server, start_server, stop_server

MIB = 1 << 20


def indexer_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "indexer.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=600, env=os.environ | {"OMP_NUM_THREADS": "1"} | (env or {}))


def write_corpus(path: Path, quora_file: Path, n: int, *, blob: int = 0) -> Path:
    """`n` distinct Quora questions as JSONL (integer ids), metadata `bucket`, and with `blob` a padding string
    field of that many characters (a store of a few MiB without encoding more texts)."""
    rng = random.Random(7)
    seen: dict[str, int] = {}
    for row in read_rows(quora_file):
        for qid, text in ((row.qid1, row.question1), (row.qid2, row.question2)):
            if text and text not in seen and len(seen) < n:
                seen[text] = qid
        if len(seen) >= n:
            break
    assert len(seen) == n
    with open(path, "w") as fh:
        for i, (text, qid) in enumerate(seen.items()):
            doc: dict[str, object] = {"id": qid, "text": text, "bucket": i % 5}
            if blob:
                doc["note"] = "".join(rng.choices("abcdefghijklmnopqrstuvwxyz ", k=blob))
            fh.write(json.dumps(doc) + "\n")
    return path


def build(root: Path, data: Path, model: Path, *extra: str, env: dict[str, str] | None = None) -> str:
    r = indexer_cli("build", "--root", str(root), "--data", str(data), "--model", str(model), "--nprobe", "4",
                    "--threads", "1", "--keep", "20", *extra, env=env)
    assert r.returncode == 0, r.stderr
    return IndexRoot(root).current_version() or ""


def ready(server: Server) -> dict:
    return httpx.get(f"{server.url}/ready", timeout=30).json()


def metric(server: Server, line_start: str) -> float | None:
    text = httpx.get(f"{server.url}/metrics", timeout=30).text
    line = next((ln for ln in text.splitlines() if ln.startswith(line_start)), None)
    return float(line.rsplit(" ", 1)[1]) if line else None


def wait_until(predicate: Callable[[], bool], what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def refusal(server: Server) -> dict | None:
    return ready(server).get("swap_refused")


def serve(tmp: Path, root: Path, watch: str = "0.3") -> Server:
    return start_server(tmp, {"STRATA_INDEX_ROOT": str(root), "STRATA_WATCH_INTERVAL_S": watch,
                              "STRATA_THREADS": "1", "STRATA_WORKERS": "2"})


# -- the shrink guard ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def shrink_data(tmp_path_factory: pytest.TempPathFactory, quora_file: Path) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("shrink-data")
    full = write_corpus(folder / "full.jsonl", quora_file, 300)
    # a truncated input: its first 30 lines (10 % of the corpus)
    cut = folder / "truncated.jsonl"
    cut.write_text("".join(full.read_text().splitlines(keepends=True)[:30]))
    return full, cut


@pytest.fixture(scope="module")
def shrink_template(tmp_path_factory: pytest.TempPathFactory, shrink_data: tuple[Path, Path],
                    minilm_mean: Path) -> Path:
    """A root holding one version of the 300-document corpus (`indexer build`), never served: each shrink test serves
    a copy of it (one build for the module; the corpus has no queries, so there is nothing to evaluate)."""
    root = tmp_path_factory.mktemp("shrink-template") / "root"
    build(root, shrink_data[0], minilm_mean, "--nlist", "8")
    return root


def served_copy(template: Path, tmp_path: Path) -> tuple[Path, str]:
    """A copy of `template` (its files, its `current`) and its current version."""
    root = tmp_path / "root"
    shutil.copytree(template, root, symlinks=True)
    return root, IndexRoot(root).current_version() or ""


def test_a_much_smaller_build_is_refused_on_automatic_swaps_and_served_with_force(
        tmp_path: Path, shrink_data: tuple[Path, Path], shrink_template: Path, minilm_mean: Path) -> None:
    _, cut = shrink_data
    root, v0 = served_copy(shrink_template, tmp_path)
    server = serve(tmp_path, root)
    try:
        assert ready(server)["index_version"] == v0 and ready(server)["index_size"] == 300
        t0 = time.monotonic()
        v1 = build(root, cut, minilm_mean, "--nlist", "1", "--no-eval")
        assert IndexRoot(root).current_version() == v1

        # the watcher refuses it by itself (the defect: it was served within 8 s)
        wait_until(lambda: (refusal(server) or {}).get("version") == v1, "the watcher's refusal")
        r = refusal(server)
        assert r["kind"] == "shrink" and "would serve 30 documents" in r["reason"] and "10.0%" in r["reason"]
        assert "STRATA_MAX_SHRINK=0.1" in r["reason"] and "force=true" in r["reason"]
        assert ready(server)["index_version"] == v0 and ready(server)["index_size"] == 300
        assert metric(server, 'strata_index_swap_refused_total{reason="shrink"}') == 1
        assert metric(server, "strata_index_last_swap_refused ") == 1
        assert f"refused index swap to {v1} (shrink, trigger watch)" in server.log.read_text()
        time.sleep(1.0)  # not retried in a loop, and still not served
        assert metric(server, 'strata_index_swap_refused_total{reason="shrink"}') == 1
        assert ready(server)["index_version"] == v0
        print(f"\nrefused by the watcher {time.monotonic() - t0:.1f}s after the build started")

        # SIGHUP tries again, and refuses again
        os.kill(server.proc.pid, signal.SIGHUP)
        wait_until(lambda: metric(server, 'strata_index_swap_refused_total{reason="shrink"}') == 2, "SIGHUP")
        assert ready(server)["index_version"] == v0

        # POST /admin/reload without force: 409 with the reason
        resp = httpx.post(f"{server.url}/admin/reload", timeout=60)
        assert resp.status_code == 409 and resp.json()["outcome"] == "refused", resp.text
        assert "would serve 30 documents" in resp.json()["reason"]
        hit = httpx.post(f"{server.url}/search",
                         timeout=30, json={"query": "How do I learn Python?", "top_k": 3}).json()
        assert hit["index_version"] == v0 and len(hit["hits"]) == 3

        # the operator insists: force=true serves it
        resp = httpx.post(f"{server.url}/admin/reload", params={"force": "true"}, timeout=60)
        assert resp.status_code == 200 and resp.json()["outcome"] == "swapped", resp.text
        assert ready(server)["index_version"] == v1 and ready(server)["index_size"] == 30
        assert "swap_refused" not in ready(server)
        assert metric(server, "strata_index_last_swap_refused ") == 0

        # `indexer rollback` to the bigger, older version swaps back (a rollback is not size-gated)
        rb = indexer_cli("rollback", "--root", str(root), v0)
        assert rb.returncode == 0, rb.stderr
        wait_until(lambda: ready(server)["index_version"] == v0, "the rollback")
        assert "swap_refused" not in ready(server)
    finally:
        stop_server(server)


def test_rollback_to_the_served_version_clears_the_refusal(tmp_path: Path, shrink_data: tuple[Path, Path],
                                                           shrink_template: Path, minilm_mean: Path) -> None:
    _, cut = shrink_data
    root, v0 = served_copy(shrink_template, tmp_path)
    server = serve(tmp_path, root)
    try:
        v1 = build(root, cut, minilm_mean, "--nlist", "1", "--no-eval")
        wait_until(lambda: (refusal(server) or {}).get("version") == v1, "the refusal")
        assert metric(server, "strata_index_last_swap_refused ") == 1
        rb = indexer_cli("rollback", "--root", str(root), v0)  # current -> the version being served
        assert rb.returncode == 0, rb.stderr
        wait_until(lambda: refusal(server) is None, "the refusal to be cleared")  # the defect: it stayed
        assert ready(server)["index_version"] == v0
        assert metric(server, "strata_index_last_swap_refused ") == 0
        resp = httpx.post(f"{server.url}/admin/reload", timeout=60)
        assert resp.json()["outcome"] == "unchanged" and resp.json()["reason"] is None
        # pointing `current` at the shrunken version again refuses it again
        assert indexer_cli("rollback", "--root", str(root), v1).returncode == 0
        wait_until(lambda: (refusal(server) or {}).get("version") == v1, "the second refusal")
        assert refusal(server)["kind"] == "shrink"
    finally:
        stop_server(server)


def kill9(server: Server) -> None:
    server.proc.send_signal(signal.SIGKILL)
    server.proc.wait(timeout=30)


def assert_serves_despite_refusal(server: Server, served: str, refused: str, size: int) -> None:
    body = ready(server)
    assert body["index_version"] == served and body["index_size"] == size, body
    r = body["swap_refused"]
    assert r["version"] == refused and r["kind"] == "shrink", r
    hit = httpx.post(f"{server.url}/search", json={"query": "How do I learn Python?", "top_k": 3}).json()
    assert hit["index_version"] == served
    assert metric(server, "strata_index_last_swap_refused ") == 1
    assert f"refused index swap to {refused} (shrink, trigger startup)" in server.log.read_text()


def test_a_refused_version_stays_refused_after_sigkill_and_restarts(
        tmp_path: Path, shrink_data: tuple[Path, Path], shrink_template: Path, minilm_mean: Path) -> None:
    """The defect: a build the watcher refused became `current`, and after `kill -9` and a restart (what `restart:
    unless-stopped` does) it was served with no warning. Now every restart serves the version that passed the gates
    last, says so in /ready, /metrics and the log; a bad build published while the API is down is judged at
    startup; only a forced reload serves a refused version, and it is then what restarts serve."""
    _, cut = shrink_data
    root, v0 = served_copy(shrink_template, tmp_path)
    server = serve(tmp_path, root)
    try:
        v1 = build(root, cut, minilm_mean, "--nlist", "1", "--no-eval")
        wait_until(lambda: (refusal(server) or {}).get("version") == v1, "the watcher's refusal")
        record = json.loads((root / "serving.json").read_text())
        assert record["served"] == v0 and record["refused"][v1]["kind"] == "shrink"
    finally:
        kill9(server)
    for _ in range(2):  # any number of crashes: the refusal is remembered, v1 is never opened again
        server = serve(tmp_path, root)
        try:
            assert_serves_despite_refusal(server, v0, v1, 300)
            assert "remembered across restarts" in refusal(server)["reason"]
            time.sleep(1.0)  # several watch intervals: the watcher does not swap either
            assert ready(server)["index_version"] == v0
        finally:
            kill9(server)

    v2 = build(root, cut, minilm_mean, "--nlist", "1", "--no-eval")  # published while no API runs
    server = serve(tmp_path, root)
    try:
        assert_serves_despite_refusal(server, v0, v2, 300)  # judged at startup against the version served last
        assert "remembered" not in refusal(server)["reason"]
        resp = httpx.post(f"{server.url}/admin/reload", params={"force": "true"}, timeout=60)  # the operator
        assert resp.status_code == 200 and resp.json()["outcome"] == "swapped", resp.text
        assert ready(server)["index_version"] == v2
    finally:
        kill9(server)
    server = serve(tmp_path, root)
    try:
        assert ready(server)["index_version"] == v2 and "swap_refused" not in ready(server)
        assert metric(server, "strata_index_last_swap_refused ") == 0
        assert json.loads((root / "serving.json").read_text()) == {"served": v2, "refused": {}}
    finally:
        stop_server(server)


def test_a_rebuild_from_source_after_compaction_is_not_refused(tmp_path: Path, quora_file: Path,
                                                               minilm_mean: Path) -> None:
    """The issue's case, scaled down: 200 source documents, 150 more written through the API and compacted into a
    350-document version; a rebuild from the 200 source documents (57 % of 350, far past the 10 % guard) gets the
    150 back from the write log, so it serves 350 and is swapped in by the watcher."""
    data = write_corpus(tmp_path / "source.jsonl", quora_file, 200)
    root = tmp_path / "root"
    v0 = build(root, data, minilm_mean, "--nlist", "4", "--no-eval")
    server = serve(tmp_path, root)
    try:
        written = [{"id": 50_000_000 + i, "text": f"Strata written document {i}: why would a kite fly at {i * 7} m?",
                    "metadata": {"bucket": i % 5}} for i in range(150)]
        for batch in (written[:75], written[75:]):  # at most 128 per request
            resp = httpx.put(f"{server.url}/documents", json={"documents": batch}, timeout=120)
            assert resp.status_code == 200, resp.text
        assert resp.json()["index_size"] == 350
        compact = indexer_cli("compact", "--root", str(root), "--threads", "1", "--no-eval")
        assert compact.returncode == 0, compact.stderr
        v1 = IndexRoot(root).current_version()
        m1 = Manifest.load(IndexRoot(root).current_dir())
        assert v1 != v0 and m1.index.ntotal == 350 and m1.writes is not None
        assert m1.checksums is not None and {"index.faiss", "store.sqlite"} <= set(m1.checksums.files)
        wait_until(lambda: ready(server)["index_version"] == v1, "the compacted version")

        v2 = build(root, data, minilm_mean, "--nlist", "4", "--no-eval")  # 200 documents, folds no write
        assert Manifest.load(IndexRoot(root).current_dir()).index.ntotal == 200
        wait_until(lambda: ready(server)["index_version"] == v2 or refusal(server) is not None, "the rebuild")
        assert refusal(server) is None and ready(server)["index_version"] == v2
        assert ready(server)["index_size"] == 350  # 200 built + 150 replayed from the log
        assert (metric(server, 'strata_index_swap_refused_total{reason="shrink"}') or 0) == 0
        hit = httpx.post(f"{server.url}/search", timeout=30, json={"query": written[42]["text"], "top_k": 1}).json()
        assert hit["index_version"] == v2 and hit["hits"][0]["id"] == written[42]["id"]
    finally:
        stop_server(server)


def test_settings_are_validated_before_any_work(tmp_path: Path, shrink_data: tuple[Path, Path],
                                                minilm_mean: Path) -> None:
    full, _ = shrink_data
    root = tmp_path / "root"
    for bad in ("abc", "1.5", "-0.1", "nan"):
        t0 = time.monotonic()
        r = indexer_cli("build", "--root", str(root), "--data", str(full), "--model", str(minilm_mean),
                        "--threads", "1", env={"STRATA_MAX_SHRINK": bad})
        assert r.returncode == 2 and f"STRATA_MAX_SHRINK={bad!r}" in r.stderr, (bad, r.stderr)
        assert "Traceback" not in r.stderr and "documents:" not in r.stderr  # refused before encoding anything
        assert not (root / "versions").exists()
        print(f"\nindexer build STRATA_MAX_SHRINK={bad}: refused in {time.monotonic() - t0:.1f}s")
    r = indexer_cli("compact", "--root", str(root), env={"STRATA_MAX_SHRINK": "abc"})
    assert r.returncode == 2 and "STRATA_MAX_SHRINK='abc'" in r.stderr
    svc = subprocess.run([sys.executable, "-m", "service"], cwd=REPO, capture_output=True, text=True, timeout=60,
                         env=os.environ | {"STRATA_MAX_SHRINK": "abc", "STRATA_INDEX_ROOT": str(root)})
    assert svc.returncode == 2 and "STRATA_MAX_SHRINK='abc'" in svc.stderr and "Traceback" not in svc.stderr


# -- integrity -------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def damage_root(tmp_path_factory: pytest.TempPathFactory, quora_file: Path, minilm_mean: Path) -> Path:
    """2,500 documents, IVF-Flat (float32 lists: a ~4 MiB index.faiss), each with a 700-character `note` (a
    ~2 MiB store.sqlite)."""
    folder = tmp_path_factory.mktemp("damage")
    data = write_corpus(folder / "docs.jsonl", quora_file, 2500, blob=700)
    root = folder / "root"
    build(root, data, minilm_mean, "--codec", "Flat", "--nlist", "48", "--no-eval")
    version = IndexRoot(root).current_dir()
    assert (version / "index.faiss").stat().st_size > 3 * MIB and (version / "store.sqlite").stat().st_size > 1.5 * MIB
    return root


@pytest.fixture(scope="module")
def damage_server(tmp_path_factory: pytest.TempPathFactory, damage_root: Path) -> Iterator[Server]:
    srv = serve(tmp_path_factory.mktemp("damage-server"), damage_root)
    yield srv
    stop_server(srv)


def overwrite(path: Path, offset: int, data: bytes) -> None:
    size = path.stat().st_size
    with open(path, "r+b") as fh:
        fh.seek(offset)
        fh.write(data)
    assert path.stat().st_size == size  # the right size: only the checksum can tell


def _index_middle(folder: Path) -> str:
    path = folder / "index.faiss"
    overwrite(path, path.stat().st_size // 2 - MIB, np.random.default_rng(1).bytes(2 * MIB))
    return "index.faiss"


def _centroids(folder: Path) -> str:
    import faiss

    path = folder / "index.faiss"
    index = faiss.read_index(str(path))
    centroids = faiss.vector_to_array(faiss.downcast_index(index.quantizer).codes).tobytes()
    assert len(centroids) == 48 * 384 * 4  # 72 KiB
    offset = path.read_bytes().find(centroids)
    assert offset > 0
    overwrite(path, offset + 4096, np.random.default_rng(2).bytes(64 * 1024))  # inside the centroids
    return "index.faiss"


def _store_random(folder: Path) -> str:
    path = folder / "store.sqlite"
    overwrite(path, path.stat().st_size // 2 - MIB // 2, os.urandom(MIB))
    return "store.sqlite"


def _truncated(folder: Path) -> str:
    path = folder / "index.faiss"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 4096])
    return "index.faiss"


def damaged_copy(root: Path, damage: Callable[[Path], str]) -> tuple[str, str]:
    """A copy of the current version under a newer name (manifest and its checksums copied), damaged by `damage`,
    made current. Returns (version, damaged file)."""
    r = IndexRoot(root)
    name = new_version_name()
    shutil.copytree(r.current_dir(), r.version_dir(name))
    raw = json.loads((r.version_dir(name) / "manifest.json").read_text())
    raw["version"] = name
    write_manifest(r.version_dir(name), raw)
    damaged = damage(r.version_dir(name))
    r.set_current(name)
    return name, damaged


@pytest.mark.parametrize("damage", [_index_middle, _centroids, _store_random, _truncated],
                         ids=["index-2MiB-middle", "centroids-64KiB", "store-1MiB-random", "index-truncated"])
def test_a_damaged_version_is_refused_at_swap_and_at_startup_with_the_file_named(
        damage_server: Server, damage_root: Path, damage: Callable[[Path], str], tmp_path: Path) -> None:
    served = ready(damage_server)["index_version"]
    before = metric(damage_server, 'strata_index_swap_refused_total{reason="corrupt"}') or 0
    bad, filename = damaged_copy(damage_root, damage)
    path = str(damage_root / "versions" / bad / filename)
    try:
        # at swap: the watcher refuses it, /admin/reload too, and the served version keeps answering
        wait_until(lambda: (refusal(damage_server) or {}).get("version") == bad, "the watcher's refusal")
        r = refusal(damage_server)
        assert r["kind"] == "corrupt" and path in r["reason"], r
        resp = httpx.post(f"{damage_server.url}/admin/reload", params={"force": "true"}, timeout=60)
        assert resp.status_code == 409 and path in resp.json()["reason"], resp.text  # force never serves damage
        assert ready(damage_server)["index_version"] == served
        hit = httpx.post(f"{damage_server.url}/search",
                         timeout=30, json={"query": "How do I learn Python?", "top_k": 1}).json()
        assert hit["index_version"] == served and hit["hits"]
        assert (metric(damage_server, 'strata_index_swap_refused_total{reason="corrupt"}') or 0) >= before + 2
        assert f"refused index swap to {bad} (corrupt" in damage_server.log.read_text()

        # at startup (a restart): a fresh server serves the version that passed last, and says which file of
        # `current`'s version is damaged (it is not opened again: the refusal is in the serving record)
        fresh = serve(tmp_path, damage_root, watch="0")
        try:
            resp = httpx.get(f"{fresh.url}/ready")
            assert resp.status_code == 200, resp.text
            body = resp.json()
            assert body["index_version"] == served
            assert body["swap_refused"]["kind"] == "corrupt" and path in body["swap_refused"]["reason"]
            assert "remembered across restarts" in body["swap_refused"]["reason"]
            search = httpx.post(f"{fresh.url}/search", json={"query": "How do I learn Python?"})
            assert search.status_code == 200 and search.json()["index_version"] == served
        finally:
            stop_server(fresh)

        # with no version that passed to fall back on (a root never served: no record), startup is not ready and
        # says which file
        record = damage_root / "serving.json"
        saved = record.read_bytes()
        record.unlink()
        fresh = serve(tmp_path, damage_root, watch="0")
        try:
            resp = httpx.get(f"{fresh.url}/ready", timeout=30)
            assert resp.status_code == 503, resp.text
            body = resp.json()
            assert body["ready"] is False and path in body["reason"]
            assert body["swap_refused"]["kind"] == "corrupt" and path in body["swap_refused"]["reason"]
            search = httpx.post(f"{fresh.url}/search", timeout=30, json={"query": "How do I learn Python?"})
            assert search.status_code == 503
        finally:
            stop_server(fresh)
            record.write_bytes(saved)

        # on demand
        v = indexer_cli("verify", "--root", str(damage_root))
        assert v.returncode == 1 and path in v.stderr, (v.stdout, v.stderr)
        ok = indexer_cli("verify", "--root", str(damage_root), "--version", served)
        assert ok.returncode == 0 and "OK" in ok.stdout, ok.stderr
        rb = indexer_cli("rollback", "--root", str(damage_root), bad)  # rollback refuses damage too
        assert rb.returncode == 2 and path in rb.stderr
    finally:
        assert indexer_cli("rollback", "--root", str(damage_root), served).returncode == 0
        shutil.rmtree(damage_root / "versions" / bad)
    wait_until(lambda: refusal(damage_server) is None, "the refusal to be cleared")


def test_an_intact_copy_is_swapped_and_a_manifest_without_checksums_still_loads(
        damage_server: Server, damage_root: Path) -> None:
    served = ready(damage_server)["index_version"]
    intact, _ = damaged_copy(damage_root, lambda folder: "")
    old = None
    try:
        wait_until(lambda: ready(damage_server)["index_version"] == intact, "the intact copy")
        assert (metric(damage_server, "strata_index_verify_seconds ") or 0) > 0
        assert f"verified {intact}" in damage_server.log.read_text()

        def strip(folder: Path) -> str:
            raw = json.loads((folder / "manifest.json").read_text())
            del raw["checksums"], raw["manifest_checksum"]  # as a format-1 manifest, written before either
            raw["format_version"] = 1
            (folder / "manifest.json").write_text(json.dumps(raw))
            return ""

        old, _ = damaged_copy(damage_root, strip)
        wait_until(lambda: ready(damage_server)["index_version"] == old, "the version without checksums")
        assert "has no checksums" in damage_server.log.read_text()
        v = indexer_cli("verify", "--root", str(damage_root))
        assert v.returncode == 3 and "no checksums" in v.stdout
    finally:
        assert indexer_cli("rollback", "--root", str(damage_root), served).returncode == 0
        wait_until(lambda: ready(damage_server)["index_version"] == served, "the rollback")
        for v in (intact, old):
            if v:
                shutil.rmtree(damage_root / "versions" / v)
