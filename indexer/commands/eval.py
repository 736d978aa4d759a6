"""`indexer eval`: evaluate a version on its stored queries or on given queries + qrels, store the figures in its
manifest, print them (the paper's Table 3 row) and optionally write the rankings as TREC runs."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from indexer.commands.common import positive_int, root_arg, threads_arg
from indexer.runtime.ann import KIND_SPECS, KNOBS

if TYPE_CHECKING:
    from collections.abc import Iterable

    from indexer.runs import RunCollector
    from indexer.runtime.manifest import EvalFigures, Manifest
    from indexer.runtime.version import IndexVersion


def add_parser(sub: argparse._SubParsersAction) -> None:
    """`indexer eval` and its arguments (in --help order)."""
    e = sub.add_parser("eval", help="MRR@10, Recall@10, exact MRR@10, ms/query and memory of a version",
                       description="Evaluate a version on its stored queries (prints the paper's Table 3 row), or "
                       "with --queries/--qrels on your own, for every /search mode it serves (dense, lexical, hybrid; "
                       "--modes to choose; docs/evaluation.md); stores the figures in its manifest.")
    root_arg(e)
    e.add_argument("--version", help="version to evaluate (default: current)")
    for knob in KNOBS:  # each index kind's search knob (`ann.KIND_SPECS`): --nprobe, --ef-search, ...
        kinds = "/".join(k.upper() for k, spec in KIND_SPECS.items() if spec.knob is knob)
        e.add_argument(knob.flag, type=int, default=None, help=f"{kinds}: override {knob.name} (default: the "
                       "manifest's)")
    e.add_argument("--batch-size", type=positive_int, default=1, help="queries per search call when timing (default 1)")
    threads_arg(e)
    e.add_argument("--exact-all", action="store_true",
                   help="search every query exactly (default: a seeded sample once queries × documents pass 1e10, "
                        "about a minute on 2 cores)")
    e.add_argument("--json", action="store_true", help="print one JSON object")
    e.add_argument("--queries", type=Path, default=None, metavar="FILE|BEIR_DIR",
                   help="your own queries (JSONL with _id/id and text, or TSV id<TAB>text), or a BEIR folder: "
                   "reports MRR@10, nDCG@10, Recall@10 and Recall@100 of the index and of exact search")
    e.add_argument("--qrels", type=Path, default=None,
                   help="judgments for --queries: query-id<TAB>corpus-id<TAB>score (header optional; score > 0 is "
                   "relevant and nDCG uses it as the gain)")
    e.add_argument("--split", default="test", help="with a BEIR folder: the qrels/<split>.tsv to use (default test)")
    e.add_argument("--model", type=Path, default=None,
                   help="with --queries: the encoder (default: the one the version was built with)")
    e.add_argument("--run-out", type=Path, default=None, metavar="FILE",
                   help="also write what was evaluated as TREC runs ('qid Q0 docid rank score tag', the qrels' ids; "
                   "corpus evaluations to depth 100, the Quora protocol its top 10): the index's ranking to FILE, "
                   "exact search's to FILE.exact (when it covered every query); with several search modes, "
                   "FILE.{mode} and FILE.{mode}.exact. The Quora protocol's judgments go to FILE.qrels. Compare "
                   "two runs with `indexer compare`")
    e.add_argument("--modes", default=None, metavar="MODE[,MODE]",
                   help="the /search modes to evaluate, comma-separated: dense, lexical, hybrid (default: every mode "
                   "the version serves); lexical alone needs no encoder")
    e.add_argument("--fusion", choices=("convex", "rrf"), default="convex",
                   help="hybrid: how the dense and BM25 top 100 are fused, as /search's `fusion` (default convex)")
    e.add_argument("--alpha", type=float, default=0.5, help="hybrid convex: the dense list's weight (default 0.5)")
    e.add_argument("--rrf-k", type=float, default=60.0, help="hybrid rrf: the rank constant k (default 60)")
    e.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from indexer.eval_modes import evaluate_modes, evaluate_modes_on_files, parse_modes
    from indexer.evaluate import EXACT_PAIRS_BUDGET
    from indexer.runtime.fusion import Fusion
    from indexer.runtime.layout import IndexRoot
    from indexer.runtime.version import IndexVersion

    root = IndexRoot(args.root)
    folder = root.version_dir(args.version) if args.version else root.current_dir()
    version = IndexVersion(folder)
    budget = None if args.exact_all else EXACT_PAIRS_BUDGET
    if not 0.0 <= args.alpha <= 1.0 or args.rrf_k <= 0:
        raise ValueError(f"--alpha must be in [0, 1] and --rrf-k > 0 (got {args.alpha}, {args.rrf_k})")
    fusion = Fusion(kind=args.fusion, alpha=args.alpha, k=args.rrf_k)
    search_params = {k.name: getattr(args, k.name) for k in KNOBS}
    runs = None
    if args.run_out is not None:
        from indexer.runs import RunCollector

        runs = RunCollector()
    written = {}
    try:
        modes = parse_modes(args.modes, version)
        if args.queries is not None:
            from indexer.eval_files import query_files
            from indexer.runtime.encoder import OnnxEncoder

            queries, qrels = query_files(args.queries, args.qrels, args.split)
            encoder = OnnxEncoder(args.model or Path(version.manifest.model.dir), threads=args.threads,
                                  verify_sha256=True) if modes != ["lexical"] else None  # BM25 encodes nothing
            by_mode, _ = evaluate_modes_on_files(version, queries, qrels, encoder, modes, fusion=fusion,
                                                 nprobe=args.nprobe, batch_size=args.batch_size,
                                                 threads=args.threads, exact_budget=budget, search_params=search_params,
                                                 runs=runs)
        elif args.qrels is not None:
            raise ValueError("--qrels goes with --queries")
        else:
            by_mode = evaluate_modes(version, modes, fusion=fusion, nprobe=args.nprobe, batch_size=args.batch_size,
                                     threads=args.threads, exact_budget=budget, search_params=search_params, runs=runs)
        if runs is not None:
            from indexer.runs import write_runs
            written = write_runs(runs, args.run_out, lambda ids: _names(version, ids))
    finally:
        version.close()
    figures = by_mode.get("dense") or next(iter(by_mode.values()))
    manifest = version.manifest
    if args.queries is not None:
        manifest.query_eval_modes[figures.query_set] = manifest.query_eval_modes.get(figures.query_set, {}) | by_mode
        if "dense" in by_mode:
            manifest.query_evals[figures.query_set] = figures  # the version's own `eval` stays what gates swaps
    else:
        manifest.eval_modes = manifest.eval_modes | by_mode
        if "dense" in by_mode:
            manifest.eval = figures
        _report_measured(manifest)
    manifest.save(folder)
    _print(args, figures, by_mode, manifest, runs, written)
    return 0


def _report_measured(manifest: Manifest) -> None:
    """A build's report that did not finish (`indexer.report`), now measured by this evaluation: done."""
    r = manifest.report
    if r is not None and r.state != "done" and set(r.modes) <= set(manifest.eval_modes):
        now = datetime.now(timezone.utc)
        manifest.report = r.model_copy(update={"state": "done", "error": None, "finished_at": now})


def _print(args: argparse.Namespace, figures: EvalFigures, by_mode: dict[str, EvalFigures], manifest: Manifest,
           runs: RunCollector | None, written: dict) -> None:
    """The figures (a table per mode, or one JSON object with --json) and the run files written."""
    from indexer.eval_modes import format_modes

    if args.json:
        keys = ("mrr_at_10", "recall_at_10", "exact_mrr_at_10", "avg_retrieval_ms", "memory_gb", "n_queries",
                "n_docs", "ann_recall_at_10", "exact_n_queries", "mrr_at_10_on_exact_sample", "batch_size",
                "threads", "nprobe", "ndcg_at_10", "recall_at_100", "exact_ndcg_at_10", "exact_recall_at_10",
                "exact_recall_at_100", "query_set", "index_kind", "search_params", "ndcg_at_10_vs_exact", "mode",
                "fusion")
        out = {k: getattr(figures, k) for k in keys} | {"version": manifest.version}
        out["modes"] = {m: {k: getattr(f, k) for k in keys} for m, f in by_mode.items()}
        if runs is not None:
            out["runs"] = {f"{k.mode}{'.exact' if k.exact else ''}": str(p) for k, p in written.items()}
        print(json.dumps(out))
    else:
        print(f"version {manifest.version} ({manifest.index.factory}, {manifest.model.pooling} pooling, "
              f"{manifest.data.protocol} {'data' if manifest.data.protocol == 'corpus' else 'protocol'})")
        if "dense" in by_mode:
            print(_table(by_mode["dense"]))
        print(format_modes(by_mode))
    if runs is not None:
        out_stream = sys.stderr if args.json else sys.stdout
        for key, path in written.items():
            print(f"wrote run {path} ({key.label}, {len(runs.rankings[key].rows)} queries, tag {key.tag})",
                  file=out_stream)
        if runs.qrels is not None and written:
            print(f"wrote qrels {args.run_out}.qrels (the Quora protocol's judgments)", file=out_stream)
        for note in runs.notes:
            print(f"note: {note}", file=out_stream)


def _search_params_text(e) -> str:  # noqa: ANN001 (EvalFigures)
    if e.index_kind is None:  # a lexical run
        return f"nprobe {e.nprobe}"
    return KIND_SPECS[e.index_kind].describe(e.search_params)


def _table(e) -> str:  # noqa: ANN001 (EvalFigures)
    rows = [
        ("MRR@10", f"{e.mrr_at_10 * 100:.2f}"),
        ("avg retrieval time (ms/query)", f"{e.avg_retrieval_ms:.4f}  (batch {e.batch_size}, {e.threads} "
                                          f"thread(s), {_search_params_text(e)})"),
        ("index memory (GB)", f"{e.memory_gb:.4f}"),
        ("Recall@10", f"{e.recall_at_10 * 100:.2f}"),
        ("exact search MRR@10", f"{e.exact_mrr_at_10 * 100:.2f}"),
        ("top-10 overlap with exact search", f"{e.ann_recall_at_10 * 100:.2f}"),
        ("queries / documents", f"{e.n_queries} / {e.n_docs}"),
    ]
    if e.ndcg_at_10 is not None:  # graded judgments (a corpus's queries and qrels): each figure, then exact search's
        rows[4:4] = [("nDCG@10", f"{e.ndcg_at_10 * 100:.2f}"), ("Recall@100", f"{e.recall_at_100 * 100:.2f}")]
        if e.ndcg_at_10_vs_exact is not None:
            rows.append(("index vs exact nDCG@10", f"{e.ndcg_at_10_vs_exact * 100:+.2f}"))
        rows[7:7] = [("exact search nDCG@10", f"{e.exact_ndcg_at_10 * 100:.2f}"),
                     ("exact search Recall@10", f"{e.exact_recall_at_10 * 100:.2f}"),
                     ("exact search Recall@100", f"{e.exact_recall_at_100 * 100:.2f}")]
    if e.query_set is not None:
        rows.append(("queries + qrels", e.query_set))
    if e.exact_n_queries is not None:
        rows.insert(4, ("exact search measured on", f"a seeded sample of {e.exact_n_queries} queries (the index's "
                                                     f"MRR@10 there: {e.mrr_at_10_on_exact_sample * 100:.2f}; "
                                                     f"--exact-all for every query)"))
    width = max(len(r[0]) for r in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def _names(version: IndexVersion, ids: Iterable[int]) -> dict[int, str]:
    """Run files name documents: a version of passages ranks each by its passage 0's id (`indexer.doc_ranks`)."""
    from indexer.runtime.passages import document_of

    return {i: str(document_of(d.ext_id)) for i, d in version.store.documents(ids).items()}
