"""`indexer` command line: build, eval, compare, verify and info for versioned FAISS indexes."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from indexer.calibrate import DEFAULT_TARGET_RECALL
from indexer.console import configure_logging, run_cli
from indexer.runtime.ann import AUTO, AUTO_FLAT_BELOW, KINDS, HnswParams
from indexer.runtime.faiss_index import CODECS, DEFAULT_NLIST, DEFAULT_NPROBE
from indexer.runtime.paths import (
    DEFAULT_MODEL_NAME,
    default_index_root,
    default_model_dir,
    default_quora_source,
)


def positive_int(value: str) -> int:
    n = int(value)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, not {n}")
    return n


def recall_target(value: str) -> float:
    """argparse type of `--target-recall`: `indexer.calibrate.check_target`'s range, as a usage error."""
    from indexer.calibrate import check_target

    r = float(value)  # not a number: argparse's own "invalid recall_target value"
    try:
        return check_target(r)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--target-recall ")) from None


# Errors that are the user's to fix: printed as one line, no traceback (bad runs and qrels, `indexer.runs` and
# `indexer.compare`, raise ValueErrors).
def _known_errors() -> tuple[type[BaseException], ...]:
    from indexer.evaluate import EvalError
    from indexer.quora import QuoraFormatError
    from indexer.runtime.encoder import EncoderLoadError
    from indexer.runtime.integrity import IntegrityError
    from indexer.runtime.layout import LayoutError
    from indexer.runtime.manifest import ManifestError
    from indexer.runtime.version import IndexLoadError

    return (EvalError, LayoutError, ManifestError, EncoderLoadError, QuoraFormatError, IndexLoadError, IntegrityError,
            FileNotFoundError, PermissionError, ValueError, OSError)


def _add(args: argparse.Namespace) -> int:
    from indexer.add import add_questions

    r = add_questions(args.root, args.add, model_dir=args.model, threads=args.threads, batch_size=args.batch_size,
                      keep=args.keep, rebuild_after=args.rebuild_after, run_eval=not args.no_eval)
    m = r.manifest
    print(f"added {r.added} questions ({r.replaced} replaced, {r.skipped_empty} empty skipped) to "
          f"{m.parent_version}: version {m.version} in {args.root}, {m.index.ntotal} vectors, quantizer not "
          f"retrained")
    if m.eval:
        print(f"MRR@10 {m.eval.mrr_at_10:.4f} (exact {m.eval.exact_mrr_at_10:.4f}) over {m.eval.n_queries} queries")
    if r.rebuild_due:
        print(f"full rebuild due: {r.drift:.0%} of the {m.index.trained_ntotal} vectors the quantizer was trained "
              f"on were added since (threshold {args.rebuild_after:.0%}); run `indexer build` without --add")
    else:
        print(f"no rebuild due yet: {r.drift:.0%} added since training (threshold {args.rebuild_after:.0%})")
    return 0


def _check_settings() -> None:
    """Environment settings a build reads at its end, checked before any work (a bad STRATA_MAX_SHRINK would
    otherwise be found only after the whole corpus was encoded)."""
    from indexer.runtime.guards import max_shrink

    max_shrink()


def _build(args: argparse.Namespace) -> int:
    from indexer.build import BuildConfig, build

    _check_settings()
    if (args.target_recall is not None or args.no_calibrate) and args.add is not None:
        raise ValueError("--target-recall and --no-calibrate apply to a full build; --add calibrates again by "
                         "itself when the current version was calibrated")
    if args.add is not None:
        return _add(args)
    cfg = BuildConfig(model_dir=args.model or default_model_dir(), data=args.data, root=args.root,
                      protocol=args.protocol, rows=args.rows, index=args.index, nlist=args.nlist,
                      nprobe=args.nprobe,
                      target_recall=args.target_recall, calibrate=not args.no_calibrate, probes=args.probes,
                      codec=args.codec, hnsw_m=args.hnsw_m,
                      ef_construction=args.ef_construction, ef_search=args.ef_search,
                      batch_size=args.batch_size, threads=args.threads, keep=args.keep, evaluate=not args.no_eval,
                      id_field=args.id_field, text_field=args.text_field, title_field=args.title_field,
                      metadata_fields=args.metadata_fields, queries=args.queries, qrels=args.qrels,
                      lexical=not args.no_lexical, lexical_stemmer=args.lexical_stemmer,
                      lexical_stopwords=args.lexical_stopwords, bm25_k1=args.bm25_k1, bm25_b=args.bm25_b,
                      default_mode=args.default_mode)
    if args.engine == "ray":
        from indexer.ray_build import RayOptions, build_on_ray, summary

        m = build_on_ray(cfg, RayOptions(address=args.ray_address, workers=args.workers, shards=args.shards,
                                         threads_per_worker=args.threads_per_worker,
                                         gpus_per_worker=args.gpus_per_worker, block_rows=args.block_rows,
                                         keep_vectors=args.keep_vectors))
        print(summary(m))
    else:
        m = build(cfg)
    knobs = ", ".join(f"{k} {v}" for k, v in m.index.params.model_dump().items() if k in ("nprobe", "ef_search"))
    print(f"built version {m.version} in {args.root}: {m.index.ntotal} vectors, {m.index.kind} index "
          f"({m.index.factory}{', ' + knobs if knobs else ', exact search'}), {m.build_seconds.total_s:.1f}s")
    if m.index.calibration is not None:
        kc = m.index.calibration
        print(f"{kc.knob} {kc.value} keeps {kc.recall_at_10:.4f} of the exact top 10 on {_probes_text(kc)} "
              f"(target {kc.target_recall}{'' if kc.reached else ', not reached'}; {kc.seconds:.1f}s)")
    lx = m.lexical
    print("lexical: none (dense only)" if lx is None else
          f"lexical: BM25 k1={lx.k1} b={lx.b} over {lx.n_docs} documents ({lx.vocabulary} terms; stemmer "
          f"{lx.stemmer}, stopwords {lx.stopwords}), {lx.seconds:.1f}s; default /search mode {m.search_mode()}")
    cal = m.index.nprobe_calibration
    if cal is not None:
        print(f"nprobe {cal.nprobe} of {m.index.nlist} lists keeps {cal.recall_at_10:.4f} of the exact top 10 on "
              f"{_probes_text(cal)} (target {cal.target_recall}"
              f"{'' if cal.reached else ', not reached: every list is probed'}; {cal.seconds:.1f}s)")
    probes = (cal or m.index.calibration).probes if (cal or m.index.calibration) else None
    if probes is not None and probes.sees_eval_queries:
        print("note: calibrated on the evaluation queries' text (not their qrels): the figures below are measured "
              "at a setting chosen on those queries; --probes spans keeps them unseen")
    d = m.data
    if d.format is not None:
        rate = d.rows_read / max(m.build_seconds.load_s + m.build_seconds.encode_docs_s, 1e-9)
        print(f"{d.format}: {d.rows_read} rows read ({rate:.0f} rows/s with encoding), {d.n_docs} documents, "
              f"{d.skipped_empty_texts} empty texts skipped, {d.duplicate_ids} duplicate ids (last row won)")
        schema = ", ".join(f"{k}: {v}" for k, v in d.metadata_schema.items()) or "none"
        print(f"metadata: {schema}")
    if m.eval and m.eval.ndcg_at_10 is not None:
        e = m.eval
        print(f"MRR@10 {e.mrr_at_10:.4f} nDCG@10 {e.ndcg_at_10:.4f} Recall@10 {e.recall_at_10:.4f} Recall@100 "
              f"{e.recall_at_100:.4f} (exact search: {e.exact_mrr_at_10:.4f} {e.exact_ndcg_at_10:.4f} "
              f"{e.exact_recall_at_10:.4f} {e.exact_recall_at_100:.4f}) over {e.n_queries} queries")
        if e.ndcg_at_10_vs_exact is not None:
            print(f"index vs exact search: nDCG@10 {e.ndcg_at_10_vs_exact * 100:+.2f} points, top-10 overlap "
                  f"{e.ann_recall_at_10:.4f}")
    elif m.eval:
        print(f"MRR@10 {m.eval.mrr_at_10:.4f} (exact {m.eval.exact_mrr_at_10:.4f}) over {m.eval.n_queries} "
              f"queries")
    if len(m.eval_modes) > 1:
        from indexer.eval_modes import format_modes

        print("by /search mode:\n" + format_modes(m.eval_modes))
    return 0


def _compact(args: argparse.Namespace) -> int:
    from indexer.compact import compact

    _check_settings()
    r = compact(args.root, model_dir=args.model, threads=args.threads, keep=args.keep, run_eval=not args.no_eval,
                rebuild_after=args.rebuild_after)
    m = r.manifest
    if m is None:
        print(f"nothing to fold: version {r.parent} holds every write in {args.root}'s log"
              + (f" (up to seq {r.last_seq})" if r.last_seq else " (no writes logged)"))
        return 0
    print(f"folded {r.entries} write log entries (seq {r.first_seq}..{r.last_seq}: {r.upserted} documents written, "
          f"{r.created} of them new, {r.deleted} deleted) into {r.parent}: version {m.version} in {args.root}, "
          f"{m.index.ntotal} vectors")
    if m.eval:
        print(f"MRR@10 {m.eval.mrr_at_10:.4f} (exact {m.eval.exact_mrr_at_10:.4f}) over {m.eval.n_queries} queries")
    if r.rebuild_due:
        print(f"full rebuild due: {r.drift:.0%} of the {m.index.trained_ntotal} vectors the quantizer was trained "
              f"on were added since (threshold {args.rebuild_after:.0%})")
    return 0


def _probes_text(cal) -> str:  # noqa: ANN001 (NprobeCalibration | KnobCalibration)
    if cal.probes is None:
        return f"{cal.sample_queries} sampled documents"
    return f"{cal.probes.n_probes} {cal.probes.source.replace('_', ' ')} ({cal.probes.detail})"


def _knobs_text(e) -> str:  # noqa: ANN001 (EvalFigures)
    if e.index_kind is None or e.index_kind == "ivf":
        return f"nprobe {e.nprobe}"
    return " ".join([e.index_kind, *(f"{k} {v}" for k, v in e.search_params.items())]) + \
        (" (exact)" if e.index_kind == "flat" else "")


def _table(e) -> str:  # noqa: ANN001 (EvalFigures)
    rows = [
        ("MRR@10", f"{e.mrr_at_10 * 100:.2f}"),
        ("avg retrieval time (ms/query)", f"{e.avg_retrieval_ms:.4f}  (batch {e.batch_size}, {e.threads} "
                                          f"thread(s), {_knobs_text(e)})"),
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


def _eval(args: argparse.Namespace) -> int:
    from indexer.eval_modes import evaluate_modes, evaluate_modes_on_files, format_modes, parse_modes
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
    knobs = {"ef_search": args.ef_search}
    runs = None
    if args.run_out is not None:
        from indexer.runs import RunCollector

        runs = RunCollector()
    written = {}
    try:
        modes = parse_modes(args.modes, version)
        if args.queries is not None:
            from indexer.corpus import query_files
            from indexer.runtime.encoder import OnnxEncoder

            queries, qrels = query_files(args.queries, args.qrels, args.split)
            encoder = OnnxEncoder(args.model or Path(version.manifest.model.dir), threads=args.threads,
                                  verify_sha256=True) if modes != ["lexical"] else None  # BM25 encodes nothing
            by_mode, _ = evaluate_modes_on_files(version, queries, qrels, encoder, modes, fusion=fusion,
                                                 nprobe=args.nprobe, batch_size=args.batch_size,
                                                 threads=args.threads, exact_budget=budget, search_params=knobs,
                                                 runs=runs)
        elif args.qrels is not None:
            raise ValueError("--qrels goes with --queries")
        else:
            by_mode = evaluate_modes(version, modes, fusion=fusion, nprobe=args.nprobe, batch_size=args.batch_size,
                                     threads=args.threads, exact_budget=budget, search_params=knobs, runs=runs)
        if runs is not None:
            from indexer.runs import write_runs

            written = write_runs(runs, args.run_out,
                                 lambda ids: {i: str(d.ext_id) for i, d in version.store.documents(ids).items()})
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
    manifest.save(folder)
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
    return 0


def _compare(args: argparse.Namespace) -> int:
    from indexer.compare import compare_runs, format_comparison
    from indexer.corpus import read_qrels
    from indexer.runs import read_run

    if args.resamples < 100:
        raise ValueError(f"--resamples must be at least 100, got {args.resamples}")
    qrels = read_qrels(args.qrels)
    comparison = compare_runs(read_run(args.run_a), read_run(args.run_b), qrels, resamples=args.resamples,
                              seed=args.seed)
    if args.json:
        print(json.dumps({"run_a": str(args.run_a), "run_b": str(args.run_b), "qrels": str(args.qrels)}
                         | comparison.as_dict()))
    else:
        print(format_comparison(comparison, str(args.run_a), str(args.run_b)))
    return 0


def _tune(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from indexer.runtime.atomic import write_json_atomic
    from indexer.runtime.layout import IndexRoot
    from indexer.runtime.version import IndexVersion
    from indexer.tune import format_table, pareto, sweep

    root = IndexRoot(args.root)
    version = IndexVersion(root.version_dir(args.version) if args.version else root.current_dir())
    try:
        grid = None
        if args.factories:
            from indexer.tune import search_params

            grid = [search_params(f, version.ntotal) for f in args.factories]
        rows = pareto(list(sweep(version, grid, max_queries=args.queries, threads=args.threads or 1)))
    finally:
        version.close()
    print(f"version {version.version}: {version.ntotal} documents, {min(args.queries, version.manifest.data.n_queries)}"
          f" queries, single-query search with {args.threads or 1} FAISS thread(s); * = Pareto front")
    print(format_table(rows))
    if args.out:
        write_json_atomic(args.out, {"version": version.version, "rows": [asdict(r) for r in rows]})
        print(f"wrote {args.out}")
    return 0


def _rollback(args: argparse.Namespace) -> int:
    from indexer.runtime.integrity import verify_folder
    from indexer.runtime.layout import IndexRoot, LayoutError
    from indexer.runtime.version import IndexVersion

    root = IndexRoot(args.root)
    with root.build_lock():  # never race a build's own flip of `current`
        current = root.current_version()
        target = args.version or root.previous_version()
        if target is None:
            raise LayoutError(f"{root.root} has no version older than {current} to roll back to")
        if not root.version_dir(target).is_dir():
            raise LayoutError(f"no version {target} under {root.versions_dir} (see `indexer info`)")
        verify_folder(root.version_dir(target))  # refuse a damaged version (IntegrityError names the file)
        IndexVersion(root.version_dir(target)).close()  # and one that would not load
        root.set_current(target)
    print(f"current: {current} -> {target} (a running API picks it up: watch, SIGHUP or POST /admin/reload)")
    return 0


def _verify(args: argparse.Namespace) -> int:
    import time

    from indexer.runtime.integrity import IntegrityError, verify_folder
    from indexer.runtime.layout import IndexRoot, LayoutError

    root = IndexRoot(args.root)
    folder = root.version_dir(args.version) if args.version else root.current_dir()
    if not folder.is_dir():
        raise LayoutError(f"no version {args.version} under {root.versions_dir} (see `indexer info`)")
    t0 = time.perf_counter()
    try:
        v = verify_folder(folder)
    except IntegrityError as exc:
        print(f"indexer verify: DAMAGED: {exc}", file=sys.stderr)
        return 1
    seconds = time.perf_counter() - t0
    if not v.checked:
        print(f"{folder.name}: no checksums in its manifest (written before they were recorded): not verified; "
              f"`indexer compact` or a rebuild writes a version with them")
        return 3
    print(f"{folder.name}: OK, {v.files} files, {v.bytes / 2**20:,.1f} MiB match their checksums ({seconds:.2f}s, "
          f"{v.bytes / 2**20 / max(seconds, 1e-9):,.0f} MiB/s)")
    for rel in v.unrecorded:
        print(f"  note: {rel} is not in the manifest's checksums (added after the version was written; not checked)")
    return 0


def _info(args: argparse.Namespace) -> int:
    from indexer.runtime.layout import IndexRoot
    from indexer.runtime.manifest import Manifest, ManifestError

    root = IndexRoot(args.root)
    versions = root.versions()
    current = root.current_version()
    if args.json:
        out = {"root": str(root.root), "current": current, "versions": versions}
        if current:
            out["manifest"] = Manifest.load(root.current_dir()).model_dump(mode="json")
        print(json.dumps(out, indent=2))
        return 0
    print(f"root: {root.root}")
    if not versions:
        print("no versions yet (run `indexer build`)")
        return 0
    for v in versions:
        try:
            m = Manifest.load(root.version_dir(v))
            desc = (f"{m.index.ntotal} vectors, {m.index.factory}, {m.model.pooling}, {m.data.protocol}"
                    + (f", MRR@10 {m.eval.mrr_at_10:.4f}" if m.eval else "")
                    + (", no lexical index" if m.lexical is None else f", BM25 ({m.lexical.stemmer})")
                    + f", /search mode {m.search_mode()}")
        except ManifestError as exc:
            desc = f"unreadable: {exc}"
        print(f"{'*' if v == current else ' '} {v}  {desc}")
    from indexer.runtime.writelog import open_log

    wlog = open_log(root.root, create=False)
    if wlog is not None:
        try:
            counts, last = wlog.counts(), wlog.last_seq()
        finally:
            wlog.close()
        w = Manifest.load(root.current_dir()).writes if current else None
        folded = w.folded_seq if w is not None else 0
        print(f"write log: {counts['upsert']} upserts, {counts['delete']} deletes (last seq {last}); the current "
              f"version holds up to seq {folded}" + ("" if last <= folded else ": `indexer compact` folds the rest"))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="indexer", description="Build, evaluate and inspect Strata indexes.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)

    def root_arg(p: argparse.ArgumentParser) -> None:
        p.add_argument("--root", type=Path, default=default_index_root(),
                       help="index root holding versions/ and current (default: $STRATA_HOME/indexes/quora)")

    def threads_arg(p: argparse.ArgumentParser) -> None:
        p.add_argument("--threads", type=int, default=None, help="ONNX Runtime / FAISS threads (default: cores)")

    b = sub.add_parser("build", help="embed a corpus (Quora TSV, JSONL, CSV/TSV, Parquet, BEIR) into a new version",
                       description="Embed a corpus with an exported ONNX encoder into a FAISS IVF index; write a new "
                       "version atomically, evaluate it, then switch `current` to it.")
    root_arg(b)
    b.add_argument("--model", type=Path, default=None,
                   help=f"exported encoder folder (default: $STRATA_HOME/models/{DEFAULT_MODEL_NAME}; with --add: "
                   "the encoder the current version was built with)")
    b.add_argument("--data", default=default_quora_source(),
                   help="the corpus: quora_duplicate_questions.tsv[.gz] (or its URL); a .jsonl, .csv or .tsv file "
                   "with a header, .parquet file or folder, or a BEIR folder (corpus.jsonl, queries.jsonl, "
                   "qrels/test.tsv); .gz works for text files (default: the local Quora copy under "
                   "$STRATA_DATA_DIR if any, else the official URL)")
    b.add_argument("--protocol", choices=["paper", "full", "heldout"], default=None,
                   help="Quora TSV only. paper (default): first 100k rows, question2 corpus, question1 queries; "
                   "full: every question; heldout: every question of the held-out rows (id >= 300,000), which "
                   "nothing trains or tunes on")
    b.add_argument("--rows", type=int, default=None, help="read only the first N data rows (heldout: the first N "
                   "held-out rows)")
    c = b.add_argument_group("your own corpus (any --data but the Quora TSV)")
    c.add_argument("--id-field", default=None, help="field holding the document id, a string or an integer "
                   "(default: id; BEIR: _id)")
    c.add_argument("--text-field", default=None, help="field holding the text (default: text)")
    c.add_argument("--title-field", default=None,
                   help="field holding a title, encoded as BEIR does: (title + ' ' + text).strip() (default: none; "
                   "BEIR: title)")
    c.add_argument("--metadata-fields", type=lambda v: [f.strip() for f in v.split(",") if f.strip()],
                   default=None, metavar="F1,F2",
                   help="fields kept as metadata, comma-separated ('' for none; default: every field other than "
                   "the id and text)")
    c.add_argument("--queries", type=Path, default=None,
                   help="evaluation queries (JSONL with _id/id and text) to store and evaluate with --qrels "
                   "(a BEIR folder's queries.jsonl is found by itself)")
    c.add_argument("--qrels", type=Path, default=None,
                   help="relevance judgments for --queries: query-id<TAB>corpus-id<TAB>score (BEIR: qrels/test.tsv)")
    b.add_argument("--index", choices=[AUTO, *KINDS], default=AUTO,
                   help=f"the vector index: flat (exact search), ivf (inverted lists, --nlist/--nprobe/--codec), "
                   f"hnsw (a graph, --hnsw-m/--ef-search), or auto (default): flat below {AUTO_FLAT_BELOW:,} "
                   f"documents, where exact search is as fast as IVF at 0.97 of exact's top 10 "
                   f"(bench/index_crossover.py), ivf from there on, and ivf whenever --nlist, --nprobe or --codec "
                   f"is given. --engine ray builds ivf only")
    b.add_argument("--nlist", type=positive_int, default=None,
                   help=f"IVF lists (default {DEFAULT_NLIST}, scaled down for small corpora; also the paper's)")
    b.add_argument("--hnsw-m", type=positive_int, default=HnswParams.model_fields["m"].default,
                   help="HNSW: graph neighbours per node (FAISS's M; default %(default)s)")
    b.add_argument("--ef-construction", type=positive_int,
                   default=HnswParams.model_fields["ef_construction"].default,
                   help="HNSW: candidates kept while building (default %(default)s)")
    b.add_argument("--ef-search", type=positive_int, default=None,
                   help="HNSW: candidates kept per query, taken as given (no calibration); default: calibrated "
                        f"(see --target-recall; {HnswParams.model_fields['ef_search'].default} with --no-calibrate)")
    probe = b.add_mutually_exclusive_group()
    probe.add_argument("--nprobe", type=positive_int, default=None,
                       help="IVF lists probed per query, taken as given (no calibration); default: calibrated "
                            "(see --target-recall)")
    probe.add_argument("--target-recall", type=recall_target, default=None, metavar="R",
                       help=f"share of exact search's top 10 that an ivf/hnsw index must keep (default "
                            f"{DEFAULT_TARGET_RECALL}): every such build chooses the fewest IVF lists (the smallest "
                            "HNSW ef_search) reaching it on up to 1,000 query-like probes (see --probes; label-free; "
                            "recorded in the manifest, met again by --add and compact). The encoder and corpus "
                            "decide how many lists a query needs: a fixed nprobe 20 keeps 0.90-0.94 on Quora")
    probe.add_argument("--no-calibrate", action="store_true",
                       help=f"keep fixed search parameters (nprobe {DEFAULT_NPROBE}, ef_search "
                            f"{HnswParams.model_fields['ef_search'].default}, or those given): reproduces builds "
                            "from before calibration was the default")
    b.add_argument("--probes", choices=["auto", "queries", "spans"], default="auto",
                   help="what calibration searches with. auto (default): the dataset's queries that its qrels do "
                        "not judge (BEIR's train/dev queries; Quora's question1s without a duplicate), else the "
                        "evaluation queries' text (their qrels are never read, but the nDCG reported for them is "
                        "then measured at a setting chosen on them: the build says so), else 5-15 word spans of "
                        "sampled documents. queries: fail without queries. spans: document spans always, to keep "
                        "the evaluation queries unseen. The source is recorded in the manifest")
    b.add_argument("--codec", choices=list(CODECS), default=None,
                   help="how the IVF lists store vectors: SQfp16 (default; half the memory of Flat and faster to "
                        "scan; exact-search MRR@10 within 0.02) or Flat (float32, the paper's)")
    b.add_argument("--batch-size", type=int, default=None,
                   help="texts per ONNX run when encoding (default: 16 on CPU, 64 on a GPU)")
    threads_arg(b)
    b.add_argument("--keep", type=int, default=5, help="versions to keep, the current one included")
    lx = b.add_argument_group("lexical (BM25) index, built beside the vectors in the same version")
    lx.add_argument("--no-lexical", action="store_true", help="build no lexical index (/search serves dense only)")
    lx.add_argument("--lexical-stemmer", default="english", metavar="LANG",
                    help="Snowball stemmer language (PyStemmer), or none (default: english)")
    lx.add_argument("--lexical-stopwords", default="english", choices=["english", "none"],
                    help="stopword list dropped before stemming (default: english, Lucene's)")
    lx.add_argument("--bm25-k1", type=float, default=0.9, help="BM25 k1 (default 0.9, Anserini's BEIR setting)")
    lx.add_argument("--bm25-b", type=float, default=0.4, help="BM25 b (default 0.4, Anserini's BEIR setting)")
    lx.add_argument("--default-mode", choices=["dense", "lexical", "hybrid"], default=None,
                    help="/search's mode when a request names none, recorded in the manifest (default: hybrid "
                    "with a lexical index, else dense)")
    b.add_argument("--no-eval", action="store_true", help="skip the MRR@10 evaluation")
    b.add_argument("--add", type=Path, default=None, metavar="FILE",
                   help="add the questions of FILE (TSV 'id<TAB>question', or Quora pairs) to the current version "
                   "as a new version, without retraining the coarse quantizer")
    b.add_argument("--rebuild-after", type=float, default=0.2, metavar="RATIO",
                   help="with --add: report a full rebuild as due once more than RATIO x the vectors the "
                   "quantizer was trained on were added since (default 0.2)")
    g = b.add_argument_group("distributed build (--engine ray)")
    g.add_argument("--engine", choices=["local", "ray"], default="local",
                   help="local (default): this process; ray: encode with a Ray Data actor pool, fill shards as "
                   "Ray tasks")
    g.add_argument("--ray-address", default=None,
                   help="Ray cluster to join (default: $RAY_ADDRESS, else a local instance sized to this machine)")
    g.add_argument("--workers", type=int, default=None, help="encoding actors (default: cluster CPUs / threads)")
    g.add_argument("--threads-per-worker", type=int, default=1, help="ONNX Runtime threads (CPUs) per actor")
    g.add_argument("--gpus-per-worker", type=float, default=0.0, help="GPUs per actor (CUDA provider)")
    g.add_argument("--shards", type=int, default=1,
                   help="1: one merged index.faiss; N > 1: N shard files sharing one quantizer (for sharded serving)")
    g.add_argument("--block-rows", type=int, default=1024, help="rows per Ray Data block and actor call")
    g.add_argument("--keep-vectors", action="store_true", help="keep the vectors/*.parquet files in the version")
    b.set_defaults(func=_build)

    r = sub.add_parser("rollback", help="point `current` back at an earlier version",
                       description="Switch `current` (atomically) to VERSION, or to the newest version older "
                       "than the current one; the version must load. Keep versions with `build --keep N`.")
    root_arg(r)
    r.add_argument("version", nargs="?", default=None, help="version to serve (default: the previous one)")
    r.set_defaults(func=_rollback)

    e = sub.add_parser("eval", help="MRR@10, Recall@10, exact MRR@10, ms/query and memory of a version",
                       description="Evaluate a version on its stored queries (prints the paper's Table 3 row), or "
                       "with --queries/--qrels on your own, for every /search mode it serves (dense, lexical, hybrid; "
                       "--modes to choose; docs/evaluation.md); stores the figures in its manifest.")
    root_arg(e)
    e.add_argument("--version", help="version to evaluate (default: current)")
    e.add_argument("--nprobe", type=int, default=None, help="IVF: override nprobe (default: the manifest's)")
    e.add_argument("--ef-search", type=int, default=None, help="HNSW: override ef_search (default: the manifest's)")
    e.add_argument("--batch-size", type=int, default=1, help="queries per search call when timing (default 1)")
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
    e.set_defaults(func=_eval)

    cmp = sub.add_parser("compare", help="nDCG@10, MRR@10 and R@100 of two TREC runs, with paired bootstrap CIs",
                         description="Score two TREC run files (e.g. from `indexer eval --run-out`) on the same "
                         "qrels with trec_eval's measures (ir_measures): nDCG@10, MRR@10 and R@100 of each, the "
                         "difference B − A with its paired bootstrap 95%% confidence interval (queries resampled) and "
                         "a paired permutation test's two-sided p. Queries with a relevant judgment are compared; "
                         "one a run has no results for scores 0 there. Figures are printed × 100.")
    cmp.add_argument("run_a", type=Path, metavar="RUN_A", help="the baseline run (qid Q0 docid rank score tag)")
    cmp.add_argument("run_b", type=Path, metavar="RUN_B", help="the run compared with it")
    cmp.add_argument("--qrels", type=Path, required=True,
                     help="judgments: query-id<TAB>corpus-id<TAB>score (BEIR, header optional) or TREC's "
                     "'query-id 0 doc-id grade'")
    cmp.add_argument("--resamples", type=int, default=10_000,
                     help="bootstrap and permutation resamples (default 10000)")
    cmp.add_argument("--seed", type=int, default=0, help="seed of both resamplings (default 0)")
    cmp.add_argument("--json", action="store_true", help="print one JSON object (fractions, not × 100)")
    cmp.set_defaults(func=_compare)

    t = sub.add_parser("tune", help="sweep index types, nlist, nprobe/efSearch on a version's own vectors",
                       description="Build IVF-Flat (nlist 256..4096), IVF-SQ8, IVF-PQ and HNSW indexes from a "
                       "version's stored vectors and report MRR@10, Recall@10 vs exact, ms/query and memory for "
                       "each search setting, marking the Pareto front. Does not change the version.")
    root_arg(t)
    t.add_argument("--version", help="version to tune on (default: current)")
    t.add_argument("--queries", type=int, default=5000, help="evaluation queries sampled (default 5000)")
    t.add_argument("--threads", type=int, default=1, help="FAISS threads while timing (default 1)")
    t.add_argument("--out", type=Path, default=None, help="also write the rows as JSON")
    t.add_argument("--factories", nargs="+", metavar="FACTORY",
                   help='only these faiss.index_factory strings, e.g. "IVF1024,Flat" "HNSW32,Flat" (default: the '
                   "full grid)")
    t.set_defaults(func=_tune)

    c = sub.add_parser("compact", help="fold the write log (PUT /documents, POST /documents/delete) into a new "
                       "version", description="Write a new version holding the current version plus the write log's "
                       "entries it does not hold yet (the IVF quantizer is reused, as with --add); publish it like a "
                       "build. Nothing to fold: no new version, exit 0. The log is kept whole.")
    root_arg(c)
    c.add_argument("--model", type=Path, default=None,
                   help="encoder for log entries written with another encoder (default: the version's)")
    threads_arg(c)
    c.add_argument("--keep", type=int, default=5, help="versions to keep, the current one included")
    c.add_argument("--no-eval", action="store_true", help="skip the MRR@10 evaluation")
    c.add_argument("--rebuild-after", type=float, default=0.2, metavar="RATIO",
                   help="report a full rebuild as due past RATIO x the vectors the quantizer was trained on")
    c.set_defaults(func=_compact)

    v = sub.add_parser("verify", help="check a version's files against the checksums in its manifest",
                       description="Hash every file the version's manifest records and compare sizes and digests "
                       "(what the API does before serving a version). Exit 0: every file matches; 1: a file is "
                       "damaged or missing (named); 2: no such version or an unreadable manifest; 3: the manifest "
                       "predates checksums (nothing to check).")
    root_arg(v)
    v.add_argument("--version", help="version to check (default: current)")
    v.set_defaults(func=_verify)

    i = sub.add_parser("info", help="list versions and show the current manifest")
    root_arg(i)
    i.add_argument("--json", action="store_true", help="print JSON")
    i.set_defaults(func=_info)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.verbose)
    return run_cli(lambda: int(args.func(args)), _known_errors(), f"indexer {args.command}")


if __name__ == "__main__":
    sys.exit(main())
