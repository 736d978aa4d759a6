"""BEIR benchmark: Strata's own path (`encoder export`, `indexer build --data BEIR_DIR`, `indexer eval`) against
BM25 and their fusion, on every prepared BEIR dataset (`bench/beir_data.py`), beside the published anchors.

    python bench/beir.py                                   # every dataset under /work/shared/data/beir
    python bench/beir.py --datasets scifact --bootstrap 2000 --work /tmp/beirbench
    python bench/beir.py --render /tmp/beirbench/results.json   # the Markdown table again, no work

For each dataset and each exported pooling (`mean`, the checkpoint's own, and `layers:0,6`, the README
quickstart's) it reports nDCG@10, MRR@10 and R@100 of:

- `dense-exact`: exact inner-product search over the version's stored vectors;
- `dense-index`: the version's default index (IVF at its manifest nprobe) — and so index-vs-exact;
- `bm25`: bm25s (Lucene BM25, k1 0.9 / b 0.4 as Anserini's BEIR regressions, English Snowball stemmer from
  PyStemmer, English stopwords) over title + text, called directly (no product lexical retriever yet);
- `rrf`: reciprocal-rank fusion (k = 60) of the BM25 and the dense-index top 100;
- `cc@a`: the convex combination a·dense + (1−a)·bm25 of min-max normalised scores over each top 100 (a
  document missing from one list scores 0 there), at a few alphas.

Hybrid vs dense and hybrid vs BM25 come with paired per-query bootstrap 95 % intervals (queries resampled with
replacement, the same draw for both systems). The correctness checks print whether Strata's mean-pooled exact
nDCG@10 is within 0.3 of MTEB's all-MiniLM-L6-v2 figure and BM25 within 1.0 of Anserini's flat BM25.

`--latency` adds, per dataset and pooling, the build's documents/s (documents over the manifest's build time:
reading, encoding, training, adding, calibrating; not the evaluation) and `/search` p50 at 1 client for each
served mode (dense, lexical, hybrid at the version's default fusion), measured with wrk against `python -m
service` on 127.0.0.1 (`bench/common.py`'s server start and wrk run; the modes' order rotating per round), sending
the dataset's judged queries cycled. In the tables: dense-index's row carries the
dense p50, bm25's the lexical one, cc@0.5's (the served default fusion) the hybrid one.

Everything is cached under `--work` (encoders, index roots, query vectors, runs), so an interrupted run resumes;
results go to `bench/results/beir-<stamp>.{md,json}`. Queries are the qrels' queries with a relevant document;
a document whose id equals the query's is dropped from every ranking (BEIR's `ignore_identical_ids`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from indexer.metrics import per_query  # noqa: E402

DEPTH = 100
RRF_K = 60
POOLINGS = ("mean", "layers:0,6")
METRIC_KEYS = ("ndcg_at_10", "mrr_at_10", "recall_at_100")

# Published anchors, nDCG@10 (percent). Anserini: docs/regressions-beir-v1.0.0-<name>-flat.md of castorini/anserini
# (BM25 flat, title + text in one field); MTEB: results/all-MiniLM-L6-v2/<Task>.json of
# embeddings-benchmark/mtebpaper (test split). Commits in bench/BEIR_SOURCES.md.
ANCHORS: dict[str, dict[str, float | None]] = {
    "scifact": {"anserini_bm25_flat": 67.89, "mteb_minilm_l6": 64.508},
    "nfcorpus": {"anserini_bm25_flat": 32.18, "mteb_minilm_l6": 31.594},
    "arguana": {"anserini_bm25_flat": 39.70, "mteb_minilm_l6": 50.167},
    "quora-heldout": {"anserini_bm25_flat": None, "mteb_minilm_l6": None},  # Strata's own split: none published
}


def say(msg: str) -> None:
    print(f"beir: {msg}", file=sys.stderr, flush=True)


class Eta:
    """Steps done / total with elapsed time and an ETA from the mean step time so far."""

    def __init__(self, total: int) -> None:
        self.total, self.done, self.t0 = total, 0, time.perf_counter()

    def step(self, what: str) -> None:
        self.done += 1
        spent = time.perf_counter() - self.t0
        left = spent / self.done * (self.total - self.done)
        say(f"[{self.done}/{self.total}] {what} (elapsed {spent / 60:.1f} min, ETA {left / 60:.1f} min)")


def run_cli(cmd: list[str], log: Path) -> float:
    """Run a Strata CLI (`indexer …` / `encoder …`, through this interpreter's `python -m`, so an environment
    without the console scripts works too), its output and progress bar to `log`; seconds taken."""
    say("$ " + shlex.join(cmd) + f"  (progress: tail -f {log})")
    module = {"indexer": "indexer.cli", "encoder": "models.cli"}[cmd[0]]
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        proc = subprocess.run([sys.executable, "-m", module, *cmd[1:]], stdout=fh, stderr=subprocess.STDOUT,
                              check=False, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-15:]
        raise SystemExit(f"beir: {cmd[0]} {cmd[1]} failed (exit {proc.returncode}); {log}:\n" + "\n".join(tail))
    return time.perf_counter() - t0


def pooling_slug(pooling: str) -> str:
    return pooling.replace(":", "_").replace(",", "_")


def ensure_encoder(work: Path, pooling: str) -> Path:
    out = work / "models" / pooling_slug(pooling)
    if not (out / "encoder.json").is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        run_cli(["encoder", "export", "--out", str(out), "--pooling", pooling],
                work / f"export-{pooling_slug(pooling)}.log")
    return out


# ---------------------------------------------------------------- data


@dataclass
class EvalData:
    name: str
    folder: Path
    doc_ids: list[str]
    doc_texts: list[str]  # title + " " + text, as BM25 sees it
    query_ids: list[str]
    query_texts: list[str]
    qrels: list[dict[str, int]]


def load_dataset(folder: Path) -> EvalData:
    docs_i, docs_t = [], []
    with open(folder / "corpus.jsonl", encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            docs_i.append(str(row["_id"]))
            title = row.get("title") or ""
            docs_t.append(f"{title} {row['text']}".strip() if title else row["text"])
    texts: dict[str, str] = {}
    with open(folder / "queries.jsonl", encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            texts[str(row["_id"])] = row["text"]
    judged: dict[str, dict[str, int]] = {}
    with open(folder / "qrels" / "test.tsv", encoding="utf-8", newline="") as fh:
        next(fh)
        for line in fh:
            q, d, s = line.rstrip("\r\n").split("\t")
            judged.setdefault(q, {})[d] = int(s)
    qids = [q for q, j in judged.items() if any(g > 0 for g in j.values())]
    return EvalData(folder.name, folder, docs_i, docs_t, qids, [texts[q] for q in qids], [judged[q] for q in qids])


# ---------------------------------------------------------------- runs: one top-DEPTH list of (doc id, score) per query

Run = list[list[tuple[str, float]]]


def drop_identical(run: Run, qids: list[str]) -> Run:
    return [[(d, s) for d, s in hits if d != q][:DEPTH] for hits, q in zip(run, qids, strict=True)]


def save_run(path: Path, run: Run) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(run))
    tmp.replace(path)


def load_run(path: Path) -> Run | None:
    if not path.is_file():
        return None
    return [[(d, float(s)) for d, s in hits] for hits in json.loads(path.read_text())]


def dense_runs(ds: EvalData, root: Path, model: Path, cache: Path) -> tuple[Run, Run, dict[str, float]]:
    """Exact and default-index top-DEPTH of the current version of `root`, queries encoded by the version's
    encoder; plus the measured index search time."""
    exact, index = load_run(cache / "dense-exact.json"), load_run(cache / "dense-index.json")
    timing_path = cache / "dense-timing.json"
    if exact is not None and index is not None and timing_path.is_file():
        return exact, index, json.loads(timing_path.read_text())
    from indexer.runtime.encoder import OnnxEncoder
    from indexer.runtime.faiss.search import search
    from indexer.runtime.layout import IndexRoot
    from indexer.runtime.version import IndexVersion

    version = IndexVersion(IndexRoot(root).current_dir())
    qvecs = _stored_query_vectors(version, ds.query_ids)
    if qvecs is None:
        qvecs = OnnxEncoder(model).encode(ds.query_texts, progress=True, desc=f"{ds.name} queries")
    depth = DEPTH + 1  # one spare for the dropped identical id
    t0 = time.perf_counter()
    for i in range(len(qvecs)):
        search(version.index, qvecs[i : i + 1], 10)
    per_query_ms = (time.perf_counter() - t0) * 1000 / len(qvecs)
    s_idx, i_idx = search(version.index, qvecs, depth)
    t0 = time.perf_counter()
    s_ex, i_ex = version.ann.exact_search(qvecs, depth)  # whatever the kind (`--index auto` is flat when small)
    exact_ms = (time.perf_counter() - t0) * 1000 / len(qvecs)
    ext = _ext_ids(version, np.unique(np.concatenate([i_idx.ravel(), i_ex.ravel()])))

    def to_run(scores: np.ndarray, ids: np.ndarray) -> Run:
        return drop_identical([[(ext[i], float(s)) for s, i in zip(srow, irow, strict=True) if i >= 0]
                               for srow, irow in zip(scores, ids, strict=True)], ds.query_ids)

    exact, index = to_run(s_ex, i_ex), to_run(s_idx, i_idx)
    timing = {"index_ms_per_query": round(per_query_ms, 4), "exact_ms_per_query_batched": round(exact_ms, 4),
              "nprobe": version.nprobe, "nlist": version.nlist, "ntotal": version.ntotal}
    save_run(cache / "dense-exact.json", exact)
    save_run(cache / "dense-index.json", index)
    timing_path.write_text(json.dumps(timing))
    version.close()
    return exact, index, timing


def _stored_query_vectors(version: object, query_ids: list[str]) -> np.ndarray | None:
    """When every query is also a document (Quora), its vector as the index stores it — what `indexer build`
    evaluates with too (a query whose text is a document reuses its vector) — instead of encoding again."""
    from indexer.runtime.faiss.exact import stored_vectors

    found = version.store.resolve_ext_ids(query_ids)  # type: ignore[attr-defined]
    if len(found) != len(query_ids):
        return None
    ids, vecs = stored_vectors(version.index)  # type: ignore[attr-defined]
    row = {int(i): r for r, i in enumerate(ids.tolist())}
    say(f"{len(query_ids):,} queries are documents: their stored vectors are used")
    return np.ascontiguousarray(vecs[[row[found[q]] for q in query_ids]], dtype=np.float32)


def _ext_ids(version: object, ids: np.ndarray) -> dict[int, str]:
    docs = version.store.documents([int(i) for i in ids if i >= 0])  # type: ignore[attr-defined]
    return {i: str(d.ext_id) for i, d in docs.items()}


def bm25s_run(ds: EvalData, cache: Path) -> tuple[Run, dict[str, float]]:
    path, tpath = cache / "bm25.json", cache / "bm25-timing.json"
    run = load_run(path)
    if run is not None and tpath.is_file():
        return run, json.loads(tpath.read_text())
    from bench.bm25_libs import Bm25sRetriever

    t0 = time.perf_counter()
    retr = Bm25sRetriever(ds.doc_ids, ds.doc_texts)
    build_s = time.perf_counter() - t0
    raw = retr.search_many(ds.query_texts, DEPTH + 1)
    run = drop_identical(raw, ds.query_ids)
    timing = {"build_s": round(build_s, 3)}
    save_run(path, run)
    tpath.write_text(json.dumps(timing))
    return run, timing


# ---------------------------------------------------------------- fusion


def rrf(a: Run, b: Run, k: int = RRF_K) -> Run:
    out: Run = []
    for ha, hb in zip(a, b, strict=True):
        score: dict[str, float] = {}
        for hits in (ha, hb):
            for rank, (d, _) in enumerate(hits[:DEPTH], 1):
                score[d] = score.get(d, 0.0) + 1.0 / (k + rank)
        out.append(sorted(score.items(), key=lambda x: -x[1])[:DEPTH])
    return out


def _minmax(hits: list[tuple[str, float]]) -> dict[str, float]:
    if not hits:
        return {}
    vals = [s for _, s in hits[:DEPTH]]
    lo, hi = min(vals), max(vals)
    span = hi - lo
    return {d: (s - lo) / span if span > 0 else 1.0 for d, s in hits[:DEPTH]}


def convex(dense: Run, lexical: Run, alpha: float) -> Run:
    out: Run = []
    for hd, hl in zip(dense, lexical, strict=True):
        nd, nl = _minmax(hd), _minmax(hl)
        # candidates in a fixed order (dense rank, then lexical-only by rank) and a stable sort: equal fused scores
        # (duplicate documents) keep that order, where iterating a set of string ids would follow the process's
        # hash seed and move nDCG@10 by up to 0.15 between runs on NFCorpus
        candidates = [*nd, *(d for d in nl if d not in nd)]
        score = {d: alpha * nd.get(d, 0.0) + (1 - alpha) * nl.get(d, 0.0) for d in candidates}
        out.append(sorted(score.items(), key=lambda x: -x[1])[:DEPTH])
    return out


# ---------------------------------------------------------------- metrics


def per_query_metrics(run: Run, ds: EvalData) -> dict[str, np.ndarray]:
    """indexer.metrics.per_query on the run, ids mapped to ints (judged documents never ranked get ids < -1)."""
    ids: dict[str, int] = {}
    for hits in run:
        for d, _ in hits:
            ids.setdefault(d, len(ids))
    missing = -2
    qrels = []
    for j in ds.qrels:
        m: dict[int, int] = {}
        for d, g in j.items():
            if d not in ids:
                ids[d] = missing
                missing -= 1
            m[ids[d]] = g
        qrels.append(m)
    ranked = np.full((len(run), DEPTH), -1, dtype=np.int64)
    for r, hits in enumerate(run):
        row = [ids[d] for d, _ in hits[:DEPTH]]
        ranked[r, : len(row)] = row
    return per_query(ranked, qrels)


def mean_pct(pq: dict[str, np.ndarray]) -> dict[str, float]:
    return {k: round(float(np.nanmean(pq[k])) * 100, 2) for k in METRIC_KEYS}


def paired_ci(a: np.ndarray, b: np.ndarray, n_boot: int, seed: int = 0) -> tuple[float, float, float]:
    """Mean of a − b (points) and its paired bootstrap 95 % interval."""
    diff = (a - b)[~np.isnan(a - b)] * 100
    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, len(diff), size=(n_boot, len(diff)))].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return round(float(diff.mean()), 2), round(float(lo), 2), round(float(hi), 2)


# ---------------------------------------------------------------- /search latency (--latency)

SERVED_MODES = ("dense", "lexical", "hybrid")
# the bench's rows that are what each served mode returns (hybrid: the default fusion, convex alpha 0.5)
LATENCY_ROW = {"dense-index": "dense", "bm25": "lexical", "cc@0.5": "hybrid"}


def search_latency(root: Path, queries: list[str], cache: Path, seconds: float, rounds: int) -> dict[str, object]:
    """`/search` p50 (ms) at 1 client per served mode over real HTTP with wrk, median of `rounds` rounds, and the
    build's documents/s from the manifest; cached in `cache`/latency.json."""
    path = cache / "latency.json"
    if path.is_file():
        return json.loads(path.read_text())
    import tempfile

    from bench.common import start_server, stop, wrk
    from indexer.runtime.layout import IndexRoot
    from indexer.runtime.manifest import Manifest

    manifest = Manifest.load(IndexRoot(root).current_dir())
    b = manifest.build_seconds
    modes = SERVED_MODES if manifest.lexical is not None else ("dense",)
    say(f"latency: {root.name}, {', '.join(modes)} at 1 client, {rounds} x {seconds:g} s each (wrk)")
    p50s: dict[str, list[float]] = {mode: [] for mode in modes}
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        proc, url, _ = start_server(root, Path(tmp))
        try:
            bodies = {mode: [{"query": q, "top_k": 10, "mode": mode} for q in queries] for mode in modes}
            for mode in modes:  # warm-up: ONNX Runtime's first runs, the store's pages
                wrk(url, bodies[mode], 1, 2, Path(tmp))
            for r in range(rounds):
                for mode in modes[r % len(modes):] + modes[: r % len(modes)]:
                    res = wrk(url, bodies[mode], 1, seconds, Path(tmp))
                    p50s[mode].append(res["p50_ms"])
                    failed += int(res["errors"])
        finally:
            stop(proc)
    out = {"p50_ms_1_client": {mode: round(float(np.median(v)), 3) for mode, v in p50s.items()},
           "rounds_p50_ms": p50s, "failed": failed, "seconds": seconds, "rounds": rounds,
           "build_docs_per_s": round(manifest.index.ntotal / max(b.total_s, 1e-9), 1),
           "build_total_s": round(b.total_s, 1),
           "load_at_end": round(os.getloadavg()[0], 2)}
    cache.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out))
    return out


# ---------------------------------------------------------------- one dataset


def pisa_legs(ds: EvalData, dense: Run, work: Path, variants: list[str], n_boot: int) -> list[str]:
    """Hybrid (cc@0.5 with `dense`) whose lexical leg is PISA's over Strata's analyser: exact, and bounded
    (`indexer.runtime.bounded_leg`, forced on every query) at each `SELECTIVE_DF:DEPTH`; nDCG@10, bounded − exact."""
    from indexer.runtime import bounded_leg as bl
    from indexer.runtime import lexical_pisa as lp
    from indexer.runtime.lexical import build_lexical, lexical_info, open_lexical

    folder = work / "pisa" / ds.name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    lx = open_lexical(folder, build_lexical(folder, enumerate(ds.doc_texts), lexical_info(engine="pisa")))
    row = {d: i for i, d in enumerate(ds.doc_ids)}

    def ndcg(leg: Callable[[str, np.ndarray], tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
        got = [leg(q, np.array([row[d] for d, _ in hits], np.int64)) for q, hits in zip(ds.query_texts, dense,
                                                                                          strict=True)]
        run = [[(ds.doc_ids[i], float(x)) for x, i in zip(s, ids, strict=True)] for s, ids in got]
        return per_query_metrics(convex(dense, drop_identical(run, ds.query_ids), 0.5), ds)["ndcg_at_10"]

    exact = ndcg(lambda q, d: lx.search(q, DEPTH))
    out = ["", f"Hybrid cc@0.5 with PISA's lexical leg: exact {np.nanmean(exact) * 100:.2f}"]
    for var in variants:
        df, depth = var.split(":")
        lp.Engine.SELECTIVE_DF, lp.PRUNED_DEPTH = float(df), int(depth)
        got = ndcg(lambda q, d: bl.complete(lx, bl.begin(lx, q, DEPTH, bounded_from=0), d))
        out.append(f"- bounded {var} (forced): {np.nanmean(got) * 100:.2f}, bounded − exact "
                   f"{_ci(list(paired_ci(got, exact, n_boot)))}")
    return out


def bench_dataset(folder: Path, work: Path, poolings: list[str], alphas: list[float], n_boot: int,
                  eta: Eta, cli_eval: bool = True, latency: tuple[float, int] | None = None,
                  legs: list[str] | None = None) -> dict[str, object]:
    ds = load_dataset(folder)
    say(f"{ds.name}: {len(ds.doc_ids):,} documents, {len(ds.query_ids):,} judged queries")
    out: dict[str, object] = {"dataset": ds.name, "docs": len(ds.doc_ids), "queries": len(ds.query_ids),
                              "anchors": ANCHORS.get(ds.name, {}), "poolings": {}}
    cache = work / "runs" / ds.name
    bm25, bm25_timing = bm25s_run(ds, cache)
    bm25_pq = per_query_metrics(bm25, ds)
    out["bm25"] = {**mean_pct(bm25_pq), **bm25_timing}
    eta.step(f"{ds.name}: bm25 {out['bm25']}")
    for pooling in poolings:
        model = ensure_encoder(work, pooling)
        root = work / "roots" / f"{ds.name}-{pooling_slug(pooling)}"
        build_json = work / "runs" / ds.name / f"build-{pooling_slug(pooling)}.json"
        if not (root / "current").exists():
            # --chunk off: this bench measures documents indexed whole (its results predate passages, which
            # `--chunk auto`, the default, turns on for SciFact and NFCorpus; bench/passages.py compares the two)
            seconds = run_cli(["indexer", "build", "--data", str(folder), "--model", str(model), "--root", str(root),
                               "--chunk", "off"],
                              work / f"build-{ds.name}-{pooling_slug(pooling)}.log")
            build_json.parent.mkdir(parents=True, exist_ok=True)
            build_json.write_text(json.dumps({"build_s": round(seconds, 1),
                                              "docs_per_s": round(len(ds.doc_ids) / seconds, 1)}))
        build = json.loads(build_json.read_text()) if build_json.is_file() else {}
        eval_log = work / f"eval-{ds.name}-{pooling_slug(pooling)}.json"
        if cli_eval:
            if not eval_log.is_file():
                run_cli(["indexer", "eval", "--root", str(root), "--queries", str(folder), "--model", str(model),
                         "--exact-all", "--json"], eval_log)
            cli = _last_json(eval_log)
        else:  # the figures `indexer build` measured and stored in the manifest (no second query encoding)
            cli = json.loads((root / "current" / "manifest.json").read_text()).get("eval")
        pcache = cache / pooling_slug(pooling)
        exact, index, timing = dense_runs(ds, root, model, pcache)
        ex_pq, ix_pq = per_query_metrics(exact, ds), per_query_metrics(index, ds)
        modes: dict[str, dict[str, float]] = {"dense-exact": mean_pct(ex_pq), "dense-index": mean_pct(ix_pq),
                                              "bm25": mean_pct(bm25_pq)}
        fused = {"rrf": rrf(index, bm25), **{f"cc@{a:g}": convex(index, bm25, a) for a in alphas},
                 "rrf-exact": rrf(exact, bm25)}
        cis: dict[str, dict[str, list[float]]] = {}
        for name, run in fused.items():
            pq = per_query_metrics(run, ds)
            modes[name] = mean_pct(pq)
            cis[name] = {"vs_dense_index": list(paired_ci(pq["ndcg_at_10"], ix_pq["ndcg_at_10"], n_boot)),
                         "vs_bm25": list(paired_ci(pq["ndcg_at_10"], bm25_pq["ndcg_at_10"], n_boot))}
        cis["dense-index"] = {"vs_dense_exact": list(paired_ci(ix_pq["ndcg_at_10"], ex_pq["ndcg_at_10"], n_boot))}
        out["poolings"][pooling] = {"modes": modes, "ci_ndcg_at_10": cis, "timing": timing, "build": build,
                                    "indexer_eval": cli}
        if legs and pooling == "mean":
            out["poolings"][pooling]["pisa_legs"] = pisa_legs(ds, index, work, legs, n_boot)  # type: ignore[index]
        if latency is not None:
            out["poolings"][pooling]["latency"] = search_latency(root, ds.query_texts, pcache, *latency)
        eta.step(f"{ds.name} {pooling}: exact {modes['dense-exact']['ndcg_at_10']} index "
                 f"{modes['dense-index']['ndcg_at_10']} rrf {modes['rrf']['ndcg_at_10']}")
    if len(poolings) > 1 and "mean" in poolings:
        mean_ex = per_query_metrics(load_run(cache / "mean" / "dense-exact.json") or [], ds)["ndcg_at_10"]
        for pooling in poolings:
            if pooling != "mean":
                other = per_query_metrics(load_run(cache / pooling_slug(pooling) / "dense-exact.json") or [], ds)
                out["poolings"][pooling]["ci_vs_mean_exact"] = list(paired_ci(other["ndcg_at_10"], mean_ex, n_boot))
    return out


def _last_json(path: Path) -> dict[str, object] | None:
    for line in reversed(path.read_text(errors="replace").splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                return None
    return None


def checks(result: dict[str, object]) -> list[str]:
    lines = []
    anchors = result.get("anchors") or {}
    mean = result["poolings"].get("mean") if isinstance(result["poolings"], dict) else None
    if anchors.get("mteb_minilm_l6") is not None and mean:
        got = mean["modes"]["dense-exact"]["ndcg_at_10"]
        diff = got - anchors["mteb_minilm_l6"]
        lines.append(f"{result['dataset']}: dense exact (mean) {got:.2f} vs MTEB {anchors['mteb_minilm_l6']:.2f}: "
                     f"{diff:+.2f} -> {'OK' if abs(diff) <= 0.3 else 'MISS'} (|diff| <= 0.3)")
    if anchors.get("anserini_bm25_flat") is not None:
        got = result["bm25"]["ndcg_at_10"]
        diff = got - anchors["anserini_bm25_flat"]
        lines.append(f"{result['dataset']}: bm25 {got:.2f} vs Anserini flat {anchors['anserini_bm25_flat']:.2f}: "
                     f"{diff:+.2f} -> {'OK' if abs(diff) <= 1.0 else 'MISS'} (|diff| <= 1.0)")
    return lines


# ---------------------------------------------------------------- report


def render(report: dict[str, object]) -> str:
    out = [f"# BEIR benchmark — {report['stamp']}", "", f"Command: `{report['command']}`", "",
           f"Machine: {report['machine']}. Encoder: stock all-MiniLM-L6-v2 exported by `encoder export` "
           "(default int8) with each pooling; index: `indexer build --data` defaults. nDCG@10 / MRR@10 / R@100 in "
           "points; CIs are paired bootstrap 95 % over queries "
           f"({report['bootstrap']} resamples).", ""]
    for res in report["datasets"]:
        a = res.get("anchors") or {}
        out += [f"## {res['dataset']} ({res['docs']:,} docs, {res['queries']:,} queries)", "",
                f"Anchors (nDCG@10): Anserini BM25 flat {a.get('anserini_bm25_flat') or '—'}, "
                f"MTEB all-MiniLM-L6-v2 {a.get('mteb_minilm_l6') or '—'}.", ""]
        for pooling, p in res["poolings"].items():
            t, b, lat = p["timing"], p.get("build", {}), p.get("latency")
            out += [f"### pooling `{pooling}` — IVF nlist {t['nlist']}, nprobe {t['nprobe']}; build "
                    f"{b.get('build_s', '—')} s ({b.get('docs_per_s', '—')} docs/s); index search "
                    f"{t['index_ms_per_query']} ms/query", "",
                    "| mode | nDCG@10 | MRR@10 | R@100 | Δ nDCG vs dense-index [95 % CI] | Δ nDCG vs BM25 [95 % CI] |"
                    + (" /search p50 ms, 1 client |" if lat else ""),
                    "|---|---:|---:|---:|---|---|" + ("---:|" if lat else "")]
            for mode, m in p["modes"].items():
                ci = p["ci_ndcg_at_10"].get(mode, {})
                vd, vb = ci.get("vs_dense_index"), ci.get("vs_bm25")
                if mode == "dense-index":
                    vd = ci.get("vs_dense_exact")
                out.append(f"| {mode} | {m['ndcg_at_10']:.2f} | {m['mrr_at_10']:.2f} | {m['recall_at_100']:.2f} | "
                           f"{_ci(vd) + (' (vs exact)' if mode == 'dense-index' and vd else '')} | {_ci(vb)} |"
                           + (f" {_p50(lat, mode)} |" if lat else ""))
            out += p.get("pisa_legs", [])
            if "ci_vs_mean_exact" in p:
                out.append(f"\nExact nDCG@10 vs `mean` exact: {_ci(p['ci_vs_mean_exact'])}.")
            cli = p.get("indexer_eval") or {}
            if cli:
                out.append(f"\n`indexer eval` (CLI) figures: {json.dumps(_cli_short(cli))}")
            out.append("")
    if report.get("checks"):
        out += ["## Correctness checks", ""] + [f"- {c}" for c in report["checks"]] + [""]
    lat_rows = [(r["dataset"], pooling, p["latency"]) for r in report["datasets"]
                for pooling, p in r["poolings"].items() if p.get("latency")]
    if lat_rows:
        out += ["## Build speed and `/search` p50 at 1 client (`--latency`)", "",
                "wrk, 1 connection, the dataset's judged queries cycled, top_k 10, median of the rounds (modes "
                "interleaved); the machine's 2 cores are shared, so compare modes within a row.", "",
                "| dataset | pooling | build docs/s | dense p50 ms | lexical p50 ms | hybrid p50 ms | hybrid / dense | "
                "load |", "|---|---|---:|---:|---:|---:|---:|---:|"]
        for name, pooling, lat in lat_rows:
            p50 = lat["p50_ms_1_client"]
            ratio = f"{p50['hybrid'] / p50['dense']:.2f}" if "hybrid" in p50 else "—"
            out.append(f"| {name} | {pooling} | {lat['build_docs_per_s']} | {p50.get('dense', '—')} | "
                       f"{p50.get('lexical', '—')} | {p50.get('hybrid', '—')} | {ratio} | {lat['load_at_end']} |")
        out.append("")
    out += ["## Average over datasets (nDCG@10)", "", "| pooling | mode | mean nDCG@10 |", "|---|---|---:|"]
    for pooling in report["poolings"]:
        modes = [m for r in report["datasets"] for m in r["poolings"].get(pooling, {}).get("modes", {})]
        for mode in dict.fromkeys(modes):
            vals = [r["poolings"][pooling]["modes"][mode]["ndcg_at_10"] for r in report["datasets"]
                    if pooling in r["poolings"]]
            out.append(f"| {pooling} | {mode} | {np.mean(vals):.2f} |")
    return "\n".join(out + target_lines(report)) + "\n"


DEFAULT_HYBRID = "cc@0.5"  # the default `hybrid` mode: convex combination, dense weight 0.5 (mean pooling)
TARGET_MARGIN = 2.0  # the target: default hybrid >= max(published BM25, published MiniLM) + 2.0 nDCG@10


def target_lines(report: dict[str, object]) -> list[str]:
    """The issue's target per dataset with both published anchors, and on their average: the default hybrid
    (mean pooling) against max(Anserini BM25 flat, MTEB all-MiniLM-L6-v2) + 2.0 nDCG@10."""
    rows = []
    for res in report["datasets"]:
        a = res.get("anchors") or {}
        mean = res["poolings"].get("mean", {}).get("modes", {})
        if a.get("anserini_bm25_flat") is None or a.get("mteb_minilm_l6") is None or DEFAULT_HYBRID not in mean:
            continue
        best = max(a["anserini_bm25_flat"], a["mteb_minilm_l6"])
        rows.append((res["dataset"], mean[DEFAULT_HYBRID]["ndcg_at_10"], best, best + TARGET_MARGIN, mean))
    if not rows:
        return []
    out = ["", f"## Target: default hybrid (`{DEFAULT_HYBRID}`, mean pooling) vs max(published BM25, published MiniLM)"
           f" + {TARGET_MARGIN:.1f}", "",
           "| dataset | default hybrid | max(published) | target | margin | met |", "|---|---:|---:|---:|---:|---|"]
    for name, got, best, target, _ in rows:
        out.append(f"| {name} | {got:.2f} | {best:.2f} | {target:.2f} | {got - target:+.2f} | "
                   f"{'yes' if got >= target else 'no'} |")
    got, best = np.mean([r[1] for r in rows]), np.mean([r[2] for r in rows])
    out.append(f"| **average ({len(rows)} sets)** | {got:.2f} | {best:.2f} | {best + TARGET_MARGIN:.2f} | "
               f"{got - best - TARGET_MARGIN:+.2f} | {'yes' if got >= best + TARGET_MARGIN else 'no'} |")
    modes = [m for m in rows[0][4] if all(m in r[4] for r in rows)]
    ranked = sorted(modes, key=lambda m: -np.mean([r[4][m]["ndcg_at_10"] for r in rows]))
    out += ["", "Mean pooling, average nDCG@10 over these sets by mode: " + ", ".join(
        f"{m} {np.mean([r[4][m]['ndcg_at_10'] for r in rows]):.2f}" for m in ranked) + "."]
    return out


def _p50(lat: dict[str, object], row: str) -> str:
    mode = LATENCY_ROW.get(row)
    got = lat["p50_ms_1_client"].get(mode) if mode else None  # type: ignore[union-attr]
    return f"{got:.3f} ({mode})" if got is not None else ""


def _ci(v: list[float] | None) -> str:
    return "" if not v else f"{v[0]:+.2f} [{v[1]:+.2f}, {v[2]:+.2f}]"


def _cli_short(cli: dict[str, object]) -> dict[str, object]:
    fig = cli.get("figures", cli) if isinstance(cli, dict) else {}
    keys = ("ndcg_at_10", "exact_ndcg_at_10", "mrr_at_10", "recall_at_100", "nprobe", "n_queries")
    return {k: fig.get(k) for k in keys if isinstance(fig, dict) and k in fig}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--data", type=Path, default=Path(os.environ.get("STRATA_DATA_DIR", "/work/shared/data")) / "beir",
                   help="folder of prepared BEIR datasets (default: %(default)s)")
    p.add_argument("--datasets", default=None, help="comma-separated names (default: every prepared one)")
    p.add_argument("--work", type=Path, default=Path("/tmp/beirbench"), help="cache folder (default: %(default)s)")
    p.add_argument("--poolings", default=",".join(POOLINGS), help="encoder poolings (default: %(default)s)")
    p.add_argument("--alphas", default="0.3,0.5,0.7", help="convex-combination dense weights (default: %(default)s)")
    p.add_argument("--bootstrap", type=int, default=2000, help="bootstrap resamples (default: %(default)s)")
    p.add_argument("--no-cli-eval", action="store_true",
                   help="skip `indexer eval` (report the figures `indexer build` stored) — for large query sets")
    p.add_argument("--latency", action="store_true",
                   help="also measure build documents/s and /search p50 at 1 client per served mode with wrk")
    p.add_argument("--latency-seconds", type=float, default=5.0, help="wrk seconds per mode and round (default 5)")
    p.add_argument("--latency-rounds", type=int, default=3, help="rounds, the modes interleaved (default 3)")
    p.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "results", help="results folder")
    p.add_argument("--pisa-legs", metavar="DF:DEPTH,…", help="also hybrid with PISA's exact and bounded legs")
    p.add_argument("--render", type=Path, help="print the Markdown of a results JSON and exit")
    p.add_argument("--merge", type=Path, nargs="+", metavar="JSON",
                   help="merge results JSONs (runs split over machines) into one beir-<stamp>.{md,json} and exit")
    args = p.parse_args(argv)
    if args.render:
        print(render(json.loads(args.render.read_text())), end="")
        return 0
    if args.merge:
        parts = [json.loads(f.read_text()) for f in args.merge]
        merged = {**parts[0], "datasets": [d for r in parts for d in r["datasets"]],
                  "checks": [c for r in parts for c in r.get("checks", [])],
                  "command": " ; ".join(r["command"] for r in parts),
                  "machine": " ; ".join(dict.fromkeys(r["machine"] for r in parts)),
                  "merged_from": [str(f) for f in args.merge]}
        args.out.mkdir(parents=True, exist_ok=True)
        stem = args.out / f"beir-{merged['stamp']}"
        stem.with_suffix(".json").write_text(json.dumps(merged, indent=1) + "\n")
        stem.with_suffix(".md").write_text(render(merged))
        print(render(merged), end="")
        return 0
    names = args.datasets.split(",") if args.datasets else sorted(
        d.name for d in args.data.iterdir() if (d / "PREPARED.json").is_file()) if args.data.is_dir() else []
    folders = [args.data / n for n in names]
    missing = [str(f) for f in folders if not (f / "PREPARED.json").is_file()]
    if not folders or missing:
        p.error(f"no prepared dataset {', '.join(missing) or 'under ' + str(args.data)} (run bench/beir_data.py)")
    poolings = args.poolings.split(",") if args.poolings else []
    # the layer-combination pooling contains a comma: rejoin "layers:0" + "6"
    poolings = _join_layers(poolings)
    alphas = [float(a) for a in args.alphas.split(",")]
    if args.latency and shutil.which("wrk") is None:
        p.error("--latency needs wrk (Debian's): apt-get install -y wrk")
    args.work.mkdir(parents=True, exist_ok=True)
    eta = Eta(len(folders) * (1 + len(poolings)))
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    report: dict[str, object] = {
        "stamp": stamp, "command": "python bench/beir.py " + shlex.join(sys.argv[1:] if argv is None else argv),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores (shared), load {os.getloadavg()[0]:.1f} at start",
        "bootstrap": args.bootstrap, "poolings": poolings, "alphas": alphas, "datasets": [], "checks": []}
    for folder in folders:
        res = bench_dataset(folder, args.work, poolings, alphas, args.bootstrap, eta, cli_eval=not args.no_cli_eval,
                            latency=(args.latency_seconds, args.latency_rounds) if args.latency else None,
                            legs=args.pisa_legs.split(",") if args.pisa_legs else None)
        report["datasets"].append(res)
        report["checks"] += checks(res)
        for line in checks(res):
            say("check: " + line)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"beir-{stamp}.json").write_text(json.dumps(report, indent=1) + "\n")
    md = render(report)
    (args.out / f"beir-{stamp}.md").write_text(md)
    print(md, end="")
    say(f"wrote {args.out}/beir-{stamp}.{{md,json}}")
    return 0


def _join_layers(parts: list[str]) -> list[str]:
    out: list[str] = []
    for part in parts:
        if out and out[-1].startswith("layers:") and part.isdigit():
            out[-1] += "," + part
        else:
            out.append(part)
    return out


if __name__ == "__main__":
    raise SystemExit(main())
