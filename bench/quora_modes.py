"""Quora MRR@10 per `/search` mode with today's defaults, against the figures the README states for the served demo.

The demo builds the Quora paper protocol with the default encoder (all-MiniLM-L6-v2, `layers:0,6`, static int8) and
serves hybrid by default (a lexical index is built beside the vectors). `indexer build` evaluates every served mode
(`indexer.eval_modes`): dense (the calibrated IVF index), lexical (BM25) and hybrid (the default fusion, convex
alpha 0.5, over each top 100). This reads those figures from the manifests of index roots built with

    indexer build --model MODEL --protocol paper   --root ROOT_PAPER
    indexer build --model MODEL --protocol heldout --root ROOT_HELDOUT   # rows >= 300,000: evaluated, never tuned

and writes them beside the README's served figures (BERT-LC int8 through the IVF index:
`bench/results/encoder-choice-20261124T215444Z.md`) to bench/results/quora-modes-<stamp>.md.

    python bench/quora_modes.py --root paper=/tmp/q/paper --root heldout=/tmp/q/heldout --command "..."
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from indexer.runtime.layout import IndexRoot  # noqa: E402
from indexer.runtime.manifest import EvalFigures, Manifest  # noqa: E402

# What the README states for the served demo today (BERT-LC layers:0,6 int8 through its IVF index, MRR@10 × 100),
# from bench/results/encoder-choice-20261124T215444Z.md; and the adapted encoder the demo swaps to after training.
README_SERVED = {"paper": 73.47, "heldout": 71.40}
README_ADAPTED = {"paper": 73.80, "heldout": 72.02}


def evaluate_now(folder: Path) -> dict[str, object]:
    """Dense, lexical and hybrid MRR@10 of a version folder computed now, with the functions `indexer.eval_modes`
    uses (the same rankings and figures as the build's evaluation) but batch searches only, without its
    single-query timing loops: for a version whose build is still timing them (a staged folder) on a loaded
    machine. Returns {mode: (index MRR@10, exact MRR@10)} and the knobs."""
    from indexer.eval_modes import _fused, _lexical_lists, _quora_queries
    from indexer.evaluate import drop_self_scored, eval_search_params
    from indexer.runtime.fusion import HYBRID_DEPTH, Fusion
    from indexer.runtime.version import IndexVersion

    v = IndexVersion(folder)
    try:
        q, qvecs = _quora_queries(v, None)
        search_params = eval_search_params(v)
        depth = HYBRID_DEPTH + q.extra
        ds, di = v.ann.search(qvecs, depth, search_params=search_params)
        es, ei = v.ann.exact_search(qvecs, depth)
        if q.extra:
            di, ds = drop_self_scored(di, ds, q.self_ids, HYBRID_DEPTH)
            ei, es = drop_self_scored(ei, es, q.self_ids, HYBRID_DEPTH)
        ls, li, _ = _lexical_lists(v, q, HYBRID_DEPTH)
        _, hi, _ = _fused(Fusion(), (ds, di), (ls, li), 10)
        _, xi, _ = _fused(Fusion(), (es, ei), (ls, li), 10)
        mrr = lambda ids: q.metrics(ids)["mrr_at_10"]  # noqa: E731
        return {"dense": (mrr(di[:, :10]), mrr(ei[:, :10])), "lexical": (mrr(li[:, :10]),) * 2,
                "hybrid": (mrr(hi), mrr(xi)), "nprobe": search_params.get("nprobe"), "n_queries": len(q.texts),
                "n_docs": v.ntotal, "manifest": v.manifest}
    finally:
        v.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", action="append", required=True, metavar="PROTOCOL=DIR",
                   help="an index root built with `indexer build --protocol PROTOCOL` (repeat per protocol)")
    p.add_argument("--command", default="", help="the build commands, recorded in the results")
    p.add_argument("--evaluate", action="append", default=[], metavar="PROTOCOL=VERSION_DIR",
                   help="compute a version folder's figures now (batch searches, no timing: `evaluate_now`) instead "
                   "of reading its manifest's (repeatable)")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    a = p.parse_args()
    now = datetime.now(timezone.utc)
    lines = [f"# Quora MRR@10 by /search mode, today's defaults ({now:%Y-%m-%d %H:%M} UTC)", "",
             "Built with: " + (f"`{a.command}`" if a.command else "(see the manifests)") + ". Figures: what "
             "`indexer build` evaluated (`indexer.eval_modes`; the manifest's `eval_modes`), MRR@10 × 100 over "
             "the protocol's evaluation queries (paper: rows < 100,000; heldout: rows >= 300,000, never trained or "
             "tuned on; the index is calibrated on unjudged question1s, never on evaluated queries). "
             f"Load (1-min average) when written: {os.getloadavg()[0]:.1f} on 2 shared cores (the figures are "
             "rankings: load does not change them).", "",
             "| protocol | queries / docs | nprobe | dense (index) | dense exact | lexical | hybrid (index) | "
             "hybrid exact | hybrid − dense | README served (dense) | default (hybrid) − README |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    verdicts = []
    for spec in [*a.root, *(f"{e}#now" for e in a.evaluate)]:
        protocol, _, folder = spec.partition("=")
        if folder.endswith("#now"):
            now_figs = evaluate_now(Path(folder.removesuffix("#now")))
            m = now_figs["manifest"]
            ev = {mode: EvalFigures(mrr_at_10=now_figs[mode][0], exact_mrr_at_10=now_figs[mode][1],
                                    recall_at_10=0.0, ann_recall_at_10=0.0, avg_retrieval_ms=0.0, batch_size=0,
                                    threads=0, nprobe=now_figs["nprobe"], memory_gb=0.0,
                                    n_queries=now_figs["n_queries"], n_docs=now_figs["n_docs"], measured_at=now)
                  for mode in ("dense", "lexical", "hybrid")}
            protocol += " (computed now: `--evaluate`)"
        else:
            m = Manifest.load(IndexRoot(Path(folder)).current_dir())
            ev = m.eval_modes
        if not {"dense", "lexical", "hybrid"} <= ev.keys():
            raise SystemExit(f"{folder}: its manifest has no per-mode figures ({sorted(ev)}); build it with today's "
                             "`indexer build` (lexical index on, evaluation on)")
        d, lx, h = ev["dense"], ev["lexical"], ev["hybrid"]
        protocol_key = protocol.split(" ")[0]
        readme = README_SERVED.get(protocol_key)
        served = h if m.search_mode() == "hybrid" else d
        gap = "—" if readme is None else f"{served.mrr_at_10 * 100 - readme:+.2f}"
        lines.append(f"| {protocol} | {d.n_queries:,} / {d.n_docs:,} | {d.nprobe} | {d.mrr_at_10 * 100:.2f} | "
                     f"{d.exact_mrr_at_10 * 100:.2f} | {lx.mrr_at_10 * 100:.2f} | {h.mrr_at_10 * 100:.2f} | "
                     f"{h.exact_mrr_at_10 * 100:.2f} | {(h.mrr_at_10 - d.mrr_at_10) * 100:+.2f} | "
                     f"{readme if readme is not None else '—'} | {gap} |")
        verdicts.append(f"- {protocol}: default mode {m.search_mode()} serves MRR@10 {served.mrr_at_10 * 100:.2f}; "
                        f"hybrid is {'below' if h.mrr_at_10 < d.mrr_at_10 else 'not below'} dense "
                        f"({(h.mrr_at_10 - d.mrr_at_10) * 100:+.2f}); "
                        + ("" if readme is None else
                           f"{'below' if served.mrr_at_10 * 100 < readme else 'not below'} the README's served "
                           f"{readme} (dense, BERT-LC int8 at the nprobe of --target-recall 0.95); the adapted "
                           f"encoder the demo swaps to after training: {README_ADAPTED[protocol_key]}.")
                        + f" Version {m.version}, encoder {Path(m.model.dir).name} ({m.model.pooling}, "
                          f"{m.model.onnx_sha256[:12]}).")
    text = "\n".join(lines + [""] + verdicts) + "\n"
    print(text)
    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / f"quora-modes-{now:%Y%m%dT%H%M%SZ}.md"
    path.write_text(text)
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
