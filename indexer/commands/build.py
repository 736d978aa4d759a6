"""`indexer build`: embed a corpus into a new version (locally or on Ray), or with `--add FILE` grow the current
version by a file of questions; prints what was built, its calibration and its figures."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from indexer.calibrate import DEFAULT_TARGET_RECALL
from indexer.commands.common import check_settings, positive_int, recall_target, root_arg, threads_arg
from indexer.doc_limits import MAX_DOC_CHARS, MAX_PASSAGES
from indexer.runtime.ann import AUTO, AUTO_FLAT_BELOW, KIND_SPECS, KINDS, KNOBS, param_default
from indexer.runtime.faiss.training import CODECS, DEFAULT_NPROBE
from indexer.runtime.lexical import AUTO_PISA_FROM, AUTO_TANTIVY_FROM, ENGINES
from indexer.runtime.paths import DEFAULT_MODEL_NAME, default_model_dir, default_quora_source

if TYPE_CHECKING:
    from indexer.runtime.manifest import DataInfo, Manifest


def add_parser(sub: argparse._SubParsersAction) -> None:
    """`indexer build` and its arguments (in --help order; each group in a function of its own)."""
    b = sub.add_parser("build", help="embed a corpus (Quora TSV, JSONL, CSV/TSV, Parquet, BEIR, documents) into a "
                       "new version",
                       description="Embed a corpus with an exported ONNX encoder into a FAISS IVF index; write a new "
                       "version atomically, switch `current` to it once its gates pass (calibration, the MRR@10 a "
                       "swap gate compares), then measure the report's evaluations while it is served.")
    root_arg(b)
    b.add_argument("--model", type=Path, default=None,
                   help=f"exported encoder folder (default: $STRATA_HOME/models/{DEFAULT_MODEL_NAME}; with --add: "
                   "the encoder the current version was built with)")
    b.add_argument("--data", default=default_quora_source(),
                   help="the corpus: quora_duplicate_questions.tsv[.gz] (or its URL); a .jsonl, .csv or .tsv file "
                   "with a header, .parquet file or folder, a BEIR folder (corpus.jsonl, queries.jsonl, "
                   "qrels/test.tsv), or a folder of .md, .html, .pdf and .txt files or one of them (one document "
                   "each: the files extra); .gz works for text files (default: the local Quora copy under "
                   "$STRATA_DATA_DIR if any, else the official URL)")
    b.add_argument("--protocol", choices=["paper", "full", "heldout"], default=None,
                   help="Quora TSV only. paper (default): first 100k rows, question2 corpus, question1 queries; "
                   "full: every question; heldout: every question of the held-out rows (id >= 300,000), which "
                   "nothing trains or tunes on")
    b.add_argument("--rows", type=positive_int, default=None,
                   help="read only the first N data rows (heldout: the first N held-out rows)")
    _own_corpus_args(b)
    _index_args(b)
    b.add_argument("--batch-size", type=positive_int, default=None,
                   help="texts per ONNX run when encoding (default: 16 on CPU, 64 on a GPU)")
    threads_arg(b)
    b.add_argument("--keep", type=positive_int, default=5, help="versions to keep, the current one included")
    _lexical_args(b)
    b.add_argument("--no-eval", action="store_true", help="skip the MRR@10 evaluation")
    b.add_argument("--add", type=Path, default=None, metavar="FILE",
                   help="add the questions of FILE (TSV 'id<TAB>question', or Quora pairs) to the current version "
                   "as a new version, without retraining the coarse quantizer")
    b.add_argument("--rebuild-after", type=float, default=0.2, metavar="RATIO",
                   help="with --add: report a full rebuild as due once more than RATIO x the vectors the "
                   "quantizer was trained on were added since (default 0.2)")
    _ray_args(b)
    b.set_defaults(func=run)


def _own_corpus_args(b: argparse.ArgumentParser) -> None:
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
    c.add_argument("--vector-field", default=None, metavar="FIELD",
                   help="field holding each row's vector (JSONL list, Parquet list<float32>/fixed_size_list; default: "
                        "vector): a corpus that has it is built from those vectors, not encoded; they must come from "
                        "the --model encoder's space (its dimension is checked)")
    c.add_argument("--follow-symlinks", action="store_true",
                   help="a folder of documents: follow symlinks that point out of it (default: each is skipped and "
                   "named; symlinks inside the folder are always followed)")
    c.add_argument("--chunk", type=_chunk_arg, default=None, metavar="TOKENS|auto|off",
                   help="split each document into passages of at most TOKENS tokens (the encoder's, on sentence "
                   "boundaries where possible), each embedded and indexed; /search then ranks documents by their best "
                   "passage and returns it with offsets and a snippet. off: documents whole. Default auto: split "
                   "(at the encoder's window) when more than 10%% of the first 2,000 documents run past it, logged "
                   "with the reason and recorded in the manifest (see docs/passages.md)")
    c.add_argument("--overlap", type=int, default=None, metavar="TOKENS",
                   help="tokens consecutive passages share (whole sentences where possible; default: chunk / 8)")
    c.add_argument("--queries", type=Path, default=None,
                   help="evaluation queries (JSONL with _id/id and text) to store and evaluate with --qrels "
                   "(a BEIR folder's queries.jsonl is found by itself)")
    c.add_argument("--qrels", type=Path, default=None,
                   help="relevance judgments for --queries: query-id<TAB>corpus-id<TAB>score (BEIR: qrels/test.tsv)")


def _index_args(b: argparse.ArgumentParser) -> None:
    """The vector index: its kind, parameters and calibration."""
    b.add_argument("--index", choices=[AUTO, *KINDS], default=AUTO,
                   help=f"the vector index: {', '.join(f'{k} ({spec.summary})' for k, spec in KIND_SPECS.items())}, "
                   f"or auto (default): flat below {AUTO_FLAT_BELOW:,} "
                   f"documents, where exact search is as fast as IVF at 0.97 of exact's top 10 "
                   f"(docs/decisions.md), ivf from there on, and ivf whenever --nlist, --nprobe or --codec "
                   f"is given. --engine ray builds ivf only")
    b.add_argument("--nlist", type=positive_int, default=None,
                   help="IVF lists (default: by size, 4·sqrt(N) rounded to a power of two: 1024 at 100k, 4096 at 1M; "
                        "scaled down for small corpora)")
    b.add_argument("--hnsw-m", type=positive_int, default=param_default("m"),
                   help="HNSW: graph neighbours per node (FAISS's M; default %(default)s)")
    b.add_argument("--ef-construction", type=positive_int,
                   default=param_default("ef_construction"),
                   help="HNSW: candidates kept while building (default %(default)s)")
    b.add_argument("--ef-search", type=positive_int, default=None,
                   help="HNSW: candidates kept per query, taken as given (no calibration); default: calibrated "
                        f"(see --target-recall; {param_default('ef_search')} with --no-calibrate)")
    for knob in KNOBS:  # the search knob of every other kind (`ann.KIND_SPECS`), as given (no calibration)
        if knob.name not in ("nprobe", "ef_search"):  # those two: their own flags, above and below
            kinds = "/".join(k for k, spec in KIND_SPECS.items() if spec.knob is knob)
            b.add_argument(knob.flag, type=positive_int, default=None,
                           help=f"{kinds}: {knob.what} per query, taken as given (no calibration); default: "
                                "calibrated (see --target-recall)")
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
                            f"{param_default('ef_search')}, or those given): reproduces builds "
                            "from before calibration was the default")
    b.add_argument("--probes", choices=["auto", "queries", "spans"], default="auto",
                   help="what calibration searches with. auto (default): the dataset's queries that its qrels do "
                        "not judge (BEIR's train/dev queries; Quora's question1s without a duplicate), else 5-15 "
                        "word spans of sampled documents (passages) — never the evaluation queries, so the figures "
                        "reported are measured on queries it did not tune on. queries: held-apart queries, else "
                        "the evaluation queries' text (qrels never read; the build then says its figures are "
                        "measured at a setting chosen on them); fail without queries. spans: document spans "
                        "always. The source is recorded in the manifest")
    b.add_argument("--codec", choices=list(CODECS), default=None,
                   help="how the IVF lists store vectors: SQfp16 (default; half the memory of Flat and faster to "
                        "scan; exact-search MRR@10 within 0.02), SQ8 (8 bits per dimension, half of SQfp16) or Flat "
                        "(float32, the paper's)")
    b.add_argument("--memory-budget", type=byte_size, default=None, metavar="SIZE",
                   help="what the IVF vectors may take in memory (codes, ids, quantizer), e.g. 8G or 512M: the codec "
                        "is the most precise that fits (SQfp16, else SQ8; refused when neither does), logged and "
                        "recorded in the manifest; not with --codec")


def _lexical_args(b: argparse.ArgumentParser) -> None:
    lx = b.add_argument_group("lexical (BM25) index, built beside the vectors in the same version")
    lx.add_argument("--no-lexical", action="store_true", help="build no lexical index (/search serves dense only)")
    lx.add_argument("--lexical-stemmer", default="english", metavar="LANG",
                    help="Snowball stemmer language (PyStemmer), or none (default: english)")
    lx.add_argument("--lexical-stopwords", default="english", choices=["english", "none"],
                    help="stopword list dropped before stemming (default: english, Lucene's)")
    lx.add_argument("--bm25-k1", type=float, default=0.9, help="BM25 k1 (default 0.9, Anserini's BEIR setting)")
    lx.add_argument("--bm25-b", type=float, default=0.4, help="BM25 b (default 0.4, Anserini's BEIR setting)")
    lx.add_argument("--lexical-engine", choices=[AUTO, *ENGINES], default=AUTO,
                    help=f"the BM25 engine (indexer/runtime/lexical.py): bm25s (any k1/b), tantivy (k1=1.2, b=0.75 "
                    f"fixed), pisa (any k1/b; its top k pruned in C++), or auto: bm25s below {AUTO_PISA_FROM:,} "
                    f"documents, pisa from there on (tantivy from {AUTO_TANTIVY_FROM:,} where pisa is not installed; "
                    f"docs/scaling.md), recorded in the manifest with its reason "
                    f"(default: auto)")
    lx.add_argument("--default-mode", choices=["dense", "lexical", "hybrid"], default=None,
                    help="/search's mode when a request names none, recorded in the manifest (default: hybrid "
                    "with a lexical index, else dense)")


def _ray_args(b: argparse.ArgumentParser) -> None:
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
    g.add_argument("--block-rows", type=positive_int, default=1024, help="rows per Ray Data block and actor call")
    g.add_argument("--keep-vectors", action="store_true", help="keep the vectors/*.parquet files in the version")


def _add(args: argparse.Namespace) -> int:
    from indexer.add import add_questions

    r = add_questions(args.root, args.add, model_dir=args.model, threads=args.threads, batch_size=args.batch_size,
                      keep=args.keep, rebuild_after=args.rebuild_after, run_eval=not args.no_eval)
    manifest = r.manifest
    print(f"added {r.added} questions ({r.replaced} replaced, {r.skipped_empty} empty skipped) to "
          f"{manifest.parent_version}: version {manifest.version} in {args.root}, {manifest.index.ntotal} vectors, "
          f"quantizer not "
          f"retrained")
    if manifest.eval:
        print(f"MRR@10 {manifest.eval.mrr_at_10:.4f} (exact {manifest.eval.exact_mrr_at_10:.4f}) over "
              f"{manifest.eval.n_queries} queries")
    if r.rebuild_due:
        print(f"full rebuild due: {r.drift:.0%} of the {manifest.index.trained_ntotal} vectors the quantizer was "
              f"trained "
              f"on were added since (threshold {args.rebuild_after:.0%}); run `indexer build` without --add")
    else:
        print(f"no rebuild due yet: {r.drift:.0%} added since training (threshold {args.rebuild_after:.0%})")
    return 0


def _chunk_arg(value: str) -> int | str:
    from indexer.chunking import parse_chunk

    try:
        return parse_chunk(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def byte_size(value: str) -> int:
    """`8G`, `512M`, `1.5G`, `100000` (bytes; K, M, G, T in powers of 1024)."""
    units = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    v = value.strip().upper().removesuffix("B").removesuffix("I")
    try:
        n = float(v[:-1]) * units[v[-1]] if v and v[-1] in units else float(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a size (e.g. 8G, 512M)") from None
    if n <= 0:
        raise argparse.ArgumentTypeError(f"{value!r}: a size must be positive")
    return int(n)


def run(args: argparse.Namespace) -> int:
    from indexer.build import BuildConfig, build

    check_settings()
    if (args.target_recall is not None or args.no_calibrate) and args.add is not None:
        raise ValueError("--target-recall and --no-calibrate apply to a full build; --add calibrates again by "
                         "itself when the current version was calibrated")
    if args.chunk not in (None, "off") or args.overlap is not None:  # not given: auto for a full local build
        if args.add is not None or args.engine == "ray":
            raise ValueError("--chunk/--overlap apply to a full build with --engine local (not --add or --engine ray)")
    if args.add is not None:
        return _add(args)
    cfg = BuildConfig(model_dir=args.model or default_model_dir(), data=args.data, root=args.root,
                      protocol=args.protocol, rows=args.rows, index=args.index, nlist=args.nlist,
                      nprobe=args.nprobe,
                      target_recall=args.target_recall, calibrate=not args.no_calibrate, probes=args.probes,
                      codec=args.codec, memory_budget=args.memory_budget, hnsw_m=args.hnsw_m,
                      ef_construction=args.ef_construction, ef_search=args.ef_search,
                      eval_search_params={k.name: v for k in KNOBS if (v := getattr(args, k.name, None)) is not None
                                    and k.name not in ("nprobe", "ef_search")},
                      batch_size=args.batch_size, threads=args.threads, keep=args.keep, evaluate=not args.no_eval,
                      report_after=True,
                      id_field=args.id_field, text_field=args.text_field, title_field=args.title_field,
                      metadata_fields=args.metadata_fields, vector_field=args.vector_field, queries=args.queries,
                      qrels=args.qrels, follow_symlinks=args.follow_symlinks,
                      lexical=not args.no_lexical, lexical_stemmer=args.lexical_stemmer,
                      lexical_stopwords=args.lexical_stopwords, bm25_k1=args.bm25_k1, bm25_b=args.bm25_b,
                      lexical_engine=args.lexical_engine,
                      default_mode=args.default_mode, chunk="auto" if args.chunk is None else args.chunk,
                      overlap=args.overlap)
    if args.engine == "ray":
        from indexer.ray_build import RayOptions, build_on_ray, summary

        manifest = build_on_ray(cfg, RayOptions(address=args.ray_address, workers=args.workers, shards=args.shards,
                                         threads_per_worker=args.threads_per_worker,
                                         gpus_per_worker=args.gpus_per_worker, block_rows=args.block_rows,
                                         keep_vectors=args.keep_vectors))
        print(summary(manifest))
    else:
        manifest = build(cfg)
    if manifest.report is not None and manifest.report.state == "pending":
        from indexer.report import run_report

        g = manifest.gate
        gate = f"; gate: MRR@10 {g.mrr_at_10:.4f} over {g.n_queries} queries ({g.seconds:.1f}s)" if g else ""
        print(f"published version {manifest.version} in {args.root} (`current` points to it; a running API swaps to it "
              f"if "
              f"its gates pass){gate}; the report's evaluations ({', '.join(manifest.report.modes)}, exact reference) "
              f"run now", flush=True)
        manifest = run_report(args.root, manifest.version, threads=args.threads)
    return _report(args, manifest)


def _report(args: argparse.Namespace, manifest: Manifest) -> int:
    """What a build printed: the index, its calibration, the lexical index, the data read and the figures."""
    knob = KIND_SPECS[manifest.index.kind].knob
    search_params = f"{knob.name} {getattr(manifest.index.params, knob.name)}" if knob else ""
    report = (f" + report {manifest.report.seconds:.1f}s after publishing" if manifest.report
              and manifest.report.seconds else "")
    print(f"built version {manifest.version} in {args.root}: {manifest.index.ntotal} vectors, {manifest.index.kind} "
          f"index "
          f"({manifest.index.factory}{', ' + search_params if search_params else ', exact search'}), "
          f"{manifest.build_seconds.total_s:.1f}s{report}")
    if manifest.index.calibration is not None:
        kc = manifest.index.calibration
        print(f"{kc.knob} {kc.value} keeps {kc.recall_at_10:.4f} of the exact top 10 on {_probes_text(kc)} "
              f"(target {kc.target_recall}{'' if kc.reached else ', not reached'}; {kc.seconds:.1f}s)")
    lx = manifest.lexical
    rows = "passages" if manifest.passages and manifest.passages.enabled else "documents"
    print("lexical: none (dense only)" if lx is None else
          f"lexical: {lx.engine} BM25 k1={lx.k1} b={lx.b} over {lx.n_docs} {rows} ({lx.vocabulary} terms; stemmer "
          f"{lx.stemmer}, stopwords {lx.stopwords}), {lx.seconds:.1f}s; default /search mode {manifest.search_mode()}")
    cal = manifest.index.nprobe_calibration
    if cal is not None:
        print(f"nprobe {cal.nprobe} of {manifest.index.nlist} lists keeps {cal.recall_at_10:.4f} of the exact top 10 "
              f"on "
              f"{_probes_text(cal)} (target {cal.target_recall}"
              f"{'' if cal.reached else ', not reached: every list is probed'}; {cal.seconds:.1f}s)")
    probes = (cal or manifest.index.calibration).probes if (cal or manifest.index.calibration) else None
    if probes is not None and probes.sees_eval_queries:
        print("note: calibrated on the evaluation queries' text (not their qrels): the figures below are measured "
              "at a setting chosen on those queries; --probes auto keeps them unseen")
    d = manifest.data
    if d.format is not None:
        rate = d.rows_read / max(manifest.build_seconds.load_s + manifest.build_seconds.encode_docs_s, 1e-9)
        how = "with their vectors, nothing encoded" if d.vectors == "brought" else "with encoding"
        passages = f", {manifest.index.ntotal} passages" if manifest.passages and manifest.passages.enabled else ""
        print(f"{d.format}: {d.rows_read} rows read ({rate:.0f} rows/s {how}), {d.n_docs} documents{passages}, "
              f"{d.skipped_empty_texts} empty texts skipped, {d.duplicate_ids} duplicate ids (last row won)")
        _print_limits_and_skips(d)
        schema = ", ".join(f"{k}: {v}" for k, v in d.metadata_schema.items()) or "none"
        print(f"metadata: {schema}")
    if manifest.eval and manifest.eval.ndcg_at_10 is not None:
        e = manifest.eval
        print(f"MRR@10 {e.mrr_at_10:.4f} nDCG@10 {e.ndcg_at_10:.4f} Recall@10 {e.recall_at_10:.4f} Recall@100 "
              f"{e.recall_at_100:.4f} (exact search: {e.exact_mrr_at_10:.4f} {e.exact_ndcg_at_10:.4f} "
              f"{e.exact_recall_at_10:.4f} {e.exact_recall_at_100:.4f}) over {e.n_queries} queries")
        if e.ndcg_at_10_vs_exact is not None:
            print(f"index vs exact search: nDCG@10 {e.ndcg_at_10_vs_exact * 100:+.2f} points, top-10 overlap "
                  f"{e.ann_recall_at_10:.4f}")
    elif manifest.eval:
        print(f"MRR@10 {manifest.eval.mrr_at_10:.4f} (exact {manifest.eval.exact_mrr_at_10:.4f}) over "
              f"{manifest.eval.n_queries} "
              f"queries")
    if len(manifest.eval_modes) > 1:
        from indexer.eval_modes import format_modes

        print("by /search mode:\n" + format_modes(manifest.eval_modes))
    return 0


SHOWN_SKIPS = 50  # entries a build's final lines name (the manifest lists up to `MAX_LISTED`)


def _print_skips(d: DataInfo) -> None:
    for e in d.skipped[:SHOWN_SKIPS]:
        print(f"  skipped {e.path}: {e.reason}")
    if d.skipped_files > SHOWN_SKIPS:
        print(f"  … and {d.skipped_files - SHOWN_SKIPS} more skipped (the manifest's data.skipped lists them)")


def _print_limits_and_skips(d: DataInfo) -> None:
    """The per-document limits that cut something, and a folder's skipped entries, each once with its reason."""
    if d.texts_cut or d.passages_cut:
        print(f"limits: {d.texts_cut} texts cut at {MAX_DOC_CHARS:,} characters, {d.passages_cut} documents' "
              f"passages cut at {MAX_PASSAGES:,} (docs/own-corpus.md#limits)")
    if d.format != "files":
        if d.skipped_files:  # a JSONL or Parquet folder's other files
            print(f"{d.format} folder: {d.skipped_files} other files not read:")
        _print_skips(d)
        return
    print(f"files: {d.rows_read} read ({len(d.read_in_part)} in part), {d.skipped_files} skipped"
          + (":" if d.skipped_files else ""))
    _print_skips(d)
    for e in d.read_in_part[:SHOWN_SKIPS]:
        print(f"  read in part {e.path}: {e.reason}")


def _probes_text(cal) -> str:  # noqa: ANN001 (NprobeCalibration | KnobCalibration)
    if cal.probes is None:
        return f"{cal.sample_queries} sampled documents"
    return f"{cal.probes.n_probes} {cal.probes.source.replace('_', ' ')} ({cal.probes.detail})"

