"""int8 schemes side by side, one machine, one run: fp32 vs dynamic int8 (the former default) vs static int8
(the default since issue 15) and the static variants it was chosen from.

For each model: quality (STS-B dev Spearman and Quora MRR@10 on the first --gate-rows rows, paper protocol,
exact search — the export gate's figures), cosine to the fp32 vectors on held-out short sentences and long
texts (up to the 256-token limit), batch invariance (the largest change of a vector component between a
text encoded alone and inside shuffled padded batches / the corpus path, over --check-texts held-out texts) and
speed: sentences/s encoding --sentences Quora questions at batch 64 (length-sorted, parallel 1-thread runs on
--threads cores, as `indexer build` and the service run) and single-query p50 over --single queries, measured in
--rounds interleaved rounds (each round runs every model once, in a rotated order); medians, and ratios taken
within each round. CPU seconds are reported next to wall time: on a shared host they move less.
--profile adds ONNX Runtime's per-operator profile (1 thread, batch 64) of fp32, dynamic and static int8.

    python bench/int8.py [--fp32 MODEL_DIR] [--work bench/work/int8] [--rounds 5] [--skip-quality] [--profile]

Writes bench/results/int8-<stamp>.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.encoders import sentences  # noqa: E402
from indexer.runtime.atomic import sha256_file, write_json_atomic  # noqa: E402
from indexer.runtime.encoder import ENCODER_META, ENCODER_ONNX, EncoderMeta, OnnxEncoder  # noqa: E402
from models.quantize import (  # noqa: E402
    DYNAMIC_QUANTIZATION,
    StaticScheme,
    batch_invariance,
    calibration_texts,
    check_texts,
    quantize_dynamic_onnx,
    quantize_static_onnx,
    quora_mrr,
)

FP32 = "fp32"
DYNAMIC = "int8 dynamic (former default)"
STATIC = "int8 static (default)"
CANDIDATES: dict[str, StaticScheme | None] = {
    DYNAMIC: None,
    STATIC: StaticScheme(),
    "int8 static, bias Adds unfused (plain QDQ)": StaticScheme(fuse_bias=False),
    "int8 static, all MatMuls": StaticScheme(weight_matmuls_only=False),
    "int8 static, shared QDQ": StaticScheme(float_side_inputs=False),
    "int8 static, QOperator": StaticScheme(quant_format="qoperator"),
}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-")


def build_models(fp32: Path, work: Path, names: list[str]) -> dict[str, Path]:
    """fp32 plus each candidate, quantized from the same fp32 folder (reused when already in --work)."""
    out = {FP32: fp32}
    texts = None
    for name in names:
        folder = work / slug(name)
        out[name] = folder
        if (folder / ENCODER_META).is_file():
            continue
        tmp = work / f".{slug(name)}.partial"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(fp32, tmp, ignore=shutil.ignore_patterns(ENCODER_ONNX))
        scheme = CANDIDATES[name]
        t0 = time.perf_counter()
        if scheme is None:
            quantize_dynamic_onnx(fp32 / ENCODER_ONNX, tmp / ENCODER_ONNX)
            label, details = DYNAMIC_QUANTIZATION, None
        else:
            texts = texts or calibration_texts()
            details = quantize_static_onnx(fp32, tmp / ENCODER_ONNX, texts, scheme)
            label = scheme.label
        meta = EncoderMeta.model_validate_json((fp32 / ENCODER_META).read_text())
        meta = meta.model_copy(update={"onnx_sha256": sha256_file(tmp / ENCODER_ONNX), "quantization": label,
                                       "quantization_details": details})
        write_json_atomic(tmp / ENCODER_META, meta.model_dump(mode="json"))
        tmp.rename(folder)
        log(f"built {name} in {time.perf_counter() - t0:.0f} s")
    return out


def quality(models: dict[str, Path], rows: int) -> dict[str, dict[str, float]]:
    from models.sts import evaluate as sts_evaluate
    from models.sts import load_task

    stsb = load_task("STSB-dev")
    encoders = {name: OnnxEncoder(path) for name, path in models.items()}
    out = {name: {"stsb_dev": round(sts_evaluate(enc.encode, [stsb])[stsb.name], 3)} for name, enc in encoders.items()}
    for (name, _), mrr in zip(encoders.items(), quora_mrr(list(encoders.values()), rows), strict=True):
        out[name]["quora_mrr_at_10"] = round(mrr * 100, 3)
    for enc in encoders.values():
        enc.close()
    return out


def fidelity_texts(n: int = 300) -> tuple[list[str], list[str]]:
    """Held-out Wikipedia sentences (the file's tail; calibration reads its head) and long texts made of 3, 6 or
    10 consecutive ones (median ~90 tokens, up to the 256-token limit): where attention spreads thin."""
    from models.data import WIKI, data_dir, read_sentences

    tail = [s for (s,) in read_sentences(data_dir() / WIKI)][-2000:]
    longs = [" ".join(tail[i : i + k]) for k in (3, 6, 10) for i in range(0, 600, k)][:n]
    return tail[:n], longs


def fidelity(models: dict[str, Path]) -> dict[str, dict[str, float]]:
    """Cosine of each model's vectors to fp32's on short and long held-out texts."""
    short, long = fidelity_texts()
    ref = OnnxEncoder(models[FP32])
    want = {"short": ref.encode(short), "long": ref.encode(long)}
    ref.close()
    out = {}
    for name, path in models.items():
        if name == FP32:
            continue
        enc = OnnxEncoder(path)
        out[name] = {}
        for kind, texts in (("short", short), ("long", long)):
            cos = np.sum(enc.encode(texts) * want[kind], axis=1)
            out[name][f"{kind}_mean_cos"] = round(float(cos.mean()), 5)
            out[name][f"{kind}_min_cos"] = round(float(cos.min()), 5)
        enc.close()
    return out


def speed(models: dict[str, Path], texts: list[str], single: int, rounds: int, threads: int
          ) -> dict[str, dict[str, Any]]:
    encoders = {name: OnnxEncoder(path, threads=threads) for name, path in models.items()}
    for enc in encoders.values():  # warm-up: arenas, thread pool, caches
        enc.encode(texts[:256], batch_size=64)
        for t in texts[:20]:
            enc.encode_with_flags([t])
    per: dict[str, dict[str, list[float]]] = {name: defaultdict(list) for name in encoders}
    names = list(encoders)
    for r in range(rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            enc = encoders[name]
            w0, c0 = time.perf_counter(), time.process_time()
            enc.encode(texts, batch_size=64)
            wall, cpu = time.perf_counter() - w0, time.process_time() - c0
            lat = []
            for t in texts[:single]:
                t0 = time.perf_counter()
                enc.encode_with_flags([t])
                lat.append((time.perf_counter() - t0) * 1000)
            per[name]["b64_sent_per_s"].append(len(texts) / wall)
            per[name]["b64_sent_per_cpu_s"].append(len(texts) / cpu)
            per[name]["single_p50_ms"].append(float(np.percentile(lat, 50)))
        log(f"round {r + 1}/{rounds} done (load average {os.getloadavg()[0]:.2f})")
    out: dict[str, dict[str, Any]] = {}
    for name, m in per.items():
        out[name] = {k: round(float(np.median(v)), 2) for k, v in m.items()}
        out[name]["rounds"] = {k: [round(x, 2) for x in v] for k, v in m.items()}
        for base in (FP32, DYNAMIC):
            if base in per and name != base:
                tag = "fp32" if base == FP32 else "dynamic"
                out[name][f"b64_x_{tag}"] = round(float(np.median(
                    np.array(m["b64_sent_per_s"]) / np.array(per[base]["b64_sent_per_s"]))), 2)
                out[name][f"b64_cpu_x_{tag}"] = round(float(np.median(
                    np.array(m["b64_sent_per_cpu_s"]) / np.array(per[base]["b64_sent_per_cpu_s"]))), 2)
                out[name][f"p50_speedup_x_{tag}"] = round(float(np.median(
                    np.array(per[base]["single_p50_ms"]) / np.array(m["single_p50_ms"]))), 2)
    for enc in encoders.values():
        enc.close()
    return out


def profile(models: dict[str, Path], texts: list[str], work: Path) -> dict[str, dict[str, float]]:
    """Share of ONNX Runtime node time per operator type: one 1-thread session, batches of 64 sorted by
    length (as the corpus path runs them)."""
    import onnxruntime as ort

    from indexer.runtime.encoder import SessionSettings, length_groups

    out = {}
    for name, path in models.items():
        opts = SessionSettings(threads=1, parallel_runs=False).to_ort()
        opts.enable_profiling = True
        opts.profile_file_prefix = str(work / f"profile-{slug(name)}")
        enc = OnnxEncoder(path, threads=1)
        session = ort.InferenceSession(str(path / ENCODER_ONNX), sess_options=opts,
                                       providers=["CPUExecutionProvider"])
        encs = enc.tokenizer.encode_batch(texts)
        for idx in length_groups([len(e.ids) for e in encs], 64):
            batch = enc._pad([encs[i] for i in idx])
            session.run(None, {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask})
        trace = Path(session.end_profiling())
        totals: dict[str, float] = defaultdict(float)
        for ev in json.loads(trace.read_text()):
            if ev.get("cat") == "Node" and ev.get("name", "").endswith("_kernel_time"):
                totals[ev["args"]["op_name"]] += ev["dur"]
        trace.unlink()
        total = sum(totals.values())
        out[name] = {"total_ms": round(total / 1000, 1)} | {
            op: round(us / total * 100, 1) for op, us in sorted(totals.items(), key=lambda kv: -kv[1])[:12]}
        enc.close()
    return out


def markdown(res: dict[str, Any]) -> str:
    lines = [f"# int8 schemes — {res['stamp']}", "",
             f"{res['sentences']} Quora questions at batch 64 on {res['threads']} threads (parallel 1-thread runs), "
             f"{res['single']} single queries, {res['rounds']} interleaved rounds (medians; ratios are medians of "
             f"per-round ratios). Load average {res['loadavg_start']:.2f} at the start, {res['loadavg_end']:.2f} at "
             f"the end, on {res['cpu']}.", "",
             "| model | STS-B dev | Quora MRR@10 | cos to fp32, short: mean / min | long: mean / min | "
             "max change alone vs batched | sent/s b64 | × fp32 | × fp32 (CPU s) | × dynamic | p50 ms b1 | "
             "p50 × fp32 | p50 × dynamic |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name in res["models"]:
        q = res.get("quality", {}).get(name, {})
        d = res["invariance"].get(name, {})
        s = res["speed"].get(name, {})
        f = res.get("fidelity", {}).get(name, {})
        same = '1.0' if name == FP32 else '–'
        lines.append(" | ".join([
            f"| {name}", f"{q.get('stsb_dev', '–')}", f"{q.get('quora_mrr_at_10', '–')}",
            f"{f.get('short_mean_cos', same)} / {f.get('short_min_cos', same)}",
            f"{f.get('long_mean_cos', same)} / {f.get('long_min_cos', same)}",
            f"{d.get('max_abs_diff', float('nan')):.2g} (min cos {d.get('min_cosine', float('nan')):.6f})",
            f"{s.get('b64_sent_per_s', '–')}", f"{s.get('b64_x_fp32', '1.0')}", f"{s.get('b64_cpu_x_fp32', '1.0')}",
            f"{s.get('b64_x_dynamic', '1.0' if name == DYNAMIC else '–')}", f"{s.get('single_p50_ms', '–')}",
            f"{s.get('p50_speedup_x_fp32', '1.0')}",
            f"{s.get('p50_speedup_x_dynamic', '1.0' if name == DYNAMIC else '–')} |"]))
    if res.get("profile"):
        lines += ["", "## Where the time goes (ONNX Runtime profile, 1 thread, batch 64, % of node time)", ""]
        for name, ops in res["profile"].items():
            shares = ", ".join(f"{op} {v}%" for op, v in ops.items() if op != "total_ms")
            lines.append(f"- {name} ({ops['total_ms']} ms): {shares}")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fp32", type=Path, help="exported fp32 folder, mean pooling (default: exported into --work)")
    p.add_argument("--work", type=Path, default=REPO / "bench" / "work" / "int8")
    p.add_argument("--candidates", nargs="+", choices=list(CANDIDATES), default=list(CANDIDATES))
    p.add_argument("--sentences", type=int, default=2048)
    p.add_argument("--single", type=int, default=200)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--check-texts", type=int, default=1000, help="held-out texts for the batch-invariance check")
    p.add_argument("--gate-rows", type=int, default=20_000)
    p.add_argument("--skip-quality", action="store_true")
    p.add_argument("--profile", action="store_true")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = p.parse_args()
    for flag in ("sentences", "single", "rounds", "threads", "check_texts", "gate_rows"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag.replace('_', '-')} must be at least 1")

    args.work.mkdir(parents=True, exist_ok=True)
    fp32 = args.fp32 or args.work / "fp32"
    if not (fp32 / ENCODER_META).is_file():
        log(f"exporting fp32 to {fp32}")
        subprocess.run([sys.executable, "-m", "models.cli", "export", "--out", str(fp32), "--pooling", "mean",
                        "--quantize", "none"], cwd=REPO, check=True)
    models = build_models(fp32, args.work, args.candidates)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), "unknown CPU") if Path("/proc/cpuinfo").is_file() else "unknown CPU"
    res: dict[str, Any] = {"stamp": stamp, "models": {n: str(p) for n, p in models.items()}, "threads": args.threads,
                           "sentences": args.sentences, "single": args.single, "rounds": args.rounds,
                           "loadavg_start": os.getloadavg()[0], "cpu": f"{cpu}, {os.cpu_count()} cores"}

    check = check_texts(args.check_texts)
    res["invariance"] = {}
    for name, path in models.items():
        res["invariance"][name] = batch_invariance(path, check, threads=args.threads)
        log(f"{name}: max change alone vs batched {res['invariance'][name]['max_abs_diff']:.3g}")
    res["fidelity"] = fidelity(models)
    if not args.skip_quality:
        log(f"quality: STS-B dev and Quora MRR@10 on {args.gate_rows} rows")
        res["quality"] = quality(models, args.gate_rows)
    texts = sentences(args.sentences)
    res["speed"] = speed(models, texts, args.single, args.rounds, args.threads)
    if args.profile:
        res["profile"] = profile({n: models[n] for n in (FP32, DYNAMIC, STATIC) if n in models}, texts[:1024],
                                 args.work)
    res["loadavg_end"] = os.getloadavg()[0]

    md = markdown(res)
    print("\n" + md)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"int8-{stamp}.json").write_text(json.dumps(res, indent=2))
    (args.out / f"int8-{stamp}.md").write_text(md)
    log(f"wrote {args.out / f'int8-{stamp}.md'} and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
