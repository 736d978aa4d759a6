"""Which ONNX Runtime session options serve the exported encoder fastest on this machine, measured side by side.

Each variant is a fresh `InferenceSession` over the same model and the same Quora questions; it reports
throughput at batch 64 and single-query p50/p99, both for one caller and for `--concurrent` callers each with
its own 1-thread session (how the service runs: `STRATA_WORKERS` sessions of `STRATA_THREADS` = 1). The
variants: graph optimisation level (basic / extended / all), parallel 1-thread runs (the default) vs one run
over intra-op threads, fewer threads, sequential vs parallel execution, the CPU memory arena on/off, and
intra-op thread spinning on/off.

    python bench/ort_options.py --model MODEL_DIR [--sentences 2048] [--single 300] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.encoders import sentences  # noqa: E402
from indexer.runtime.encoder import (  # noqa: E402
    ENCODER_ONNX,
    PAD_SLACK,
    RUN_OVERHEAD_TOKENS,
    OnnxEncoder,
    SessionSettings,
)


def variants(threads: int) -> dict[str, SessionSettings]:
    base = SessionSettings(threads=threads)
    return {
        "default (extended, sequential, arena, no spin)": base,
        "graph opt basic": base.replace(graph_optimization="basic"),
        "graph opt all": base.replace(graph_optimization="all"),
        "parallel execution": base.replace(execution_mode="parallel"),
        "no CPU arena": base.replace(cpu_arena=False),
        "spinning on": base.replace(spinning=True),
        f"{threads} intra-op threads, one run at a time": base.replace(parallel_runs=False),
        f"{threads // 2 or 1} thread(s)": base.replace(threads=max(1, threads // 2)),
    }


def measure(encoder: OnnxEncoder, texts: list[str], single: int) -> dict[str, float]:
    run = encoder.encode_with_flags
    encoder.encode(texts[:128])
    t0 = time.perf_counter()
    encoder.encode(texts, batch_size=64)  # corpus encoding: sorted by length, batches of 64
    tput = len(texts) / (time.perf_counter() - t0)
    lat = []
    for t in texts[:single]:
        t0 = time.perf_counter()
        run([t], batch_size=1)
        lat.append((time.perf_counter() - t0) * 1000)
    return {"sent_per_s_b64": round(tput, 1), "b1_p50_ms": round(float(np.percentile(lat, 50)), 3),
            "b1_p99_ms": round(float(np.percentile(lat, 99)), 3)}


def concurrent_single(model: Path, settings: SessionSettings, texts: list[str], callers: int, single: int
                      ) -> dict[str, float]:
    """`callers` threads, each with its own 1-thread session, sending single queries at once."""
    encoders = [OnnxEncoder(model, session=settings.replace(threads=1)) for _ in range(callers)]
    lat: list[float] = []
    lock = threading.Lock()

    def caller(enc: OnnxEncoder, offset: int) -> None:
        mine = []
        for t in texts[offset : offset + single]:
            t0 = time.perf_counter()
            enc.encode_with_flags([t], batch_size=1)
            mine.append((time.perf_counter() - t0) * 1000)
        with lock:
            lat.extend(mine)

    for enc in encoders:
        enc.encode_with_flags(texts[:8], batch_size=8)
    t0 = time.perf_counter()
    threads = [threading.Thread(target=caller, args=(e, i * single)) for i, e in enumerate(encoders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return {f"x{callers}_queries_per_s": round(len(lat) / wall, 1),
            f"x{callers}_p50_ms": round(float(np.percentile(lat, 50)), 3)}


GROUPINGS = [(None, None), (1.0, 0), (1.1, 32), (1.25, 64), (1.5, 128)]  # (slack, overhead); None: one run


def grouping(model: Path, texts: list[str], threads: int) -> list[dict[str, Any]]:
    """Micro-batches of consecutive questions (as concurrent requests arrive): one padded run vs runs cut by
    `length_groups` at several (slack, overhead) settings; sentences/s, best of two passes."""
    from indexer import onnx_encoder as oe

    enc = OnnxEncoder(model, threads=threads)
    rows = []
    saved = oe.PAD_SLACK, oe.RUN_OVERHEAD_TOKENS
    try:
        for size in (8, 32, 64):
            best: dict[tuple, float] = {}
            for _ in range(2):
                for slack, overhead in GROUPINGS:
                    if slack is not None:
                        oe.PAD_SLACK, oe.RUN_OVERHEAD_TOKENS = slack, overhead
                    t0 = time.perf_counter()
                    for s in range(0, len(texts), size):
                        enc.encode_with_flags(texts[s : s + size], batch_size=size, group_by_length=slack is not None)
                    rate = len(texts) / (time.perf_counter() - t0)
                    best[(slack, overhead)] = max(best.get((slack, overhead), 0.0), rate)
            one = best[(None, None)]
            for (slack, overhead), rate in best.items():
                rows.append({"micro_batch": size, "grouping": "one padded run" if slack is None
                             else f"slack {slack}, overhead {overhead} tokens", "sent_per_s": round(rate, 1),
                             "vs_one_run": round(rate / one, 2)})
    finally:
        oe.PAD_SLACK, oe.RUN_OVERHEAD_TOKENS = saved
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, required=True, help="exported model folder")
    p.add_argument("--sentences", type=int, default=2048)
    p.add_argument("--single", type=int, default=300, help="single-query calls per measurement")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--concurrent", type=int, default=os.cpu_count() or 1, help="callers with 1-thread sessions")
    p.add_argument("--repeats", type=int, default=3, help="interleaved passes over the variants; medians shown")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "ort_options.json")
    args = p.parse_args()

    texts = sentences(args.sentences + args.single * args.concurrent)
    runs: dict[str, list[dict[str, float]]] = {}
    for rep in range(args.repeats):  # interleaved, so that a burst of load hits every variant alike
        for name, settings in variants(args.threads).items():
            enc = OnnxEncoder(args.model, session=settings)
            m = measure(enc, texts[: args.sentences], args.single)
            del enc
            if args.concurrent > 1:
                m.update(concurrent_single(args.model, settings, texts, args.concurrent, args.single))
            runs.setdefault(name, []).append(m)
            print(json.dumps({"pass": rep, "variant": name, **m}), flush=True)
    settings_of = variants(args.threads)
    rows: list[dict[str, Any]] = [
        {"variant": name, **settings_of[name].as_dict(),
         **{k: round(float(np.median([m[k] for m in ms])), 3) for k in ms[0]}}
        for name, ms in runs.items()
    ]
    base = rows[0]
    size_mb = (args.model / ENCODER_ONNX).stat().st_size / 1e6
    print(f"\n{args.model} ({size_mb:.1f} MB), {len(texts[: args.sentences])} Quora questions, medians of "
          f"{args.repeats} passes, load average {os.getloadavg()[0]:.2f}")
    c = args.concurrent
    print(f"{'variant':<44} {'sent/s b64':>10} {'ratio':>6} {'b1 p50 ms':>9} {'b1 p99 ms':>9}"
          + (f" {f'x{c} q/s':>8} {f'x{c} p50':>8}" if c > 1 else ""))
    for r in rows:
        r["throughput_ratio"] = round(r["sent_per_s_b64"] / base["sent_per_s_b64"], 3)
        line = (f"{r['variant']:<44} {r['sent_per_s_b64']:>10} {r['throughput_ratio']:>6} {r['b1_p50_ms']:>9} "
                f"{r['b1_p99_ms']:>9}")
        if c > 1:
            line += f" {r[f'x{c}_queries_per_s']:>8} {r[f'x{c}_p50_ms']:>8}"
        print(line)
    groups = grouping(args.model, texts[: args.sentences], args.threads)
    print(f"\nlength grouping of micro-batches (default: slack {PAD_SLACK}, overhead {RUN_OVERHEAD_TOKENS})")
    print(f"{'micro-batch':>11} {'grouping':<32} {'sent/s':>8} {'× one run':>9}")
    for g in groups:
        print(f"{g['micro_batch']:>11} {g['grouping']:<32} {g['sent_per_s']:>8} {g['vs_one_run']:>9}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"model": str(args.model), "loadavg": os.getloadavg()[0], "rows": rows,
                                    "grouping": groups}, indent=2))
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
