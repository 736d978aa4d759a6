"""Does the int8 gate's screen decide as the full gate does? (issue 38)

The gate (`models.int8_gate`) screens int8 on 500 STS-B dev pairs and 2,000 Quora rows and measures the full gate
(1,500 pairs, 20,000 rows) only when the screen's 99 % paired bootstrap bounds do not settle it. This bench
measures, on one fp32 export and several int8 graphs of it — the default static scheme, the recorded alternatives
(bench/results/int8-*.md) and deliberately damaged quantizations — each graph's full-gate decision, the screen's
decision at several screen sizes, and how often the staged decision equals the full one when the screen's
items are resampled (bootstrap over the screen's pairs and queries, `--resamples` times).

Every text is encoded once per graph (the full sample holds the screens: the first N Quora rows are a prefix of
the first 20,000, and the STS screen is a subset of STS-B dev), so a screen of N rows is its corpus and queries
taken from the 20,000-row encoding; int8 static vectors do not depend on their batch, so this is what the gate
computes (the dynamic graph's vectors move by up to 0.05 with their batch: its screens are approximate).

    python bench/int8_gate.py --fp32 MODEL_DIR [--work bench/work/int8-gate] [--resamples 200] [--full-rows 20000]

`--full-rows N` (N < 20,000) trims the reference decision to N Quora rows (a cheaper run on a busy machine): the
"full" columns are then the point estimates on N rows, not the export's full gate, and the screens of N rows or
more are left out.

Writes bench/results/int8-gate-<stamp>.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from indexer.evaluate import per_query_ranks  # noqa: E402
from indexer.quora import load_split, resolve_source  # noqa: E402
from indexer.runtime.atomic import sha256_file, write_json_atomic  # noqa: E402
from indexer.runtime.encoder import ENCODER_META, ENCODER_ONNX, EncoderMeta, OnnxEncoder  # noqa: E402
from indexer.runtime.faiss_index import flat_search  # noqa: E402
from indexer.runtime.paths import default_quora_source, strata_home  # noqa: E402
from models.int8_gate import (  # noqa: E402
    CONFIDENCE,
    SCREEN_PAIRS,
    SCREEN_ROWS,
    GateReport,
    Items,
    drop_bounds,
    stsb_sample,
    stsb_x100,
)
from models.quantize import StaticScheme, calibration_texts, quantize_dynamic_onnx, quantize_static_onnx  # noqa: E402

FULL_ROWS = 20_000
MAX_DROP = 0.5
# (Quora rows, STS-B dev pairs) of each screen measured: the default (2,000 / 500) and smaller ones
SCREENS = ((500, 250), (1_000, 250), (1_000, 500), (2_000, 500), (5_000, 500))
SCREEN_SIZES = tuple(sorted({rows for rows, _ in SCREENS}))


def damaged_calibration() -> list[str]:
    """Calibration on 8 two-word texts: activation ranges far too narrow, so longer texts clip (a damaged int8)."""
    return ["hi there", "thank you", "good morning", "how much", "why not", "what now", "see you", "go home"]


def per_tensor_dynamic(src: Path, dst: Path) -> None:
    """Dynamic int8 with one weight scale per tensor (ONNX Runtime's default; #15 measured it losing more)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, per_channel=False)


VARIANTS = {
    "int8 static (default)": lambda fp32, dst: quantize_static_onnx(fp32, dst, calibration_texts()),
    "int8 static, QOperator (recorded: -0.41 MRR)": lambda fp32, dst: quantize_static_onnx(
        fp32, dst, calibration_texts(), StaticScheme(quant_format="qoperator")),
    "damaged: int8 static calibrated on 8 two-word texts": lambda fp32, dst: quantize_static_onnx(
        fp32, dst, damaged_calibration()),
    "damaged: QOperator calibrated on 8 two-word texts": lambda fp32, dst: quantize_static_onnx(
        fp32, dst, damaged_calibration(), StaticScheme(quant_format="qoperator")),
    "int8 dynamic, per-tensor weights": lambda fp32, dst: per_tensor_dynamic(fp32 / ENCODER_ONNX, dst),
    "int8 dynamic, per-channel (former default)": lambda fp32, dst: quantize_dynamic_onnx(fp32 / ENCODER_ONNX, dst),
}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def build(fp32: Path, work: Path, name: str) -> Path:
    folder = work / "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-")
    if (folder / ENCODER_META).is_file():
        return folder
    tmp = folder.with_name(folder.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(fp32, tmp, ignore=shutil.ignore_patterns(ENCODER_ONNX))
    VARIANTS[name](fp32, tmp / ENCODER_ONNX)
    meta = EncoderMeta.model_validate_json((fp32 / ENCODER_META).read_text())
    meta = meta.model_copy(update={"onnx_sha256": sha256_file(tmp / ENCODER_ONNX), "quantization": name})
    write_json_atomic(tmp / ENCODER_META, meta.model_dump(mode="json"))
    tmp.rename(folder)
    return folder


class Sample:
    """The full sample's texts, and for each screen size its corpus/queries as rows of the full encoding."""

    def __init__(self, full_rows: int = FULL_ROWS) -> None:
        self.full_rows = full_rows
        src = resolve_source(default_quora_source(), strata_home() / "downloads")
        self.sts = stsb_sample(None)
        self.sts_unique = sorted({*self.sts.s1, *self.sts.s2})
        self.splits = {n: load_split(src, "paper", n) for n in (*SCREEN_SIZES, full_rows) if n <= full_rows}
        full = self.splits[full_rows]
        self.texts = list(dict.fromkeys([*full.corpus.texts, *full.evalset.query_texts]))
        self.row = {t: i for i, t in enumerate(self.texts)}
        pos = {(a, b, g): i for i, (a, b, g) in enumerate(zip(self.sts.s1, self.sts.s2, self.sts.gold, strict=True))}
        self.screen_pairs = {}  # pairs -> their rows in STS-B dev (the gate's seeded sample of that size)
        for pairs in sorted({p for _, p in SCREENS}):
            screen = stsb_sample(pairs)
            self.screen_pairs[pairs] = np.array([pos[k] for k in zip(screen.s1, screen.s2, screen.gold, strict=True)])

    def items(self, sts_vecs: np.ndarray, vecs: np.ndarray, rows: int, pairs: np.ndarray | None) -> Items:
        at = {s: i for i, s in enumerate(self.sts_unique)}
        v1, v2 = sts_vecs[[at[s] for s in self.sts.s1]], sts_vecs[[at[s] for s in self.sts.s2]]
        cos = (v1 * v2).sum(1)
        gold = np.asarray(self.sts.gold, dtype=np.float64)
        if pairs is not None:
            cos, gold = cos[pairs], gold[pairs]
        split = self.splits[rows]
        docs = vecs[[self.row[t] for t in split.corpus.texts]]
        queries = vecs[[self.row[t] for t in split.evalset.query_texts]]
        ranked = split.corpus.ids[flat_search(docs, queries, 10)[1]]
        return Items(cos.astype(np.float64), gold, per_query_ranks(ranked, split.evalset.gold, 10)[0])


def report(ref: Items, got: Items, rows: int, stage: str) -> GateReport:
    r = GateReport(stsb_x100(ref), stsb_x100(got), float(ref.rr.mean()), float(got.rr.mean()), rows, MAX_DROP,
                   stage, len(ref.gold))  # type: ignore[arg-type]
    if stage == "screen":
        r.stsb_drop_bounds, r.mrr_drop_bounds = drop_bounds(ref, got)
    return r


def resampled_agreement(ref: Items, got: Items, rows: int, full_passed: bool, resamples: int) -> dict[str, float]:
    """Resample the screen's pairs and queries (with replacement) `resamples` times: how often the staged gate's
    decision (the screen's when clear, else the full gate's) equals the full gate's, and how often it escalates."""
    rng = np.random.default_rng(1)
    same = escalated = 0
    for _ in range(resamples):
        p = rng.integers(0, len(ref.gold), len(ref.gold))
        q = rng.integers(0, len(ref.rr), len(ref.rr))
        r = report(Items(ref.cosines[p], ref.gold[p], ref.rr[q]), Items(got.cosines[p], got.gold[p], got.rr[q]),
                   rows, "screen")
        decided = r.passed if r.clear else full_passed
        escalated += not r.clear
        same += decided == full_passed
    return {"agreement": same / resamples, "escalated": escalated / resamples}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fp32", type=Path, required=True, help="an fp32 export (encoder export --quantize none)")
    ap.add_argument("--work", type=Path, default=REPO / "bench" / "work" / "int8-gate")
    ap.add_argument("--resamples", type=int, default=200)
    ap.add_argument("--variants", nargs="*", default=list(VARIANTS))
    ap.add_argument("--full-rows", type=int, default=FULL_ROWS,
                    help="Quora rows of the reference decision (default 20000, the export's full gate)")
    args = ap.parse_args()
    screens = [(rows, pairs) for rows, pairs in SCREENS if rows < args.full_rows]
    args.work.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()[0]
    sample = Sample(args.full_rows)
    log(f"{len(sample.texts)} Quora texts, {len(sample.sts_unique)} STS-B dev sentences per graph")
    models = {"fp32": args.fp32} | {name: build(args.fp32, args.work, name) for name in args.variants}
    encoded = {}
    for name, folder in models.items():
        t0 = time.perf_counter()
        enc = OnnxEncoder(folder)
        encoded[name] = (enc.encode(sample.sts_unique), enc.encode(sample.texts))
        enc.close()
        log(f"encoded {name} in {time.perf_counter() - t0:.0f} s")

    def figures(name: str) -> dict[tuple[int, int | None], Items]:
        return {(rows, pairs): sample.items(*encoded[name], rows, None if pairs is None else sample.screen_pairs[pairs])
                for rows, pairs in (*screens, (args.full_rows, None))}

    ref = figures("fp32")
    out = []
    for name in args.variants:
        got = figures(name)
        full = report(ref[args.full_rows, None], got[args.full_rows, None], args.full_rows, "full")
        row = {"model": name, "full": full.as_dict() | {"passed": full.passed}, "screens": {}}
        for rows, pairs in screens:
            s = report(ref[rows, pairs], got[rows, pairs], rows, "screen")
            row["screens"][f"{rows}/{pairs}"] = s.as_dict() | {
                "passed": s.passed, "clear": s.clear,
                "staged_decision": ("pass" if s.passed else "refuse") if s.clear else
                                   ("pass (full gate)" if full.passed else "refuse (full gate)"),
                **resampled_agreement(ref[rows, pairs], got[rows, pairs], rows, full.passed, args.resamples)}
        out.append(row)
        log(f"{name}: full {'pass' if full.passed else 'refuse'} ({full.summary()})")
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    res = REPO / "bench" / "results"
    meta = {"load_start": load, "load_end": os.getloadavg()[0], "cpu": os.cpu_count(), "max_drop": MAX_DROP,
            "confidence": CONFIDENCE, "screen_pairs": SCREEN_PAIRS, "default_screen_rows": SCREEN_ROWS,
            "resamples": args.resamples, "fp32": str(args.fp32), "full_rows": args.full_rows}
    (res / f"int8-gate-{stamp}.json").write_text(json.dumps({"meta": meta, "rows": out}, indent=1, default=float))
    (res / f"int8-gate-{stamp}.md").write_text(markdown(stamp, meta, out))
    log(f"wrote bench/results/int8-gate-{stamp}.md")


def markdown(stamp: str, meta: dict, rows: list[dict]) -> str:
    lines = [f"# int8 gate: screen vs full gate — {stamp}", "",
             f"Full gate: all 1,500 STS-B dev pairs and {meta['full_rows']:,} Quora rows, point estimates, max drop "
             f"{MAX_DROP}" + (f" (trimmed with --full-rows: the export's full gate takes {FULL_ROWS:,} rows)"
                                 if meta["full_rows"] != FULL_ROWS else "")
             + ". Screen: the first N Quora rows and P seeded STS-B dev pairs (N / P), "
             f"{CONFIDENCE:.0%} one-sided paired bootstrap bounds of each drop; decides when both upper bounds are "
             "within the max drop (pass) or a lower bound is beyond it (refuse), else the full gate decides. "
             f"Agreement: share of {meta['resamples']} resamples of the screen's pairs and queries whose staged "
             f"decision equals the full gate's. Load average {meta['load_start']:.1f} at the start, "
             f"{meta['load_end']:.1f} at the end, {meta['cpu']} cores.", "",
             "| model | full gate: STS-B drop | MRR@10 drop | decision | screen rows / pairs | "
             "screen STS-B drop [bounds] | screen MRR drop [bounds] | staged decision | agreement | escalated |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        f = r["full"]
        for n, s in r["screens"].items():
            lines.append(
                f"| {r['model']} | {f['stsb_drop']:+.2f} | {f['mrr_drop']:+.2f} | "
                f"{'pass' if f['passed'] else 'refuse'} | {n} | {s['stsb_drop']:+.2f} "
                f"[{s['stsb_drop_bounds'][0]:+.2f}, {s['stsb_drop_bounds'][1]:+.2f}] | {s['mrr_drop']:+.2f} "
                f"[{s['mrr_drop_bounds'][0]:+.2f}, {s['mrr_drop_bounds'][1]:+.2f}] | {s['staged_decision']} | "
                f"{s['agreement']:.3f} | {s['escalated']:.3f} |")
    lines += ["", "Drops are fp32 − int8 in points (positive: int8 is worse)."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
