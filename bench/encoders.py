"""Encoding speed side by side, same weights, same sentences, one run: sentence-transformers (torch fp32) vs
Strata ONNX fp32 vs Strata ONNX int8 — throughput at batch 64 and single-query latency at batch 1, with
Strata/baseline ratios (ratios survive a noisy shared machine better than absolute figures).

    python bench/encoders.py --fp32 MODEL_DIR --int8 MODEL_DIR [--sentences 4096] [--threads 2]

Sentences are Quora questions (first rows of the TSV under STRATA_DATA_DIR), ~15 tokens on average.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from indexer.quora import read_rows  # noqa: E402
from indexer.runtime.encoder import OnnxEncoder  # noqa: E402
from indexer.runtime.paths import default_quora_source  # noqa: E402


def sentences(n: int) -> list[str]:
    out: list[str] = []
    for row in read_rows(Path(default_quora_source())):
        out.extend(t for t in (row.question1, row.question2) if t)
        if len(out) >= n:
            return out[:n]
    return out


def throughput(encode_many, texts: list[str], batch: int) -> float:  # noqa: ANN001
    """Sentences/s encoding `texts` in one call with this batch size (after a warm-up call)."""
    encode_many(texts[: batch * 2], batch)
    t0 = time.perf_counter()
    encode_many(texts, batch)
    return len(texts) / (time.perf_counter() - t0)


def latency_ms(encode, texts: list[str], n: int) -> tuple[float, float]:  # noqa: ANN001
    for t in texts[:10]:
        encode([t])
    lat = []
    for t in texts[:n]:
        t0 = time.perf_counter()
        encode([t])
        lat.append((time.perf_counter() - t0) * 1000)
    return float(np.percentile(lat, 50)), float(np.percentile(lat, 99))


def measure_encoders(fp32_dir: Path, int8_dir: Path, texts: list[str], single: int, threads: int
                     ) -> list[dict[str, float | str]]:
    """Throughput at batch 64 and batch 1, single-query p50/p99, and cosine to sentence-transformers, for
    sentence-transformers (torch fp32), Strata ONNX fp32 and Strata ONNX int8 on the same texts."""
    import torch
    from sentence_transformers import SentenceTransformer

    from models.checkpoint import default_checkpoint

    torch.set_num_threads(threads)
    st = SentenceTransformer(str(default_checkpoint()), device="cpu")
    fp32 = OnnxEncoder(fp32_dir, threads=threads)
    int8 = OnnxEncoder(int8_dir, threads=threads)
    # (encode a corpus with this batch size, encode a list as one request). Corpus encoding is one call over
    # all the texts, as users call it: sentence-transformers and Strata both sort by length before batching.
    contenders = {
        "sentence-transformers (torch fp32)": (
            lambda t, b: st.encode(t, batch_size=b, normalize_embeddings=True),
            lambda t: st.encode(t, batch_size=len(t), normalize_embeddings=True),
        ),
        "Strata ONNX fp32": (lambda t, b: fp32.encode(t, batch_size=b), lambda t: fp32.encode_with_flags(t)[0]),
        "Strata ONNX int8": (lambda t, b: int8.encode(t, batch_size=b), lambda t: int8.encode_with_flags(t)[0]),
    }
    ref = contenders["sentence-transformers (torch fp32)"][1](texts[:64])
    rows: list[dict[str, float | str]] = []
    for name, (many, one) in contenders.items():
        cos = float(np.min(np.sum(one(texts[:64]) * ref, axis=1)))
        tput = throughput(many, texts, 64)
        tput1 = throughput(many, texts[: single * 2], 1)
        p50, p99 = latency_ms(one, texts, single)
        rows.append({"encoder": name, "sentences_per_s_b64": round(tput, 1), "sentences_per_s_b1": round(tput1, 1),
                     "single_p50_ms": round(p50, 2), "single_p99_ms": round(p99, 2),
                     "min_cosine_vs_st": round(cos, 5)})
    base = rows[0]
    for r in rows:
        r["throughput_ratio"] = round(float(r["sentences_per_s_b64"]) / float(base["sentences_per_s_b64"]), 2)
        r["throughput_ratio_b1"] = round(float(r["sentences_per_s_b1"]) / float(base["sentences_per_s_b1"]), 2)
        r["latency_speedup"] = round(float(base["single_p50_ms"]) / float(r["single_p50_ms"]), 2)
    return rows


def format_rows(rows: list[dict[str, float | str]]) -> str:
    lines = [f"{'encoder':<36} {'sent/s b64':>10} {'× ST':>6} {'sent/s b1':>9} {'× ST':>6} {'p50 ms b1':>9} "
             f"{'p99 ms b1':>9} {'cos vs ST':>9}"]
    for r in rows:
        lines.append(f"{r['encoder']:<36} {r['sentences_per_s_b64']:>10} {r['throughput_ratio']:>6} "
                     f"{r['sentences_per_s_b1']:>9} {r['throughput_ratio_b1']:>6} {r['single_p50_ms']:>9} "
                     f"{r['single_p99_ms']:>9} {r['min_cosine_vs_st']:>9}")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fp32", type=Path, required=True, help="exported fp32 model folder (mean pooling)")
    p.add_argument("--int8", type=Path, required=True, help="exported int8 model folder (--quantize int8)")
    p.add_argument("--sentences", type=int, default=4096)
    p.add_argument("--single", type=int, default=300, help="single-query calls for the latency percentiles")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "encoders.json")
    args = p.parse_args()

    texts = sentences(args.sentences)
    rows = measure_encoders(args.fp32, args.int8, texts, args.single, args.threads)
    print(f"{len(texts)} Quora questions, {args.threads} threads, load average {os.getloadavg()[0]:.2f}\n")
    print(format_rows(rows))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"threads": args.threads, "sentences": len(texts),
                                    "loadavg": os.getloadavg()[0], "rows": rows}, indent=2))
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
