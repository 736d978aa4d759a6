"""Which padded batches must the int8 batch-invariance check run? (issue 38)

`models.quantize.batch_invariance` encodes its texts alone, in shuffled padded batches of `INVARIANCE_BATCHES`
and through the corpus path, and the exporter refuses a graph whose vectors move by more than `DETERMINISM_TOL`.
This bench runs the check with several batch-size sets on the static int8 graph (what the export writes) and on
the dynamic int8 graph (batch-dependent: what the check exists to refuse), both quantized from one fp32 export,
and records each set's verdict, its largest change and its CPU seconds (`time.process_time`, whole process).

    python bench/int8_invariance.py --fp32 MODEL_DIR [--work bench/work/int8-invariance] [--rounds 2]

Writes bench/results/int8-invariance-<stamp>.json and .md.
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import models.quantize as q  # noqa: E402
from indexer.runtime.atomic import sha256_file, write_json_atomic  # noqa: E402
from indexer.runtime.encoder import ENCODER_META, ENCODER_ONNX, EncoderMeta, OnnxEncoder  # noqa: E402

# (padded batch sizes, the corpus path's batch size): before issue 38's change, and two candidates
SETS = (((7, 64), 16), ((16,), 16), ((8,), 8))


def quantized(fp32: Path, work: Path, how: str) -> Path:
    dst = work / how
    if (dst / ENCODER_META).is_file():
        return dst
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(fp32, dst, ignore=shutil.ignore_patterns(ENCODER_ONNX))
    if how == "static":
        q.quantize_static_onnx(fp32, dst / ENCODER_ONNX, q.calibration_texts())
    else:
        q.quantize_dynamic_onnx(fp32 / ENCODER_ONNX, dst / ENCODER_ONNX)
    meta = EncoderMeta.model_validate_json((fp32 / ENCODER_META).read_text())
    meta = meta.model_copy(update={"onnx_sha256": sha256_file(dst / ENCODER_ONNX), "quantization": how})
    write_json_atomic(dst / ENCODER_META, meta.model_dump(mode="json"))
    return dst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fp32", type=Path, required=True, help="an fp32 export (encoder export --quantize none)")
    ap.add_argument("--work", type=Path, default=REPO / "bench" / "work" / "int8-invariance")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    texts = q.check_texts()
    load = [os.getloadavg()[0]]
    rows = []
    for how in ("static", "dynamic"):
        enc = OnnxEncoder(quantized(args.fp32, args.work, how))
        enc.encode(texts[:8])  # warm the session and the run threads
        for k in range(args.rounds):
            for batches, corpus in SETS if k % 2 == 0 else SETS[::-1]:
                q.INVARIANCE_BATCHES, q.INVARIANCE_CORPUS_BATCH = batches, corpus
                c0, w0 = time.process_time(), time.perf_counter()
                res = q.batch_invariance(enc, texts)
                rows.append({"graph": how, "batches": list(batches), "corpus_batch": corpus, "round": k,
                             "cpu_s": round(time.process_time() - c0, 2), "wall_s": round(time.perf_counter() - w0, 2),
                             "max_abs_diff": res["max_abs_diff"],
                             "refused": not res["max_abs_diff"] <= q.DETERMINISM_TOL})
                print(json.dumps(rows[-1]), flush=True)
        enc.close()
        load.append(os.getloadavg()[0])
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = REPO / "bench" / "results" / f"int8-invariance-{stamp}"
    out.with_suffix(".json").write_text(json.dumps({"load": load, "texts": len(texts), "rows": rows}, indent=1))
    lines = [f"# int8 batch-invariance check: which padded batches — {stamp}", "",
             f"`python bench/int8_invariance.py --fp32 <all-MiniLM-L6-v2 mean fp32 export> --rounds {args.rounds}`; "
             f"{len(texts)} texts (`check_texts()`), {os.cpu_count()} cores, load average "
             f"{', '.join(f'{x:.1f}' for x in load)} (start, after each graph). Each set also runs the texts alone "
             "and through the corpus path. Upper median CPU seconds over rounds.", "",
             "| graph | padded batches | corpus path batch | max change | verdict | CPU s | wall s |",
             "|---|---|---|---|---|---|---|"]
    for how in ("static", "dynamic"):
        for batches, corpus in SETS:
            rs = [r for r in rows if r["graph"] == how and r["batches"] == list(batches)]
            cpu = sorted(r["cpu_s"] for r in rs)[len(rs) // 2]
            wall = sorted(r["wall_s"] for r in rs)[len(rs) // 2]
            diff = max(r["max_abs_diff"] for r in rs)
            lines.append(f"| {how} int8 | {', '.join(map(str, batches))} | {corpus} | {diff:.3g} | "
                         f"{'refused' if any(r['refused'] for r in rs) else 'passed'} | {cpu} | {wall} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out.with_suffix('.md').relative_to(REPO)}")


if __name__ == "__main__":
    main()
