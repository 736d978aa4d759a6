"""Nightly rebuilds without downtime, on a real server: swaps under load, refused swaps, rollback, `--add`,
and a build killed midway. Small indexes (300–450 Quora rows) and one exported encoder keep this fast."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from indexer.runtime.integrity import write_manifest
from indexer.runtime.layout import IndexRoot, new_version_name
from indexer.runtime.manifest import Manifest
from tests.conftest import REPO, Server, start_server, stop_server

QUERY = "How can I be a good geologist?"
CLIENTS = 8


def indexer_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "indexer.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env=os.environ | {"OMP_NUM_THREADS": "1"})


def build_cli(root: Path, model: Path, data: Path, rows: int, *extra: str) -> str:
    # nprobe 2 of ~8-11 lists: each version's own clustering shapes its answers, so versions answer QUERY
    # differently and a response mixing two versions would show (an exact-search nprobe could make them agree).
    r = indexer_cli("build", "--root", str(root), "--model", str(model), "--data", str(data), "--rows", str(rows),
                    "--threads", "1", "--keep", "20", "--nprobe", "2", "--default-mode", "dense", *extra)
    assert r.returncode == 0, r.stderr
    return IndexRoot(root).current_version() or ""


def doc_ids(root: Path, version: str) -> set[int]:
    con = sqlite3.connect(root / "versions" / version / "store.sqlite")
    try:
        return {i for (i,) in con.execute("SELECT id FROM docs")}
    finally:
        con.close()


def expected_top10(root: Path, version: str) -> tuple[int, ...]:
    from service.engine.searcher import Searcher

    searcher = Searcher.open(root / "versions" / version, threads=1)
    try:
        return tuple(h.faiss_id for h in searcher.search([QUERY], 10).hits[0])
    finally:
        searcher.close()


def metric(server: Server, line_start: str) -> float | None:
    text = httpx.get(f"{server.url}/metrics", timeout=30).text
    line = next((ln for ln in text.splitlines() if ln.startswith(line_start)), None)
    return float(line.rsplit(" ", 1)[1]) if line else None


def _quora_root(tmp_path_factory: pytest.TempPathFactory, name: str, model: Path, data: Path) -> Path:
    root = tmp_path_factory.mktemp(name) / "quora"
    build_cli(root, model, data, 300)
    return root


def _server(tmp_path_factory: pytest.TempPathFactory, name: str, root: Path, watch_interval_s: str
            ) -> Iterator[Server]:
    srv = start_server(tmp_path_factory.mktemp(name),
                       {"STRATA_INDEX_ROOT": str(root), "STRATA_WATCH_INTERVAL_S": watch_interval_s,
                        "STRATA_THREADS": "1", "STRATA_WORKERS": "2"})
    yield srv
    stop_server(srv)


@pytest.fixture(scope="module")
def swap_root(tmp_path_factory: pytest.TempPathFactory, minilm_mean: Path, quora_file: Path) -> Path:
    return _quora_root(tmp_path_factory, "swap", minilm_mean, quora_file)


@pytest.fixture(scope="module")
def swap_server(tmp_path_factory: pytest.TempPathFactory, swap_root: Path) -> Iterator[Server]:
    yield from _server(tmp_path_factory, "swap-server", swap_root, "0.3")


def wait_for_version(server: Server, version: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if httpx.get(f"{server.url}/ready", timeout=30).json().get("index_version") == version:
            return
        time.sleep(0.1)
    raise AssertionError(f"server did not swap to {version}: {httpx.get(f'{server.url}/ready', timeout=30).text}")


def wait_until(condition, what: str, timeout: float = 120) -> None:  # noqa: ANN001 (a no-argument predicate)
    """Until `condition()` holds; the deadline only bounds a hang (a loaded machine is slow, not wrong)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout} s for {what}")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def manual_root(tmp_path_factory: pytest.TempPathFactory, minilm_mean: Path, quora_file: Path) -> Path:
    return _quora_root(tmp_path_factory, "swap-manual", minilm_mean, quora_file)


@pytest.fixture(scope="module")
def manual_server(tmp_path_factory: pytest.TempPathFactory, manual_root: Path) -> Iterator[Server]:
    """The watcher off: only SIGHUP and POST /admin/reload swap versions here."""
    yield from _server(tmp_path_factory, "swap-manual-server", manual_root, "0")


def swap_under_load(server: Server, root: Path, model: Path, data: Path, rows: int, trigger: str) -> None:
    """8 clients query without pause while a new build is swapped in by `trigger`: no request fails and each
    answer comes wholly from one version (a swap mid-request cannot mix them)."""
    v0 = IndexRoot(root).current_version()
    swaps_before = metric(server, 'strata_index_swaps_total{result="swapped"}') or 0
    stop = threading.Event()
    sent: Counter[str] = Counter()
    failures: list[str] = []
    answers: dict[str, set[tuple[int, ...]]] = defaultdict(set)  # version -> distinct top-k id lists
    encode_versions: Counter[str] = Counter()
    lock = threading.Lock()

    def client(n: int) -> None:
        with httpx.Client(base_url=server.url, timeout=30) as c:
            while not stop.is_set():
                kind = "encode" if n % 4 == 0 else "search"
                try:
                    if kind == "search":
                        r = c.post("/search", json={"query": QUERY, "top_k": 10})
                    else:
                        r = c.post("/encode", json={"texts": [QUERY, "a second text"]})
                except httpx.HTTPError as exc:
                    with lock:
                        sent[kind] += 1
                        failures.append(f"{kind}: {exc!r}")
                    continue
                with lock:
                    sent[kind] += 1
                    if r.status_code != 200:
                        failures.append(f"{kind}: {r.status_code} {r.text[:200]}")
                        continue
                    body = r.json()
                    if kind == "search":
                        answers[body["index_version"]].add(tuple(h["id"] for h in body["hits"]))
                    else:
                        encode_versions[body["index_version"]] += 1

    threads = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(CLIENTS)]
    for t in threads:
        t.start()
    built = [v0]
    try:
        # every kind of call answered by the old version before the new one is built (not a fixed pause: the
        # clients may take seconds to start on a loaded machine)
        wait_until(lambda: bool(answers.get(v0)) and encode_versions[v0] > 0 or bool(failures), "answers from v0")
        built.append(build_cli(root, model, data, rows))
        if trigger != "watch":  # the watcher is off: nothing swaps until the trigger under test is pulled
            time.sleep(1.0)
            assert httpx.get(f"{server.url}/ready", timeout=30).json()["index_version"] == v0
        if trigger == "sighup":
            os.kill(server.proc.pid, signal.SIGHUP)
        elif trigger == "admin":
            r = httpx.post(f"{server.url}/admin/reload", timeout=60)
            assert r.status_code == 200 and r.json()["outcome"] == "swapped", r.text
            assert r.json()["index_version"] == built[-1]
        wait_for_version(server, built[-1])
        # and by the new one, searches and encodes alike
        wait_until(lambda: bool(answers.get(built[-1])) and encode_versions[built[-1]] > 0 or bool(failures),
                   "answers from the new version")
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)

    total = sum(sent.values())
    print(f"\nswap by {trigger} under load: {total} requests sent ({dict(sent)}), {len(failures)} failed, "
          f"versions {built}")
    assert not failures, failures[:5]
    assert len(set(built)) == 2 and set(answers) == set(built), (built, answers.keys())
    assert set(encode_versions) <= set(built)
    expected = {v: expected_top10(root, v) for v in built}
    assert len(set(expected.values())) == len(built)  # the versions differ, so a mixed answer would show
    for version, lists in answers.items():
        # one version answers one query one way: exactly as that version, opened here, answers it
        assert lists == {expected[version]}, (version, lists, expected[version])
        assert set(expected[version]) <= doc_ids(root, version)

    assert metric(server, 'strata_index_swaps_total{result="swapped"}') == swaps_before + 1
    # old engines go when their last request is done
    wait_until(lambda: metric(server, "strata_engines_loaded ") == 1, "the old engine to be closed", timeout=60)


def test_swap_under_load_by_the_watcher(swap_server: Server, swap_root: Path, minilm_mean: Path,
                                        quora_file: Path) -> None:
    swap_under_load(swap_server, swap_root, minilm_mean, quora_file, 350, "watch")


def test_swap_under_load_by_sighup(manual_server: Server, manual_root: Path, minilm_mean: Path,
                                   quora_file: Path) -> None:
    swap_under_load(manual_server, manual_root, minilm_mean, quora_file, 350, "sighup")


def test_swap_under_load_by_admin_reload(manual_server: Server, manual_root: Path, minilm_mean: Path,
                                         quora_file: Path) -> None:
    swap_under_load(manual_server, manual_root, minilm_mean, quora_file, 400, "admin")


def fake_version(root: Path, mutate) -> str:  # noqa: ANN001 (callable on the copied folder)
    """A copy of the current version under a newer name, changed by `mutate`, then made current."""
    r = IndexRoot(root)
    name = new_version_name()
    shutil.copytree(r.current_dir(), r.version_dir(name))
    manifest = Manifest.load(r.version_dir(name))
    manifest.version = name
    manifest.save(r.version_dir(name))
    mutate(r.version_dir(name))
    r.set_current(name)
    return name


def _truncate_index(folder: Path) -> None:
    data = (folder / "index.faiss").read_bytes()
    (folder / "index.faiss").write_bytes(data[: len(data) // 2])


def _edit_manifest(**changes: object):  # noqa: ANN202
    def mutate(folder: Path) -> None:
        raw = json.loads((folder / "manifest.json").read_text())
        for dotted, value in changes.items():
            node = raw
            *path, last = dotted.split("__")
            for key in path:
                node = node[key]
            node[last] = value(node[last]) if callable(value) else value
        write_manifest(folder, raw)  # a manifest as a writer saves it
    return mutate


def _published_before_its_report(folder: Path) -> None:
    """As `indexer build` publishes (`indexer.report`): the gate's MRR@10 only, here 0.1 below the served one's."""
    raw = json.loads((folder / "manifest.json").read_text())
    e = raw.pop("eval")
    raw["eval_modes"] = {}
    raw["gate"] = {"mrr_at_10": e["mrr_at_10"] - 0.1, "recall_at_10": e["recall_at_10"], "n_queries": e["n_queries"],
                   "seconds": 0.1, "measured_at": e["measured_at"]}
    raw["report"] = {"state": "pending", "modes": ["dense"]}
    write_manifest(folder, raw)  # a manifest as a writer saves it


def _junk_store(folder: Path) -> None:
    (folder / "store.sqlite").write_bytes(os.urandom(4096))


@pytest.mark.parametrize(("mutate", "kind", "reason"), [
    # a file of another size than its manifest checksum records: refused before FAISS or SQLite read it
    (_truncate_index, "corrupt", "index.faiss is"),
    (_junk_store, "corrupt", "store.sqlite is 4,096 bytes but the manifest records"),
    (_edit_manifest(model__dim=768), "corrupt", "has dimension 384 but the manifest says 768"),
    (_edit_manifest(model__onnx_sha256="0" * 64), "mismatch", "is not the model index"),
    (_edit_manifest(eval__mrr_at_10=lambda v: v - 0.1), "quality", "below the served"),
    (_published_before_its_report, "quality", "below the served"),  # gated on the figure measured before publishing
])
def test_bad_version_is_refused_and_the_old_one_keeps_serving(swap_server: Server, swap_root: Path, mutate,  # noqa: ANN001
                                                              kind: str, reason: str) -> None:
    served = httpx.get(f"{swap_server.url}/ready", timeout=30).json()["index_version"]
    before = metric(swap_server, f'strata_index_swap_refused_total{{reason="{kind}"}}') or 0
    bad = fake_version(swap_root, mutate)
    try:
        r = httpx.post(f"{swap_server.url}/admin/reload", timeout=60)
        assert r.status_code == 409 and r.json()["outcome"] == "refused" and reason in r.json()["reason"], r.text
        ready = httpx.get(f"{swap_server.url}/ready", timeout=30).json()
        assert ready["ready"] and ready["index_version"] == served
        assert ready["swap_refused"]["version"] == bad and ready["swap_refused"]["kind"] == kind
        assert reason in ready["swap_refused"]["reason"]
        hit = httpx.post(f"{swap_server.url}/search", timeout=30, json={"query": QUERY, "top_k": 1}).json()
        assert hit["index_version"] == served and hit["hits"]
        refused = metric(swap_server, f'strata_index_swap_refused_total{{reason="{kind}"}}') or 0
        assert refused >= before + 1  # the watcher may have refused it too, before the explicit reload
        assert metric(swap_server, "strata_index_last_swap_refused ") == 1
        time.sleep(0.8)  # the watcher leaves a refused version alone (no retry loop)
        assert metric(swap_server, f'strata_index_swap_refused_total{{reason="{kind}"}}') == refused
        log = swap_server.log.read_text()
        assert f"refused index swap to {bad}" in log
    finally:
        rb = indexer_cli("rollback", "--root", str(swap_root), served)
        assert rb.returncode == 0, rb.stderr
        shutil.rmtree(swap_root / "versions" / bad)
    wait_for_version(swap_server, served)
    assert httpx.post(f"{swap_server.url}/admin/reload", timeout=30).json()["outcome"] == "unchanged"


def test_newer_version_within_the_mrr_drop_is_swapped(swap_server: Server, swap_root: Path) -> None:
    """STRATA_MAX_MRR_DROP (0.02 by default): a newer version 0.01 below the served one's MRR@10 is swapped in."""
    served = httpx.get(f"{swap_server.url}/ready", timeout=30).json()["index_version"]
    within = fake_version(swap_root, _edit_manifest(eval__mrr_at_10=lambda v: v - 0.01))
    try:
        r = httpx.post(f"{swap_server.url}/admin/reload", timeout=60)  # or the watcher, whichever is first
        assert r.status_code == 200 and r.json()["outcome"] in ("swapped", "unchanged"), r.text
        wait_for_version(swap_server, within)
        assert "swap_refused" not in httpx.get(f"{swap_server.url}/ready", timeout=30).json()
        hit = httpx.post(f"{swap_server.url}/search", timeout=30, json={"query": QUERY, "top_k": 1}).json()
        assert hit["index_version"] == within
    finally:
        rb = indexer_cli("rollback", "--root", str(swap_root), served)
        assert rb.returncode == 0, rb.stderr
    wait_for_version(swap_server, served)
    shutil.rmtree(swap_root / "versions" / within)


def test_rollback_to_previous_version(swap_root: Path, swap_server: Server) -> None:
    root = IndexRoot(swap_root)
    previous = root.current_version()
    # a newer copy scoring 0.1 higher: rolling back to `previous` drops MRR@10 by 5x STRATA_MAX_MRR_DROP
    current = fake_version(swap_root, _edit_manifest(eval__mrr_at_10=lambda v: v + 0.1))
    wait_for_version(swap_server, current)
    assert root.previous_version() == previous and previous < current
    mrr = {v: Manifest.load(root.version_dir(v)).eval.mrr_at_10 for v in (previous, current)}
    assert mrr[current] - mrr[previous] == pytest.approx(0.1)
    refused_before = metric(swap_server, 'strata_index_swap_refused_total{reason="quality"}') or 0
    r = indexer_cli("rollback", "--root", str(swap_root))
    assert r.returncode == 0 and f"{current} -> {previous}" in r.stdout, r.stderr
    wait_for_version(swap_server, previous)  # an older version is not quality-gated: the operator decided
    assert "swap_refused" not in httpx.get(f"{swap_server.url}/ready", timeout=30).json()
    assert (metric(swap_server, 'strata_index_swap_refused_total{reason="quality"}') or 0) == refused_before
    bad = indexer_cli("rollback", "--root", str(swap_root), "19990101T000000Z-nope00")
    assert bad.returncode == 2 and "no version 19990101T000000Z-nope00" in bad.stderr
    assert indexer_cli("rollback", "--root", str(swap_root), current or "").returncode == 0
    wait_for_version(swap_server, current or "")
    assert indexer_cli("rollback", "--root", str(swap_root), previous or "").returncode == 0  # the real MRR@10 again
    wait_for_version(swap_server, previous or "")
    shutil.rmtree(swap_root / "versions" / current)


def test_add_questions_without_retraining(swap_root: Path, swap_server: Server, tmp_path: Path) -> None:
    import faiss
    import numpy as np

    root = IndexRoot(swap_root)
    base = root.current_version() or ""
    new = tmp_path / "new.tsv"
    new.write_text("id\tquestion\n900001\tWhich volcano on Mars is the tallest one?\n"
                   "900002\tHow do penguins keep their eggs warm in winter?\n900003\t   \n")
    r = indexer_cli("build", "--root", str(swap_root), "--add", str(new), "--threads", "1", "--keep", "20")
    assert r.returncode == 0, r.stderr
    assert "added 2 questions (0 replaced, 1 empty skipped)" in r.stdout and "no rebuild due yet" in r.stdout
    added = root.current_version() or ""
    m_base, m_new = Manifest.load(root.version_dir(base)), Manifest.load(root.version_dir(added))
    assert m_new.parent_version == base and m_new.index.ntotal == m_base.index.ntotal + 2
    assert m_new.index.added_since_training == 2 and m_new.index.nlist == m_base.index.nlist

    def centroids(version: str) -> np.ndarray:
        index = faiss.read_index(str(root.version_dir(version) / "index.faiss"))  # keep alive: owns the quantizer
        quantizer = faiss.extract_index_ivf(index).quantizer
        return quantizer.reconstruct_n(0, quantizer.ntotal)

    assert np.array_equal(centroids(base), centroids(added))  # the coarse quantizer was not retrained
    wait_for_version(swap_server, added)
    hits = httpx.post(f"{swap_server.url}/search",
                      timeout=30, json={"query": "the tallest volcano on Mars", "top_k": 1}).json()
    assert hits["hits"][0]["id"] == 900001 and hits["index_version"] == added

    again = indexer_cli("build", "--root", str(swap_root), "--add", str(new), "--threads", "1", "--keep", "20",
                        "--rebuild-after", "0.001", "--no-eval")
    assert again.returncode == 0 and "2 replaced" in again.stdout and "full rebuild due" in again.stdout


def test_add_from_a_quora_pairs_file_and_a_different_model_is_refused(swap_root: Path, swap_server: Server,
                                                                       tmp_path: Path, tiny_exported: Path) -> None:
    root = IndexRoot(swap_root)
    base = root.current_version() or ""
    pairs = tmp_path / "pairs.tsv"  # the Quora question-pairs format: both questions of each row are added
    pairs.write_text("id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
                     "0\t910001\t910002\tWhich planet has the most moons?\tHow many moons does Saturn have?\t0\n"
                     "1\t910003\t910004\tWhat do koalas eat all day long?\t \t0\n")
    refused = indexer_cli("build", "--root", str(swap_root), "--add", str(pairs), "--model", str(tiny_exported),
                          "--threads", "1", "--keep", "20")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "is not the encoder version" in refused.stderr and base in refused.stderr
    assert root.current_version() == base and not list(swap_root.glob(".building-*"))

    r = indexer_cli("build", "--root", str(swap_root), "--add", str(pairs), "--threads", "1", "--keep", "20",
                    "--no-eval")
    assert r.returncode == 0, r.stderr
    assert "added 3 questions (0 replaced, 1 empty skipped)" in r.stdout
    added = root.current_version() or ""
    m_base, m_new = Manifest.load(root.version_dir(base)), Manifest.load(root.version_dir(added))
    assert m_new.parent_version == base and m_new.index.ntotal == m_base.index.ntotal + 3
    assert {910001, 910002, 910003} <= doc_ids(swap_root, added) and 910004 not in doc_ids(swap_root, added)
    wait_for_version(swap_server, added)
    hits = httpx.post(f"{swap_server.url}/search", json={"query": "How many moons has Saturn got?",
                                                         "top_k": 1}).json()
    assert hits["hits"][0]["id"] == 910002 and hits["index_version"] == added


def test_kill_during_build_leaves_current_intact(swap_root: Path, swap_server: Server, minilm_mean: Path,
                                                 quora_file: Path) -> None:
    root = IndexRoot(swap_root)
    served, versions = root.current_version(), root.versions()
    proc = subprocess.Popen([sys.executable, "-m", "indexer.cli", "build", "--root", str(swap_root), "--model",
                             str(minilm_mean), "--data", str(quora_file), "--rows", "3000", "--threads", "1"],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_until(lambda: bool(list(swap_root.glob(".building-*"))) or proc.poll() is not None, "the staging folder",
               timeout=300)  # killed once it stages: 3,000 rows on one thread take far longer to encode
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    partial = list(swap_root.glob(".building-*"))
    assert partial, "the build finished before it could be killed"
    assert root.current_version() == served and root.versions() == versions
    assert httpx.get(f"{swap_server.url}/ready", timeout=30).json()["index_version"] == served
    assert httpx.post(f"{swap_server.url}/search", timeout=30, json={"query": QUERY}).status_code == 200

    built = build_cli(swap_root, minilm_mean, quora_file, 300, "--no-eval")
    assert not list(swap_root.glob(".building-*")) and built != served
