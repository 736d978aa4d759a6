"""Distributed build (`indexer build --engine ray`) on the session's local Ray instance with 2 worker CPUs.

Size: the first 3,000 Quora rows (2,982 documents, 1,127 paper-protocol queries), the same rows as the
single-machine `quora_root` fixture, so that build is the reference. 20k rows takes minutes to encode twice on
2 shared cores, too long for the suite.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray")

from indexer.build import BuildConfig  # noqa: E402
from indexer.runtime.layout import IndexRoot  # noqa: E402
from indexer.runtime.manifest import Manifest  # noqa: E402
from indexer.runtime.version import IndexVersion, vectors_by_id  # noqa: E402

EMBED_ACTOR_TITLE = "EmbedBatches"  # Ray names an actor pool worker's process after the UDF class


@pytest.fixture(scope="module")
def single_version(quora_root: Path) -> Path:
    """The single-machine build of the same rows (the session fixture's first version)."""
    root = IndexRoot(quora_root)
    return root.version_dir(root.versions()[0])


def test_ray_build_equals_single_machine_build(ray_sharded: Path, single_version: Path) -> None:
    single, dist = Manifest.load(single_version), Manifest.load(ray_sharded)
    assert dist.distributed is not None and len(dist.distributed.actors) == 2  # both actors encoded
    assert all(a.vectors > 0 and a.vectors_per_s > 0 for a in dist.distributed.actors)
    assert [s.file for s in dist.index.shards] == ["shards/shard-00000.faiss", "shards/shard-00001.faiss"]
    assert all(s.ntotal > 0 for s in dist.index.shards)
    assert not (ray_sharded / "index.faiss").exists()  # kept as shards, not merged on disk
    assert dist.index.nlist == single.index.nlist and dist.index.ntotal == single.index.ntotal

    ids_s, vecs_s = vectors_by_id(single_version)
    ids_r, vecs_r = vectors_by_id(ray_sharded)
    assert np.array_equal(ids_s, ids_r)
    cosine = (vecs_s * vecs_r).sum(1) / np.linalg.norm(vecs_s, axis=1) / np.linalg.norm(vecs_r, axis=1)
    print(f"\nids equal: {len(ids_r)}; vector cosine min {cosine.min():.7f}; MRR@10 single "
          f"{single.eval.mrr_at_10:.4f} ray {dist.eval.mrr_at_10:.4f}")
    assert cosine.min() >= 0.9999
    assert dist.eval is not None and single.eval is not None
    assert abs(dist.eval.mrr_at_10 - single.eval.mrr_at_10) <= 0.002
    assert dist.data.n_queries == single.data.n_queries


def test_ray_build_is_calibrated_like_the_local_build(ray_sharded: Path, single_version: Path) -> None:
    """With no --nprobe/--target-recall, a Ray build calibrates nprobe to the default target on the same query-like
    probes as the local build (the Quora split's unjudged question1s), and keeps them for --add and compact."""
    from indexer.calibrate import DEFAULT_TARGET_RECALL
    from indexer.probes import PROBES_FILE

    single, dist = Manifest.load(single_version), Manifest.load(ray_sharded)
    cal_s, cal_r = single.index.nprobe_calibration, dist.index.nprobe_calibration
    assert cal_s is not None and cal_r is not None
    assert cal_r.target_recall == DEFAULT_TARGET_RECALL and cal_r.reached and cal_r.recall_at_10 >= 0.97
    assert cal_r.probes is not None and cal_s.probes is not None
    assert cal_r.probes.source == cal_s.probes.source == "held_apart_queries"
    assert cal_r.probes.n_probes == cal_s.probes.n_probes
    assert dist.index.nprobe == cal_r.nprobe and (ray_sharded / PROBES_FILE).is_file()


def _descends_from_us(pid: int) -> bool:
    """True when `pid` runs under this test process: the local Ray cluster's raylet is our child, its workers
    are its children. Other Ray clusters on the same machine (another test run) must not be touched."""
    me = os.getpid()
    while pid > 1:
        if pid == me:
            return True
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        pid = int(stat.rsplit(")", 1)[1].split()[1])  # field 4, after the parenthesised command name
    return False


def _embed_actor_pids() -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if EMBED_ACTOR_TITLE.encode() in cmd and b"ray::" in cmd and _descends_from_us(int(entry)):
                pids.append(int(entry))
    return pids


def test_worker_killed_during_build_is_retried(ray_cluster: str, minilm_mean: Path, quora_file: Path,
                                                single_version: Path, tmp_path: Path) -> None:
    from indexer.quora import load_split
    from indexer.ray_build import RayOptions, build_on_ray

    rows = 1500  # a prefix of the reference build's rows: its documents are a subset of the reference's
    killed: list[int] = []
    alive_at_kill: list[int] = []

    def kill_one_actor_mid_build() -> None:
        # SIGKILL an encoding actor 2 s after it appears: while it loads the model (~2 s) or encodes its first
        # batches, never after its share is done (at 5 s a quiet machine had finished the build: no restart needed).
        deadline = time.monotonic() + 120
        first_seen: float | None = None
        while time.monotonic() < deadline:
            pids = _embed_actor_pids()
            if pids and first_seen is None:
                first_seen = time.monotonic()
            if pids and first_seen is not None and time.monotonic() - first_seen > 2:
                alive_at_kill.extend(pids)
                os.kill(pids[0], signal.SIGKILL)
                killed.append(pids[0])
                return
            time.sleep(0.2)

    killer = threading.Thread(target=kill_one_actor_mid_build, daemon=True)
    killer.start()
    cfg = BuildConfig(model_dir=minilm_mean, data=str(quora_file), root=tmp_path / "root", rows=rows, threads=2,
                      evaluate=False)
    manifest = build_on_ray(cfg, RayOptions(workers=2, shards=1, block_rows=64))  # 24 batches: work left at the kill
    killer.join(timeout=5)
    assert killed, "no encoding actor was found to kill while the build ran"
    assert manifest.distributed is not None
    actors = sorted(a.actor for a in manifest.distributed.actors)
    print(f"\nkilled actor pid {killed[0]} (of {alive_at_kill}); vectors came from actors {actors}")
    replacements = [a for a in actors if int(a.rsplit(":", 1)[1]) not in alive_at_kill]
    assert replacements  # Ray restarted the actor (a new pid) and it encoded the retried batches

    expected = np.sort(load_split(quora_file, "paper", rows).corpus.ids)
    ids_r, vecs_r = vectors_by_id(IndexRoot(tmp_path / "root").current_dir())
    assert len(np.unique(ids_r)) == len(ids_r)  # nothing added twice
    assert np.array_equal(ids_r, expected)  # nothing missing
    ids_s, vecs_s = vectors_by_id(single_version)
    vecs_s = vecs_s[np.searchsorted(ids_s, ids_r)]
    # cosine, not the raw product: fp16 codes keep norms only to ±1e-4
    cosine = (vecs_s * vecs_r).sum(1) / np.linalg.norm(vecs_s, axis=1) / np.linalg.norm(vecs_r, axis=1)
    assert cosine.min() >= 0.9999


def test_id_text_parquet_and_jsonl_inputs(ray_cluster: str, minilm_mean: Path, quora_file: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """`indexer build --engine ray --data` on Parquet and on a folder of JSONL `id,text` files: the same
    documents and vectors as a TSV build of the same rows, searchable like it; `indexer eval` says why not."""
    import logging

    # `indexer` configures the root logger on the stream capsys hands it: restore it, or later logs hit a
    # closed stream.
    root_logger = logging.getLogger()
    saved = (root_logger.handlers[:], root_logger.level)
    try:
        _id_text_builds(minilm_mean, quora_file, tmp_path, capsys)
    finally:
        root_logger.handlers[:] = saved[0]
        root_logger.setLevel(saved[1])


def _id_text_builds(minilm_mean: Path, quora_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from indexer.build import build
    from indexer.cli import main as indexer_main
    from indexer.evaluate import rank_metrics
    from indexer.quora import read_rows

    rows = 300
    docs: dict[int, str] = {}  # the paper protocol's corpus: every question2, first text per id
    for row in read_rows(quora_file, rows):
        if row.question2:
            docs.setdefault(row.qid2, row.question2)
    parquet = tmp_path / "corpus.parquet"
    pq.write_table(pa.table({"id": pa.array(list(docs), pa.int64()), "text": list(docs.values()),
                             "extra": ["x"] * len(docs)}), parquet)  # other columns are ignored
    jsonl_dir = tmp_path / "jsonl"
    jsonl_dir.mkdir()
    items = list(docs.items())
    for part, chunk in enumerate((items[: len(items) // 2], items[len(items) // 2 :])):
        (jsonl_dir / f"part-{part}.jsonl").write_text(
            "".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in chunk), encoding="utf-8")

    tsv_root = tmp_path / "tsv"  # the reference: the single-machine build of the same TSV rows
    tsv = build(BuildConfig(model_dir=minilm_mean, data=str(quora_file), root=tsv_root, rows=rows, threads=2))
    tsv_dir = IndexRoot(tsv_root).current_dir()
    ids_t, vecs_t = vectors_by_id(tsv_dir)
    assert np.array_equal(ids_t, np.sort(np.fromiter(docs, np.int64)))
    ref = IndexVersion(tsv_dir)
    try:
        _, _, gold = ref.store.eval_set()
        qvecs = ref.query_vectors()
    finally:
        ref.close()
    assert qvecs is not None

    for name, data, shards in (("parquet", parquet, 1), ("jsonl", jsonl_dir, 2)):
        root = tmp_path / f"root-{name}"
        rc = indexer_main(["build", "--engine", "ray", "--data", str(data), "--root", str(root),
                           "--model", str(minilm_mean), "--workers", "2", "--shards", str(shards),
                           "--block-rows", "128", "--threads", "2"])
        out = capsys.readouterr().out
        assert rc == 0, out
        assert f"{len(docs)} vectors" in out and "2 encoding actors" in out
        folder = IndexRoot(root).current_dir()
        manifest = Manifest.load(folder)
        assert manifest.data.protocol == "corpus" and manifest.data.n_docs == len(docs) and manifest.data.n_queries == 0
        assert manifest.data.source == str(data) and manifest.eval is None
        assert len(manifest.index.shards) == (0 if shards == 1 else shards)
        assert manifest.distributed is not None and sum(a.vectors for a in manifest.distributed.actors) == len(docs)

        ids_r, vecs_r = vectors_by_id(folder)
        assert np.array_equal(ids_r, ids_t)  # every document once, nothing else
        cosine = (vecs_t * vecs_r).sum(1) / np.linalg.norm(vecs_t, axis=1) / np.linalg.norm(vecs_r, axis=1)
        assert cosine.min() >= 0.9999, name

        version = IndexVersion(folder)  # what the service opens (a sharded version merged in memory)
        try:
            assert version.ntotal == len(docs)
            stored = version.store.texts(ids_r.tolist())
            assert stored == docs
            _, got = version.search(qvecs, 10)  # the TSV build's eval queries against this index
            hits = version.hits(*version.search(vecs_t[:5], 1))
        finally:
            version.close()
        assert [h[0].faiss_id for h in hits] == ids_t[:5].tolist()  # a document's own text finds it first
        assert hits[0][0].text == docs[int(ids_t[0])]
        mrr, _ = rank_metrics(got, gold)
        assert tsv.eval is not None
        with capsys.disabled():
            print(f"\n{name}: {len(ids_r)} ids equal to the TSV build's, cosine min {cosine.min():.7f}, "
                  f"MRR@10 of the TSV eval queries {mrr:.4f} (TSV build {tsv.eval.mrr_at_10:.4f}); actors "
                  f"{[a.vectors for a in manifest.distributed.actors]}")
        assert abs(mrr - tsv.eval.mrr_at_10) <= 0.01

        assert indexer_main(["eval", "--root", str(root)]) == 2  # no eval set in an id,text corpus: said so
        assert "no evaluation queries" in capsys.readouterr().err


def test_ray_reads_your_own_corpus_through_the_same_reader(ray_cluster: str, minilm_mean: Path, quora_file: Path,
                                                           tmp_path: Path) -> None:
    """`--engine ray` on a BEIR folder: the same store (typed external ids, metadata), counts, evaluation set
    and vectors as the single-machine build of it; a bad row is the same `FILE:LINE` error."""
    from indexer.build import build
    from indexer.ray_build import RayOptions, build_on_ray
    from tests.indexer.test_corpus_build import make_beir

    beir = tmp_path / "beir"
    make_beir(quora_file, beir, rows=150)
    with open(beir / "corpus.jsonl", "a", encoding="utf-8") as fh:  # an integer id, a repeat, an empty text
        fh.write('{"_id": 7, "title": "", "text": "An integer id", "metadata": {"bucket": 9}}\n')
        fh.write('{"_id": 7, "title": "Repeated", "text": "the last one wins", "metadata": {"bucket": 8}}\n')
        fh.write('{"_id": "empty", "title": "", "text": ""}\n')
    local = build(BuildConfig(model_dir=minilm_mean, data=str(beir), root=tmp_path / "local", threads=2))
    ray_m = build_on_ray(BuildConfig(model_dir=minilm_mean, data=str(beir), root=tmp_path / "ray", threads=2),
                         RayOptions(workers=2, shards=2, block_rows=64))
    for key in ("format", "rows_read", "n_docs", "skipped_empty_texts", "duplicate_ids", "metadata_schema",
                "n_queries", "eval_judged_docs_missing"):
        assert getattr(ray_m.data, key) == getattr(local.data, key), key
    assert (ray_m.data.duplicate_ids, ray_m.data.skipped_empty_texts) == (1, 1)
    assert local.eval is not None and ray_m.eval is not None and ray_m.eval.ndcg_at_10 is not None
    assert abs(ray_m.eval.ndcg_at_10 - local.eval.ndcg_at_10) < 0.01
    # Ray builds IVF and calibrates it as the local build does: no unjudged queries here, so on document spans
    # (never the evaluation queries)
    cal = ray_m.index.nprobe_calibration
    assert ray_m.index.kind == "ivf" and cal is not None and cal.probes is not None
    assert cal.probes.source == "document_spans" and ray_m.index.nprobe == cal.nprobe
    local_cal = local.index.nprobe_calibration
    if local.index.kind == "ivf":
        assert local_cal is not None and local_cal.probes is not None
        assert (local_cal.probes.source, local_cal.probes.n_probes) == (cal.probes.source, cal.probes.n_probes)

    folders = [IndexRoot(tmp_path / name).current_dir() for name in ("local", "ray")]
    (ids_l, vecs_l), (ids_r, vecs_r) = (vectors_by_id(f) for f in folders)
    assert np.array_equal(ids_l, ids_r)
    assert float(((vecs_l - vecs_r) ** 2).sum(1).max()) < 1e-3  # fp16 codes of the same vectors
    stores = [IndexVersion(f) for f in folders]
    try:
        docs_l, docs_r = (v.store.documents(ids_l.tolist()) for v in stores)
        assert docs_l == docs_r
        seven = next(d for d in docs_r.values() if d.ext_id == 7)
        assert seven.id == 7 and seven.text == "Repeated the last one wins" and seven.metadata["bucket"] == 8
    finally:
        for v in stores:
            v.close()

    (beir / "corpus.jsonl").write_text('{"_id": "a", "text": "fine"}\n{"_id": [1], "text": "bad"}\n')
    with pytest.raises(ValueError, match=r"corpus.jsonl:2: id field '_id' must be a string or an integer"):
        build_on_ray(BuildConfig(model_dir=minilm_mean, data=str(beir), root=tmp_path / "ray", threads=2),
                     RayOptions(workers=2))
    assert IndexRoot(tmp_path / "ray").current_version() == ray_m.version
