"""Hybrid's bounded lexical leg (`indexer/runtime/bounded_leg.py`) against the exact one: cost at 10M documents,
agreement with the exact hybrid there, and nDCG@10 on BEIR sets with the bound forced on every query.

    nice -n 10 python bench/hybrid_bounded.py [--root ~/.cache/strata-scale/work/root-10000000] [--queries 200]
        [--beir /work/shared/data/beir] [--datasets scifact,nfcorpus] [--skip-10m] [--skip-beir]

**At 10M** (the served version of `bench/scale.py`, opened read-only in process, memory-mapped as served, its
encoder; the queries: `bench.scale_corpus.query_texts`, Quora questions, as `bench/lexical_10m.py` and the scale
bench send them). Per query, one after the other in alternating order:
- the lexical leg alone (k = `HYBRID_DEPTH`): exact (`LexicalIndex.search`) and bounded (`bounded_leg.begin` +
  `complete` with the query's dense top 100), the bounded one at each `--selective` fraction (`SELECTIVE_DF`);
  wall ms on the calling thread (tantivy searches on it);
- per fraction: overlap@10 of the fused top 10 (convex, alpha 0.5, as served) bounded vs exact, and the recall of
  the exact lexical top 10 within the bounded lexical top 100;
- the whole hybrid `/search` path in process (`Searcher.run_batch`: the query vector brought, as `bench/scale.py`'s
  hybrid requests bring it, top_k 10), `STRATA_HYBRID_LEXICAL` exact vs bounded (the shipped constants): wall p50/p99
  and each stage's p50 (`Stages`), beside the dense mode's (the same vector) for reference.

**BEIR** (prepared sets, `bench/beir_data.py`): the documents encoded with the same encoder (cached under
`--work`), dense = exact inner-product top 100, lexical = a tantivy index of title + text built by the seam
(`build_lexical`, engine tantivy), the bounded leg forced (`bounded_from=0`: every query bounded, at the shipped
`SELECTIVE_DF` of the set's size); hybrid nDCG@10 bounded vs exact with a paired bootstrap 95 % interval
(`bench.beir.paired_ci`, queries resampled).

Results: bench/results/hybrid-bounded-<stamp>.md and .json, with the load average at start and end.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from indexer.runtime import bounded_leg  # noqa: E402
from indexer.runtime.fusion import HYBRID_DEPTH, Fusion, fuse  # noqa: E402

QUORA = Path("/work/shared/data/quora_duplicate_questions.partial.tsv.gz")
DEFAULT_ROOT = Path.home() / ".cache" / "strata-scale" / "work" / "root-10000000"
DEFAULT_BEIR = Path("/work/shared/data/beir")
DEFAULT_ENCODER = Path.home() / ".cache" / "strata-scale" / "minilm-mean"  # the 10M version's (mean-pooled MiniLM)
Ranked = tuple[np.ndarray, np.ndarray]


def pct(xs: list[float], p: float) -> float:
    return round(float(np.percentile(xs, p)), 2) if xs else math.nan


def timed(fn: object) -> tuple[float, object]:
    t0 = time.perf_counter()
    got = fn()  # type: ignore[operator]
    return (time.perf_counter() - t0) * 1000, got


def bounded(lex: object, q: str, dense_ids: np.ndarray, frac: float, bounded_from: int | None) -> tuple[Ranked, bool]:
    """The bounded leg at selective fraction `frac` (begin + complete), and whether it was bounded."""
    bounded_leg.SELECTIVE_DF = frac
    leg = bounded_leg.begin(lex, q, HYBRID_DEPTH, bounded_from=bounded_from)  # type: ignore[arg-type]
    return bounded_leg.complete(lex, leg, dense_ids), leg.bounded  # type: ignore[arg-type]


def overlap(a: np.ndarray, b: np.ndarray, k: int = 10) -> float:
    want = set(a[:k].tolist())
    return len(want & set(b[:k].tolist())) / max(len(want), 1)


def scale_part(root: Path, n_queries: int, variants: list[float]) -> dict[str, object]:
    from bench.scale_corpus import query_texts
    from indexer.runtime.faiss_index import set_threads
    from indexer.runtime.query import Query
    from indexer.runtime.version import IndexVersion
    from service.engine.searcher import Searcher

    shipped = bounded_leg.SELECTIVE_DF
    set_threads(1)
    folder = next(p for p in sorted((root / "versions").iterdir()) if (p / "manifest.json").is_file())
    searcher = Searcher.pair(IndexVersion(folder, mmap=True), threads=1)
    index = searcher.index
    lex = index.lexical  # type: ignore[attr-defined]
    texts = query_texts(QUORA)[:n_queries]
    vecs = searcher.encoder.encode(texts)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    postings = [sum(lex.doc_freq(t) for t in set(lex.analyzer.terms(q))) for q in texts]
    names = {v: f"bounded, selective df ≤ {v:g}·N" for v in variants}
    legs: dict[str, list[float]] = {"exact": [], **{name: [] for name in names.values()}}
    agree: dict[str, dict[str, list[float]]] = {name: {"overlap10": [], "recall10in100": []} for name in names.values()}
    n_bounded = dict.fromkeys(agree, 0)
    whole: dict[str, dict[str, list[float]]] = {side: {} for side in ("dense", "exact", "bounded")}
    for i, (q, v) in enumerate(zip(texts, vecs, strict=True)):
        d_scores, d_ids = index.search(v[None], HYBRID_DEPTH)
        dense = (d_scores[0], d_ids[0])
        ms, exact = timed(lambda q=q: lex.search(q, HYBRID_DEPTH))
        legs["exact"].append(ms)
        fused_exact = fuse(Fusion(), dense, exact, 10)[1]  # type: ignore[arg-type]
        for variant, name in names.items():
            ms, (got, was) = timed(lambda q=q, f=variant, d=dense[1]: bounded(lex, q, d, f, bounded_leg.BOUNDED_FROM))
            legs[name].append(ms)
            n_bounded[name] += int(was)
            agree[name]["overlap10"].append(overlap(fused_exact, fuse(Fusion(), dense, got, 10)[1]))
            agree[name]["recall10in100"].append(overlap(exact[1], got[1]))  # type: ignore[index]
        bounded_leg.SELECTIVE_DF = shipped
        for side in (("dense", "exact", "bounded") if i % 2 == 0 else ("bounded", "exact", "dense")):
            searcher.bounded_from = None if side == "exact" else bounded_leg.BOUNDED_FROM
            mode = "dense" if side == "dense" else "hybrid"
            t0 = time.perf_counter()
            r = searcher.run_batch([Query([q], 10, mode=mode, vectors=v[None])])[0]
            assert r.error is None, r.error
            whole[side].setdefault("total_ms", []).append((time.perf_counter() - t0) * 1000)
            for stage, val in vars(r.stages).items():
                whole[side].setdefault(stage, []).append(float(val))
    searcher.close()
    return {"version": str(folder), "queries": len(texts), "postings_median": int(statistics.median(postings)),
            "over_bounded_from": sum(p > bounded_leg.BOUNDED_FROM for p in postings),
            "legs": {k: {"p50": pct(v, 50), "p99": pct(v, 99), "mean": round(statistics.fmean(v), 2)}
                     for k, v in legs.items()},
            "agreement": {k: {m: round(statistics.fmean(v), 4) for m, v in a.items()} | {"bounded": n_bounded[k]}
                          for k, a in agree.items()},
            "whole": {side: {k: {"p50": pct(v, 50), "p99": pct(v, 99)} for k, v in st.items()}
                      for side, st in whole.items()}}


def rows_probe(root: Path, n_queries: int = 20) -> list[dict[str, object]]:
    """A rows clause (`lexical_tantivy._rows_clause`: how a bounded leg's dense candidates are scored) as a term-set
    query against one term query per row, with every query term added, at 100 to 1,200 random rows: p50 ms."""
    import tantivy

    from bench.lexical_10m import open_version
    from bench.scale_corpus import query_texts
    from indexer.runtime.lexical_tantivy import ROW

    lex, _ = open_version(root)
    texts = query_texts(QUORA)[:n_queries]
    rng = np.random.default_rng(0)
    out = []
    for n in (100, 300, 1200):
        times: dict[str, list[float]] = {"term_set": [], "term_queries": []}
        for q in texts:
            terms = lex.analyzer.terms(q)  # type: ignore[attr-defined]
            rows = np.sort(rng.choice(lex.ntotal, n, replace=False))  # type: ignore[attr-defined]
            clauses = {"term_set": tantivy.Query.term_set_query(lex.schema, ROW, rows.tolist()),  # type: ignore[attr-defined]
                       "term_queries": tantivy.Query.boolean_query(
                           [(tantivy.Occur.Should, tantivy.Query.term_query(lex.schema, ROW, r))  # type: ignore[attr-defined]
                            for r in rows.tolist()])}
            for name, clause in clauses.items():
                query = lex._adding(tantivy.Query.const_score_query(clause, 0.0), terms)  # type: ignore[attr-defined]
                ms, _ = timed(lambda query=query, n=n: lex.searcher.search(query, n, count=False))  # type: ignore[attr-defined]
                times[name].append(ms)
        out.append({"rows": n, **{k: pct(v, 50) for k, v in times.items()}})
    return out


def beir_part(beir: Path, names: list[str], work: Path, n_boot: int, encoder_dir: Path, max_length: int | None
              ) -> list[dict[str, object]]:
    from bench.beir import convex, drop_identical, load_dataset, paired_ci, per_query_metrics
    from indexer.runtime.encoder import OnnxEncoder
    from indexer.runtime.lexical import build_lexical, lexical_info, open_lexical

    encoder = OnnxEncoder(encoder_dir, threads=1)  # one thread: no spinning for a core on a loaded machine
    if max_length:  # documents cut shorter than the model's window: cheaper to encode, the same for both sides
        encoder.tokenizer.enable_truncation(max_length=max_length)
    out = []
    for name in names:
        ds = load_dataset(beir / name)
        cache = work / f"{name}-{max_length or 'full'}"
        cache.mkdir(parents=True, exist_ok=True)
        emb_path = cache / "docs.npy"
        if not emb_path.is_file():
            np.save(emb_path, encoder.encode(ds.doc_texts))
        docs = np.load(emb_path)
        docs /= np.linalg.norm(docs, axis=1, keepdims=True)
        qv = encoder.encode(ds.query_texts)
        qv /= np.linalg.norm(qv, axis=1, keepdims=True)
        lexdir = cache / "lexical-index"
        if not (lexdir / "lexical").is_dir():
            info = build_lexical(lexdir, enumerate(ds.doc_texts), lexical_info(engine="tantivy"))
            (lexdir / "info.json").write_text(info.model_dump_json())
        from indexer.runtime.manifest import LexicalInfo
        lex = open_lexical(lexdir, LexicalInfo.model_validate_json((lexdir / "info.json").read_text()))
        sims = qv @ docs.T
        runs: dict[str, list[list[tuple[str, float]]]] = {"dense": [], "exact": [], "bounded": []}
        n_sel, same = [], 0
        for qi, q in enumerate(ds.query_texts):
            top = np.argsort(-sims[qi], kind="stable")[:HYBRID_DEPTH]
            runs["dense"].append([(ds.doc_ids[d], float(sims[qi, d])) for d in top])
            e_scores, e_ids = lex.search(q, HYBRID_DEPTH)
            leg = bounded_leg.begin(lex, q, HYBRID_DEPTH, bounded_from=0)
            b_scores, b_ids = bounded_leg.complete(lex, leg, top)
            n_sel.append(len(leg.selective or ()))
            same += int(e_ids.tolist() == b_ids.tolist())
            runs["exact"].append([(ds.doc_ids[d], float(s)) for s, d in zip(e_scores, e_ids, strict=True)])
            runs["bounded"].append([(ds.doc_ids[d], float(s)) for s, d in zip(b_scores, b_ids, strict=True)])
        runs = {k: drop_identical(v, ds.query_ids) for k, v in runs.items()}
        ndcg = {}
        for side in ("exact", "bounded"):
            ndcg[f"bm25-{side}"] = per_query_metrics(runs[side], ds)["ndcg_at_10"]
            ndcg[f"hybrid-{side}"] = per_query_metrics(convex(runs["dense"], runs[side], 0.5), ds)["ndcg_at_10"]
        out.append({"dataset": name, "docs": len(ds.doc_ids), "queries": len(ds.query_ids),
                    "encoded_tokens": max_length or encoder.meta.max_length,
                    "selective_df_docs": round(bounded_leg.SELECTIVE_DF * len(ds.doc_ids), 1),
                    "selective_terms_mean": round(statistics.fmean(n_sel), 2), "same_lexical_top100": same,
                    **{k: round(float(np.nanmean(v)) * 100, 2) for k, v in ndcg.items()},
                    "hybrid_diff_ci": paired_ci(ndcg["hybrid-bounded"], ndcg["hybrid-exact"], n_boot),
                    "bm25_diff_ci": paired_ci(ndcg["bm25-bounded"], ndcg["bm25-exact"], n_boot)})
    return out


def render(report: dict[str, object]) -> str:
    lines = [f"# Hybrid's bounded lexical leg against the exact one ({report['stamp']})", "",
             f"`{report['command']}`; load average (1/5/15 min) at start {report['load_start']}, at end "
             f"{report['load_end']} on 2 cores (other sessions' tests ran beside: compare the sides, measured "
             "interleaved per query, not the absolute figures). Shipped constants: `BOUNDED_FROM` = "
             f"{bounded_leg.BOUNDED_FROM:,} postings, `SELECTIVE_DF` = {bounded_leg.SELECTIVE_DF:g}.", ""]
    s = report.get("scale")
    if isinstance(s, dict):
        lines += [f"## 10M documents, in process ({s['queries']} queries)", "",
                  f"Version `{s['version']}`. Postings an exact leg reads: median {s['postings_median']:,}; "
                  f"{s['over_bounded_from']} of {s['queries']} queries over `BOUNDED_FROM` (the others stay exact "
                  "in every row).", "",
                  "| lexical leg (k=100) | wall p50 ms | p99 | mean | queries bounded | fused top-10 overlap vs exact "
                  "| exact lexical top-10 in its top 100 |", "|---|---|---|---|---|---|---|"]
        for k, v in s["legs"].items():
            a = s["agreement"].get(k, {})
            lines.append(f"| {k} | {v['p50']} | {v['p99']} | {v['mean']} | {a.get('bounded', '—')} | "
                         f"{a.get('overlap10', 1.0)} | {a.get('recall10in100', 1.0)} |")
        lines += ["", "Whole search (`Searcher.run_batch`, query vector brought, top_k 10; dense: mode dense, exact / "
                  "bounded: mode hybrid with `STRATA_HYBRID_LEXICAL` exact / bounded), ms: total p50 (p99), then each "
                  "stage's p50 (`lexical_bounded`: the mean share of queries bounded is in the table above)", "",
                  "| path | total | " + " | ".join(k for k in s["whole"]["exact"] if k != "total_ms") + " |",
                  "|---|---|" + "---|" * (len(s["whole"]["exact"]) - 1)]
        for side, st in s["whole"].items():
            lines.append(f"| {side} | {st['total_ms']['p50']} ({st['total_ms']['p99']}) | " +
                         " | ".join(f"{v['p50']}" for k, v in st.items() if k != "total_ms") + " |")
    rp = report.get("rows_probe")
    if isinstance(rp, list):
        lines += ["## Rows clause at 10M: a term-set query against one term query per row (every query term added)",
                  "", "| rows | term set p50 ms | term queries p50 ms |", "|---|---|---|",
                  *(f"| {r['rows']:,} | {r['term_set']} | {r['term_queries']} |" for r in rp)]
    b = report.get("beir")
    if isinstance(b, list) and b:
        lines += ["", "## BEIR sets, the bounded leg forced on every query", "",
                  "| dataset | docs | queries | tokens encoded | selective df ≤ | selective terms / query | "
                  "same lexical top 100 | BM25 exact | BM25 bounded | hybrid exact | hybrid bounded | "
                  "hybrid Δ [95 % CI] | BM25 Δ [95 % CI] |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in b:
            lines.append(f"| {r['dataset']} | {r['docs']:,} | {r['queries']} | {r['encoded_tokens']} | "
                         f"{r['selective_df_docs']} | "
                         f"{r['selective_terms_mean']} | {r['same_lexical_top100']} | {r['bm25-exact']} | "
                         f"{r['bm25-bounded']} | {r['hybrid-exact']} | {r['hybrid-bounded']} | "
                         f"{r['hybrid_diff_ci'][0]} [{r['hybrid_diff_ci'][1]}, {r['hybrid_diff_ci'][2]}] | "
                         f"{r['bm25_diff_ci'][0]} [{r['bm25_diff_ci'][1]}, {r['bm25_diff_ci'][2]}] |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, default=DEFAULT_ROOT, help="a bench/scale.py root (read only)")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--selective", default="0.0005,0.001,0.002,0.005", help="SELECTIVE_DF fractions to compare")
    ap.add_argument("--beir", type=Path, default=DEFAULT_BEIR)
    ap.add_argument("--datasets", default="scifact,nfcorpus")
    ap.add_argument("--work", type=Path, default=Path("/tmp/hybrid-bounded-work"))
    ap.add_argument("--encoder", type=Path, default=DEFAULT_ENCODER, help="exported encoder for the BEIR sets")
    ap.add_argument("--max-length", type=int, default=None, help="encode the BEIR texts cut to this many tokens")
    ap.add_argument("--bootstrap", type=int, default=2000)
    ap.add_argument("--skip-10m", action="store_true")
    ap.add_argument("--skip-beir", action="store_true")
    ap.add_argument("--rows-probe", action="store_true", help="only the rows-clause probe at 10M (ROWS_AS_TERMS)")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = ap.parse_args()
    load0 = "/".join(f"{x:.2f}" for x in os.getloadavg())
    report: dict[str, object] = {"command": "nice -n 10 python bench/hybrid_bounded.py " + " ".join(sys.argv[1:]),
                                 "load_start": load0}
    if args.rows_probe:
        args.skip_beir = args.skip_10m = True
        report["rows_probe"] = rows_probe(args.root)
    if not args.skip_beir:
        report["beir"] = beir_part(args.beir, args.datasets.split(","), args.work, args.bootstrap, args.encoder,
                                   args.max_length)
        print(json.dumps(report["beir"], indent=1), flush=True)
    if not args.skip_10m:
        report["scale"] = scale_part(args.root, args.queries, [float(f) for f in args.selective.split(",")])
    report["load_end"] = "/".join(f"{x:.2f}" for x in os.getloadavg())
    report["stamp"] = datetime.now(timezone.utc).strftime("%Y%m%dT%H%MZ")
    text = render(report)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"hybrid-bounded-{report['stamp']}.md").write_text(text)
    (args.out / f"hybrid-bounded-{report['stamp']}.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
