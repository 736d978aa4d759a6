"""Passages vs truncation: does splitting documents into passages (`indexer.runtime.passages`) find what
truncation at the encoder's window misses, and what does it cost?

    nice -n 10 python bench/passages.py --beir /tmp/beir --model MODEL_DIR --work /tmp/passages-bench

For each BEIR set (`bench/beir_data.py`; SciFact and NFCorpus by default: their median document is 314 and 355
tokens, 71 % and 79 % of them past the 254-token window) it ranks documents four ways per mode:

- truncation: one vector per document (what the encoder sees of its first 254 tokens; `indexer build` today),
  BM25 over the whole document;
- passages: the document split by `Splitter(chunk, overlap)`, one vector per passage, a document scored by its
  passages (`aggregate`: max; mean and top-2 mean measured beside it), BM25 over passages aggregated the same way
  (`lexical-passages`) and over whole documents (`lexical`);
- hybrid: the convex combination (alpha 0.5, min-max over each top 100, `bench/beir.py`'s `convex`) of the
  dense and lexical runs of each side.

The long-document benchmark is built from each set (`long_corpus`): for each sampled test query, one of its
relevant documents is placed at a random position among k ∈ [6, 10] other documents of the same corpus (drawn
from documents relevant to none of the sampled queries), concatenated with a blank line between them into one
long document; `--distractors` × as many long documents again are made of such filler documents only. A long
document is relevant to a query with the highest grade of the documents it holds. Queries are reported by the
token position of their planted relevant document's start in its long document: < 256 or >= 256.

Hybrid on passages (`--choose`): candidates — convex at alpha 0.3/0.5/0.7 and RRF (k 60), each with BM25 over
passages (what a version of passages serves) or over whole documents (a document's best passage + its BM25) — are
chosen on a dev half of every set's queries (seeded split; the mean of the sets' mean nDCG@10) and reported on
the other half: the chosen one against the served default (convex 0.5, passage BM25) and against each of its
legs, with paired bootstrap CIs.

nDCG@10 and R@100 (`indexer.metrics`), passages − truncation with paired bootstrap 95 % intervals
(`bench/beir.py`'s `paired_ci`); build cost per side: splitting + encoding + BM25 indexing time, measured in this
process one after the other, and index size (float32 vectors + the saved BM25 index). Corpora may be
subsampled (`--max-docs`: every judged document of the sampled queries kept, others drawn at random) so the
run fits a loaded machine; the report says what was run. Results: bench/results/passages-<stamp>.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from bench.beir import DEPTH, EvalData, Run, convex, load_dataset, paired_ci, per_query_metrics, rrf  # noqa: E402
from bench.bm25_libs import Bm25sRetriever  # noqa: E402
from indexer.runtime.encoder import OnnxEncoder  # noqa: E402
from indexer.runtime.passages import Splitter  # noqa: E402

KEYS = ("ndcg_at_10", "recall_at_100")
AGGS = ("max", "mean", "top2")


def say(msg: str) -> None:
    print(f"passages: {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- data


def subsample(ds: EvalData, n_queries: int | None, max_docs: int | None, seed: int) -> EvalData:
    """Up to `n_queries` queries and a corpus of at most `max_docs` (every judged document of those queries
    kept, the rest drawn at random)."""
    rng = random.Random(seed)
    qi = list(range(len(ds.query_ids)))
    if n_queries is not None and n_queries < len(qi):
        qi = sorted(rng.sample(qi, n_queries))
    keep_q = [ds.query_ids[i] for i in qi], [ds.query_texts[i] for i in qi], [ds.qrels[i] for i in qi]
    di = list(range(len(ds.doc_ids)))
    if max_docs is not None and max_docs < len(di):
        judged = {d for j in keep_q[2] for d in j}
        must = [i for i in di if ds.doc_ids[i] in judged]
        rest = [i for i in di if ds.doc_ids[i] not in judged]
        di = sorted(must + rng.sample(rest, max(0, max_docs - len(must))))
    return EvalData(ds.name, ds.folder, [ds.doc_ids[i] for i in di], [ds.doc_texts[i] for i in di], *keep_q)


def long_corpus(ds: EvalData, n_queries: int, seed: int, splitter: Splitter, distractors: float = 1.0
                ) -> tuple[EvalData, dict[str, int]]:
    """The long-document benchmark (module docstring) and, per query, its planted document's token position."""
    rng = random.Random(seed)
    qi = sorted(rng.sample(range(len(ds.query_ids)), min(n_queries, len(ds.query_ids))))
    qids, qtexts, qrels = [ds.query_ids[i] for i in qi], [ds.query_texts[i] for i in qi], [ds.qrels[i] for i in qi]
    text_of = dict(zip(ds.doc_ids, ds.doc_texts, strict=True))
    judged = {d for j in qrels for d, g in j.items() if g > 0}
    fillers = [d for d in ds.doc_ids if d not in judged]
    rng.shuffle(fillers)
    pos = 0

    def take(k: int) -> list[str]:
        nonlocal pos
        if pos + k > len(fillers):
            rng.shuffle(fillers)
            pos = 0
        got = fillers[pos : pos + k]
        pos += k
        return got

    long_ids, long_texts, members = [], [], []
    position: dict[str, int] = {}
    for q, j in zip(qids, qrels, strict=True):
        rel = rng.choice(sorted(d for d, g in j.items() if g > 0 and d in text_of))
        parts = take(rng.randint(6, 10))
        at = rng.randint(0, len(parts))
        parts.insert(at, rel)
        lid = f"long-{q}"
        before = "\n\n".join(text_of[d] for d in parts[:at])
        position[q] = splitter.token_counts([before])[0] if at else 0
        long_ids.append(lid)
        long_texts.append("\n\n".join(text_of[d] for d in parts))
        members.append(parts)
    for i in range(round(len(qids) * distractors)):  # distractors: fillers only
        parts = take(rng.randint(7, 11))
        long_ids.append(f"distractor-{i}")
        long_texts.append("\n\n".join(text_of[d] for d in parts))
        members.append(parts)
    long_qrels = []
    for j in qrels:
        lj = {}
        for lid, parts in zip(long_ids, members, strict=True):
            g = max((j.get(d, 0) for d in parts), default=0)
            if g > 0:
                lj[lid] = g
        long_qrels.append(lj)
    return EvalData(f"{ds.name}-long", ds.folder, long_ids, long_texts, qids, qtexts, long_qrels), position


# ---------------------------------------------------------------- runs


def dense_run(qvecs: np.ndarray, vecs: np.ndarray, owner: list[int], doc_ids: list[str], agg: str) -> Run:
    """Documents ranked by their rows' (passages') inner products, aggregated per document."""
    scores = qvecs @ vecs.T
    n_docs = len(doc_ids)
    own = np.asarray(owner)
    run: Run = []
    for row in scores:
        if agg == "max":
            doc = np.full(n_docs, -np.inf, dtype=np.float32)
            np.maximum.at(doc, own, row)
        elif agg == "mean":
            doc = np.bincount(own, weights=row, minlength=n_docs) / np.bincount(own, minlength=n_docs)
        else:  # top2: mean of the two best passages (a one-passage document: its one)
            order = np.lexsort((-row, own))
            first = np.full(n_docs, -np.inf)
            second = np.full(n_docs, np.nan)
            seen = np.zeros(n_docs, dtype=np.int64)
            for r in order:
                d = own[r]
                if seen[d] == 0:
                    first[d] = row[r]
                elif seen[d] == 1:
                    second[d] = row[r]
                seen[d] += 1
            doc = np.where(np.isnan(second), first, (first + np.nan_to_num(second)) / 2)
        top = np.argsort(-doc, kind="stable")[:DEPTH]
        run.append([(doc_ids[d], float(doc[d])) for d in top])
    return run


def lexical_run(texts: list[str], owner: list[int], doc_ids: list[str], queries: list[str]) -> tuple[Run, float, int]:
    """BM25 over `texts` (documents or passages), max-aggregated per document; build seconds and saved bytes."""
    t0 = time.perf_counter()
    retr = Bm25sRetriever([str(i) for i in range(len(texts))], texts)
    build_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        retr.model.save(tmp)
        size = sum(f.stat().st_size for f in Path(tmp).rglob("*") if f.is_file())
    run: Run = []
    for q in queries:
        best: dict[str, float] = {}
        for rid, s in retr.search(q, DEPTH * 8):
            d = doc_ids[owner[int(rid)]]
            if d not in best:
                best[d] = s
            if len(best) >= DEPTH:
                break
        run.append(list(best.items()))
    return run, build_s, size


def side(ds: EvalData, enc: OnnxEncoder, splitter: Splitter | None, qvecs: np.ndarray) -> dict[str, object]:
    """One side (truncation when `splitter` is None): its runs and its build cost."""
    t0 = time.perf_counter()
    if splitter is None:
        texts, owner = ds.doc_texts, list(range(len(ds.doc_texts)))
    else:
        texts, owner = [], []
        for d, (text, ps) in enumerate(zip(ds.doc_texts, splitter.split_many(ds.doc_texts), strict=True)):
            for p in ps:
                texts.append(text[p.start : p.end])
                owner.append(d)
    split_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    vecs = enc.encode(texts, progress=True, desc=f"{ds.name} {'passages' if splitter else 'documents'}")
    encode_s = time.perf_counter() - t0
    runs: dict[str, Run] = {}
    aggs = AGGS if splitter is not None else ("max",)
    for agg in aggs:
        runs[f"dense-{agg}"] = dense_run(qvecs, vecs, owner, ds.doc_ids, agg)
    lex, lex_s, lex_bytes = lexical_run(texts, owner, ds.doc_ids, ds.query_texts)
    runs["lexical"] = lex
    return {"runs": runs, "rows": len(texts), "split_s": split_s, "encode_s": encode_s, "lexical_s": lex_s,
            "build_s": split_s + encode_s + lex_s, "vector_bytes": int(vecs.nbytes), "lexical_bytes": lex_bytes,
            "index_bytes": int(vecs.nbytes) + lex_bytes}


def compare(ds: EvalData, trunc: dict[str, object], pas: dict[str, object], n_boot: int,
            subsets: dict[str, list[int]]) -> dict[str, object]:
    """Per mode: truncation's and passages' means and passages − truncation (paired CIs), on each query subset."""
    tr, pr = trunc["runs"], pas["runs"]
    systems = {
        "dense": (tr["dense-max"], pr["dense-max"]),
        "dense (mean agg.)": (tr["dense-max"], pr["dense-mean"]),
        "dense (top-2 agg.)": (tr["dense-max"], pr["dense-top2"]),
        "lexical (passage BM25)": (tr["lexical"], pr["lexical"]),
        "hybrid": (convex(tr["dense-max"], tr["lexical"], 0.5), convex(pr["dense-max"], tr["lexical"], 0.5)),
        "hybrid (passage BM25)": (convex(tr["dense-max"], tr["lexical"], 0.5),
                                  convex(pr["dense-max"], pr["lexical"], 0.5)),
    }
    out: dict[str, object] = {}
    for name, (a, b) in systems.items():
        pa, pb = per_query_metrics(a, ds), per_query_metrics(b, ds)
        row: dict[str, object] = {}
        for sub, idx in subsets.items():
            if not idx:
                continue
            cell = {"n": len(idx)}
            for k in KEYS:
                ta, tb = pa[k][idx], pb[k][idx]
                cell[k] = {"truncation": round(float(np.nanmean(ta)) * 100, 2),
                           "passages": round(float(np.nanmean(tb)) * 100, 2),
                           "diff_ci": list(paired_ci(tb, ta, n_boot))}
            row[sub] = cell
        out[name] = row
    return out


DEFAULT_HYBRID = "convex 0.5, passage BM25"  # what a version of passages serves


def hybrid_runs(trunc: dict[str, object], pas: dict[str, object]) -> dict[str, Run]:
    """The passages side's legs and hybrid candidates (module docstring), by name."""
    tr, pr = trunc["runs"], pas["runs"]
    out: dict[str, Run] = {"dense (passages)": pr["dense-max"], "lexical (passage BM25)": pr["lexical"],
                           "lexical (document BM25)": tr["lexical"]}
    for leg, lex in (("passage", pr["lexical"]), ("document", tr["lexical"])):
        for a in (0.3, 0.5, 0.7):
            out[f"convex {a}, {leg} BM25"] = convex(pr["dense-max"], lex, a)
        out[f"rrf 60, {leg} BM25"] = rrf(pr["dense-max"], lex)
    return out


def choose(sets: list[dict[str, object]], n_boot: int, seed: int) -> dict[str, object]:
    """The hybrid candidate with the best mean of the sets' dev-half nDCG@10, and on the test halves: each
    system's mean and the chosen one's paired differences with the default and with the legs."""
    halves = []
    for s in sets:
        n = len(next(iter(s["per_query"].values())))
        perm = np.random.default_rng(seed + 1).permutation(n)
        halves.append((perm[: n // 2], perm[n // 2 :]))
    cands = [c for c in sets[0]["per_query"] if c.startswith(("convex", "rrf"))]
    dev = {c: float(np.mean([np.nanmean(np.asarray(s["per_query"][c])[d])
                             for s, (d, _) in zip(sets, halves, strict=True)]))
           for c in cands}
    chosen = max(cands, key=lambda c: (dev[c], c == DEFAULT_HYBRID))
    rows = []
    for s, (_, test) in zip(sets, halves, strict=True):
        pq = {c: np.asarray(v)[test] for c, v in s["per_query"].items()}
        row = {"set": s["name"], "n": len(test), **{c: round(float(np.nanmean(v)) * 100, 2) for c, v in pq.items()}}
        for other in (DEFAULT_HYBRID, "dense (passages)", "lexical (passage BM25)"):
            row[f"chosen - {other}"] = list(paired_ci(pq[chosen], pq[other], n_boot))
        row["default - lexical (passage BM25)"] = list(paired_ci(pq[DEFAULT_HYBRID], pq["lexical (passage BM25)"],
                                                                 n_boot))
        rows.append(row)
    return {"dev_means": {c: round(v * 100, 2) for c, v in dev.items()}, "chosen": chosen, "test": rows}


def cost(trunc: dict[str, object], pas: dict[str, object]) -> dict[str, object]:
    keys = ("rows", "split_s", "encode_s", "lexical_s", "build_s", "vector_bytes", "lexical_bytes", "index_bytes")
    c = {"truncation": {k: trunc[k] for k in keys}, "passages": {k: pas[k] for k in keys}}
    c["build_ratio"] = round(pas["build_s"] / trunc["build_s"], 2)
    c["size_ratio"] = round(pas["index_bytes"] / trunc["index_bytes"], 2)
    return c


def bench_set(ds: EvalData, enc: OnnxEncoder, splitter: Splitter, n_boot: int,
              positions: dict[str, int] | None = None) -> dict[str, object]:
    qvecs = enc.encode(ds.query_texts, desc=f"{ds.name} queries")
    trunc = side(ds, enc, None, qvecs)
    pas = side(ds, enc, splitter, qvecs)
    subsets = {"all": list(range(len(ds.query_ids)))}
    if positions is not None:
        subsets["position < 256"] = [i for i, q in enumerate(ds.query_ids) if positions[q] < 256]
        subsets["position >= 256"] = [i for i, q in enumerate(ds.query_ids) if positions[q] >= 256]
    lengths = splitter.token_counts(ds.doc_texts)
    return {"name": ds.name, "docs": len(ds.doc_ids), "queries": len(ds.query_ids),
            "doc_tokens_p50": int(np.percentile(lengths, 50)), "doc_tokens_p90": int(np.percentile(lengths, 90)),
            "share_past_window": round(float(np.mean(np.asarray(lengths) > enc.meta.max_length - 2)), 3),
            "metrics": compare(ds, trunc, pas, n_boot, subsets), "cost": cost(trunc, pas),
            "per_query": {c: [round(float(x), 4) for x in per_query_metrics(r, ds)["ndcg_at_10"]]
                          for c, r in hybrid_runs(trunc, pas).items()}}


# ---------------------------------------------------------------- report


def render(report: dict[str, object]) -> str:
    lines = [f"# Passages vs truncation ({report['stamp']})", "",
             f"`{report['command']}`", "",
             f"Encoder: {report['encoder']}; chunk {report['chunk']} tokens, overlap {report['overlap']}; "
             f"{report['bootstrap']} bootstrap resamples; load at start: {report['load']}. "
             "Passages − truncation in nDCG@10 / R@100 points with paired 95 % CIs; a document is scored by its "
             "best passage (max) unless the row says otherwise; hybrid = convex alpha 0.5.", ""]
    for s in report["sets"]:
        lines += [f"## {s['name']}", "",
                  f"{s['docs']:,} documents (median {s['doc_tokens_p50']} tokens, p90 {s['doc_tokens_p90']}, "
                  f"{s['share_past_window']:.0%} past the window), {s['queries']} queries.", "",
                  "| mode | queries | n | nDCG@10 trunc. | passages | Δ [95 % CI] | R@100 trunc. | passages | "
                  "Δ [95 % CI] |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for mode, row in s["metrics"].items():
            for sub, cell in row.items():
                n, r = cell["ndcg_at_10"], cell["recall_at_100"]
                lines.append(f"| {mode} | {sub} | {cell['n']} | {n['truncation']:.2f} | {n['passages']:.2f} | "
                             f"{_ci(n['diff_ci'])} | {r['truncation']:.2f} | {r['passages']:.2f} | "
                             f"{_ci(r['diff_ci'])} |")
        c = s["cost"]
        t, p = c["truncation"], c["passages"]
        lines += ["", "| side | vectors | build s (split + encode + BM25) | index MB (vectors + BM25) |",
                  "| --- | --- | --- | --- |",
                  f"| truncation | {t['rows']:,} | {t['build_s']:.1f} ({t['split_s']:.1f} + {t['encode_s']:.1f} + "
                  f"{t['lexical_s']:.1f}) | {t['index_bytes'] / 1e6:.2f} |",
                  f"| passages | {p['rows']:,} | {p['build_s']:.1f} ({p['split_s']:.1f} + {p['encode_s']:.1f} + "
                  f"{p['lexical_s']:.1f}) | {p['index_bytes'] / 1e6:.2f} |",
                  f"| ratio | | {c['build_ratio']:.2f}× | {c['size_ratio']:.2f}× |", ""]
    if "choice" in report:
        ch = report["choice"]
        shown = ("chosen", DEFAULT_HYBRID, "dense (passages)", "lexical (passage BM25)")
        lines += ["## Hybrid on passages: chosen on dev halves, reported on test halves", "",
                  "Dev-half nDCG@10 (mean of the sets): " + "; ".join(f"{c} {v:.2f}" for c, v in
                                                                     ch["dev_means"].items())
                  + f". Chosen: **{ch['chosen']}**.", "",
                  "| set (test half) | n | chosen | default | dense | lexical | chosen − default | chosen − dense | "
                  "chosen − lexical | default − lexical |", "|---|---|---|---|---|---|---|---|---|---|"]
        for r in ch["test"]:
            lines.append(f"| {r['set']} | {r['n']} | " + " | ".join(f"{r[ch['chosen'] if c == 'chosen' else c]:.2f}"
                                                                    for c in shown) + " | " +
                         " | ".join(_ci(r[f"chosen - {o}"]) for o in shown[1:]) +
                         f" | {_ci(r['default - lexical (passage BM25)'])} |")
    return "\n".join(lines) + "\n"


def _ci(v: list[float]) -> str:
    return f"{v[0]:+.2f} [{v[1]:+.2f}, {v[2]:+.2f}]"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--beir", type=Path, default=Path(os.environ.get("STRATA_DATA_DIR", "/work/shared/data")) / "beir")
    p.add_argument("--model", type=Path, required=True, help="an exported encoder (`encoder export`)")
    p.add_argument("--datasets", nargs="+", default=["scifact", "nfcorpus"])
    p.add_argument("--chunk", type=int, default=254)
    p.add_argument("--overlap", type=int, default=32)
    p.add_argument("--queries", type=int, default=None, help="subsample the original sets' queries")
    p.add_argument("--max-docs", type=int, default=None, help="subsample the original sets' corpora")
    p.add_argument("--long-queries", type=int, default=150)
    p.add_argument("--distractors", type=float, default=1.0, help="filler-only long documents per query")
    p.add_argument("--bootstrap", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "results")
    args = p.parse_args(argv)
    enc = OnnxEncoder(args.model, threads=args.threads)
    splitter = Splitter(enc.tokenizer, args.chunk, args.overlap, enc.meta.max_length)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%MZ")
    report: dict[str, object] = {
        "stamp": stamp, "command": "python bench/passages.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "encoder": f"{enc.meta.source} ({enc.meta.pooling}, max_length {enc.meta.max_length})",
        "chunk": args.chunk, "overlap": args.overlap, "bootstrap": args.bootstrap,
        "load": " ".join(f"{x:.1f}" for x in os.getloadavg()), "cpus": os.cpu_count(),
        "python": platform.python_version(), "sets": []}
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.datasets:
        full = load_dataset(args.beir / name)
        say(f"{name}: long-document benchmark")
        long_ds, positions = long_corpus(full, args.long_queries, args.seed, splitter, args.distractors)
        report["sets"].append(bench_set(long_ds, enc, splitter, args.bootstrap, positions))
        _write(report, args.out, stamp)
        say(f"{name}: original set")
        ds = subsample(full, args.queries, args.max_docs, args.seed)
        report["sets"].append(bench_set(ds, enc, splitter, args.bootstrap))
        _write(report, args.out, stamp)
    report["choice"] = choose(report["sets"], args.bootstrap, args.seed)
    report["load_end"] = " ".join(f"{x:.1f}" for x in os.getloadavg())
    _write(report, args.out, stamp)
    print(render(report))
    return 0


def _write(report: dict[str, object], out: Path, stamp: str) -> None:
    (out / f"passages-{stamp}.json").write_text(json.dumps(report, indent=1))
    (out / f"passages-{stamp}.md").write_text(render(report))


if __name__ == "__main__":
    raise SystemExit(main())
