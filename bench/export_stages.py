"""The int8 side of `encoder export`, stage by stage, for two checkouts side by side (issue 38: before / after).

Given one fp32 export (`encoder export --quantize none`), each child process runs what the default export adds
after its fp32 graph: the static quantization (calibration ranges from the shipped cache), the batch-invariance
check and the gate's screen (its fp32 side from the shipped reference), through each checkout's public functions
(`quantize_static_onnx`, `batch_invariance`, `quality_gate`), with a fresh `STRATA_HOME`. Each stage's wall time
and CPU time (`time.process_time`: every thread of the process) is recorded; the checkouts alternate, round by
round, so both see the same load.

    python bench/export_stages.py --fp32 MODEL_DIR --code before=/work/main --code after=. [--rounds 2]

Writes bench/results/export-stages-<stamp>.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STAGES = ("imports", "quantization", "batch invariance", "gate screen (int8 side)", "int8 side in all")


def child(fp32: Path, work: Path) -> None:
    """Run in a child whose PYTHONPATH is the checkout measured; prints one JSON line of stage times."""
    times: dict[str, list[float]] = {}
    t_all = (time.perf_counter(), time.process_time())

    def timed(name: str, fn):  # noqa: ANN001, ANN202
        w, c = time.perf_counter(), time.process_time()
        out = fn()
        times[name] = [round(time.perf_counter() - w, 2), round(time.process_time() - c, 2)]
        return out

    def imports():  # noqa: ANN202
        import models.quantize as q
        from indexer.runtime.atomic import sha256_file, write_json_atomic
        from indexer.runtime.encoder import ENCODER_META, ENCODER_ONNX, EncoderMeta
        return q, sha256_file, write_json_atomic, ENCODER_META, ENCODER_ONNX, EncoderMeta

    q, sha256_file, write_json_atomic, ENCODER_META, ENCODER_ONNX, EncoderMeta = timed("imports", imports)
    int8 = work / "int8"
    shutil.copytree(fp32, int8, ignore=shutil.ignore_patterns(ENCODER_ONNX))

    def quantize() -> None:
        q.quantize_static_onnx(fp32, int8 / ENCODER_ONNX, q.calibration_texts())
        meta = EncoderMeta.model_validate_json((fp32 / ENCODER_META).read_text())
        meta = meta.model_copy(update={"onnx_sha256": sha256_file(int8 / ENCODER_ONNX), "quantization": q.QUANTIZATION})
        write_json_atomic(int8 / ENCODER_META, meta.model_dump(mode="json"))

    timed("quantization", quantize)
    inv = timed("batch invariance", lambda: q.batch_invariance(int8, q.check_texts()))
    gate = timed("gate screen (int8 side)", lambda: q.quality_gate(fp32, int8, rows=20_000, max_drop=0.5))
    times["int8 side in all"] = [round(time.perf_counter() - t_all[0], 2), round(time.process_time() - t_all[1], 2)]
    print(json.dumps({"stages": times, "int8_sha256": sha256_file(int8 / ENCODER_ONNX)[:16],
                      "invariance_max_abs_diff": inv["max_abs_diff"], "gate": gate.as_dict(),
                      "gate_passed": gate.passed}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fp32", type=Path, required=True)
    ap.add_argument("--code", action="append", required=True, help="LABEL=CHECKOUT (twice: before and after)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--work", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.fp32.resolve(), args.work)
        return
    codes = [(label, Path(path).resolve()) for label, path in (c.split("=", 1) for c in args.code)]
    load = [os.getloadavg()[0]]
    results = []
    for k in range(args.rounds):
        for label, code in codes if k % 2 == 0 else codes[::-1]:
            with tempfile.TemporaryDirectory(prefix="strata-stages.") as tmp:
                env = {**os.environ, "PYTHONPATH": str(code), "STRATA_HOME": str(Path(tmp) / "home"),
                       "HF_HUB_OFFLINE": "1", "STRATA_LOG_FORMAT": "text"}
                r = subprocess.run([sys.executable, __file__, "--child", "--fp32", str(args.fp32), "--code", "x=y",
                                    "--work", tmp], env=env, capture_output=True, text=True, cwd=code)
            if r.returncode != 0:
                raise SystemExit(f"{label}: exit {r.returncode}\n{r.stderr[-3000:]}")
            res = json.loads(r.stdout.strip().splitlines()[-1]) | {"code": label, "round": k}
            results.append(res)
            print(f"[{time.strftime('%H:%M:%S')}] {label}: " + ", ".join(
                f"{s} {w}/{c}" for s, (w, c) in res["stages"].items()), flush=True)
        load.append(os.getloadavg()[0])
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = REPO / "bench" / "results" / f"export-stages-{stamp}"
    out.with_suffix(".json").write_text(json.dumps({"load": load, "cpus": os.cpu_count(), "fp32": str(args.fp32),
                                                    "codes": [[lb, str(c)] for lb, c in codes],
                                                    "results": results}, indent=1))
    out.with_suffix(".md").write_text(markdown(stamp, load, codes, results))
    print(f"wrote {out.with_suffix('.md').relative_to(REPO)}")


def markdown(stamp: str, load: list[float], codes: list[tuple[str, Path]], results: list[dict]) -> str:
    def median(label: str, stage: str, i: int) -> float:
        xs = sorted(r["stages"][stage][i] for r in results if r["code"] == label and stage in r["stages"])
        return xs[(len(xs) - 1) // 2] if xs else float("nan")

    labels = [lb for lb, _ in codes]
    head = " | ".join(f"{lb} CPU s | {lb} wall s" for lb in labels)
    lines = [f"# encoder export, the int8 side stage by stage — {stamp}", "",
             "`python bench/export_stages.py --fp32 <all-MiniLM-L6-v2 mean fp32 export> "
             + " ".join(f"--code {lb}=<checkout>" for lb in labels) + f" --rounds {len(results) // len(labels)}`; "
             f"{os.cpu_count()} cores, load average {', '.join(f'{x:.1f}' for x in load)} (start, after each round). "
             "Lower medians over rounds; CPU = `time.process_time()` of the child (all its threads).", "",
             f"| stage | {head} |", "|---|" + "---|" * (2 * len(labels))]
    for stage in STAGES:
        cells = " | ".join(f"{median(lb, stage, 1)} | {median(lb, stage, 0)}" for lb in labels)
        lines.append(f"| {stage} | {cells} |")
    lines += ["", "Per run: the int8 graph's sha256 (prefix), the check's largest change and the gate's screen:", ""]
    for r in results:
        g = r["gate"]
        verdict = "passed" if r["gate_passed"] else "refused"
        lines.append(f"- {r['code']}, round {r['round']}: int8 {r['int8_sha256']}…, invariance max change "
                     f"{r['invariance_max_abs_diff']:.3g}, gate {g['stage']} {verdict}: "
                     f"STS-B {g['stsb_dev_fp32']} → {g['stsb_dev_int8']}, MRR@10 {g['quora_mrr_fp32']} → "
                     f"{g['quora_mrr_int8']}, bounds {g.get('stsb_drop_bounds')} / {g.get('mrr_drop_bounds')}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
