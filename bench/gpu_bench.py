"""The GPU path at 1M documents: encode, build and search, GPU beside CPU on the same machine (run by
bench/gpu_check.sh on a CUDA machine; on a machine without one it says so and stops, exit 3).

    PYTHONPATH=$PWD STRATA_DATA_DIR=/work/shared/data python -m bench.gpu_bench --n 1000000 --out DIR

1. **encode**: N texts (Quora's distinct questions of rows < 300,000, grown past them by recombining halves of
   two real questions as bench/scale_corpus.py does) with the default encoder (all-MiniLM-L6-v2, mean pooling,
   ONNX) on the CUDA execution provider: texts/s, and the min cosine to CPU vectors on 512 texts;
2. **build**: IVF{auto nlist},SQfp16 over those vectors, k-means on the GPU (`faiss.devices.train`) and, for the
   ratio, on the CPU (STRATA_GPU=0) from the same sample: train and add seconds, recall of each at the same nprobe;
3. **search**: 1,000 held-out-free query vectors (perturbed seed vectors), exact top-10 by GPU k-NN and by CPU
   (seconds of each), then the IVF index on the GPU (`gpu_clone`) and on the CPU at nprobe 8..128: recall@10
   against exact, queries/s in batches of 1,000 and one at a time.
Writes gpu-bench-<stamp>.json and .md under --out. Figures are only those measured here: nothing is extrapolated.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from bench.common import load, log

REPO = Path(__file__).resolve().parent.parent


def texts(n: int) -> list[str]:
    from bench.scale_corpus import quora_texts
    from indexer.runtime.paths import data_dir

    real = quora_texts(data_dir() / "quora_duplicate_questions.partial.tsv.gz")
    rng = np.random.default_rng(1)
    out = real[:n]
    while len(out) < n:
        a, b = rng.integers(0, len(real), 2)
        wa, wb = real[a].split(), real[b].split()
        out.append(" ".join(wa[: max(1, len(wa) // 2)] + wb[len(wb) // 2 :]))
    return out


def recall(got: np.ndarray, want: np.ndarray) -> float:
    return round(float(np.mean([len(set(g) & set(w)) / want.shape[1] for g, w in zip(got, want, strict=True)])), 4)


def timed(fn):  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    out = fn()
    return out, round(time.perf_counter() - t0, 2)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    p.add_argument("--batch", type=int, default=512)
    args = p.parse_args()
    from bench.scale_corpus import encoder_dir
    from indexer.runtime.encoder import OnnxEncoder
    from indexer.runtime.faiss.devices import gpu_clone, gpu_count
    from indexer.runtime.faiss.exact import knn_inner_product
    from indexer.runtime.faiss.search import search
    from indexer.runtime.faiss.training import auto_nlist, build_ivf, set_nprobe

    if gpu_count() == 0:
        print("no GPU: faiss sees none (faiss-cpu wheel, no CUDA device, or STRATA_GPU=0); nothing measured")
        return 3
    res: dict[str, object] = {"n": args.n, "gpus": gpu_count(), "cpu_count": os.cpu_count(),
                              "host": platform.node(), "load_start": load()}
    corpus = texts(args.n)
    model = encoder_dir()
    enc = OnnxEncoder(model)
    res["providers"] = enc.providers
    if enc.providers[0] != "CUDAExecutionProvider":
        res["note"] = "onnxruntime did not take the CUDA provider: encoding ran on the CPU"
    enc.encode(corpus[:2048], args.batch)  # warm-up: CUDA kernels, cuDNN autotuning
    vecs, enc_s = timed(lambda: enc.encode(corpus, args.batch).astype(np.float32))
    cpu_vecs = OnnxEncoder(model, providers=["CPUExecutionProvider"]).encode(corpus[:512], 64)
    head = vecs[:512]
    cos = np.sum(head * cpu_vecs, axis=1) / (np.linalg.norm(head, axis=1) * np.linalg.norm(cpu_vecs, axis=1))
    res["encode"] = {"seconds": enc_s, "texts_per_s": round(args.n / enc_s), "batch": args.batch,
                     "min_cosine_to_cpu": round(float(cos.min()), 5)}
    log(f"encode: {res['encode']}")
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    ids = np.arange(args.n, dtype=np.int64)
    rng = np.random.default_rng(99)
    a, b = rng.integers(0, args.n, 1000), rng.integers(0, args.n, 1000)
    q = 0.8 * vecs[a] + 0.2 * vecs[b] + rng.normal(size=(1000, vecs.shape[1])).astype(np.float32) * 0.0128
    q = (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)
    (_, exact), gpu_exact_s = timed(lambda: knn_inner_product(q, vecs, 10))
    nlist = auto_nlist(args.n)
    (gpu_index, gpu_train_s, gpu_add_s), _ = timed(lambda: build_ivf(vecs, ids, nlist, 32))
    os.environ["STRATA_GPU"] = "0"
    (_, cpu_exact), cpu_exact_s = timed(lambda: knn_inner_product(q, vecs, 10))
    (cpu_index, cpu_train_s, cpu_add_s), _ = timed(lambda: build_ivf(vecs, ids, nlist, 32))
    os.environ["STRATA_GPU"] = "1"
    res["build"] = {"nlist": nlist, "gpu_train_s": round(gpu_train_s, 2), "gpu_add_s": round(gpu_add_s, 2),
                    "cpu_train_s": round(cpu_train_s, 2), "cpu_add_s": round(cpu_add_s, 2),
                    "train_speedup": round(cpu_train_s / gpu_train_s, 1)}
    res["exact"] = {"gpu_s": gpu_exact_s, "cpu_s": cpu_exact_s, "agreement": recall(exact, cpu_exact)}
    log(f"build: {res['build']}, exact: {res['exact']}")
    rows = []
    for nprobe in (8, 16, 32, 64, 128):
        row: dict[str, object] = {"nprobe": nprobe}
        set_nprobe(cpu_index, nprobe)
        set_nprobe(gpu_index, nprobe)
        clone = gpu_clone(cpu_index)  # the copy keeps the nprobe it was cloned with
        for name, idx in (("gpu", clone), ("cpu", cpu_index), ("cpu_gpu_trained", gpu_index)):
            (_, got), s = timed(lambda idx=idx: search(idx, q, 10))
            one_s = timed(lambda idx=idx: [search(idx, q[i : i + 1], 10) for i in range(200)])[1]
            row[name] = {"recall_at_10": recall(got, exact), "batch_qps": round(1000 / s),
                         "single_ms": round(one_s / 200 * 1000, 3)}
        rows.append(row)
        log(f"search: {row}")
    res["search"] = rows
    res["load_end"] = load()
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%MZ")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"gpu-bench-{stamp}.json").write_text(json.dumps(res, indent=1))
    md = [f"# GPU path at {args.n:,} documents ({stamp})", "", "`bash bench/gpu_check.sh` (bench/gpu_bench.py)", "",
          f"- GPUs {res['gpus']}, providers {res['providers']}, CPUs {res['cpu_count']}", f"- encode: {res['encode']}",
          f"- build: {res['build']}", f"- exact top-10 of 1,000 queries: {res['exact']}", "",
          "| nprobe | GPU recall | GPU batch q/s | GPU 1-query ms | CPU recall | CPU batch q/s | CPU 1-query ms |",
          "|---|---|---|---|---|---|---|"]
    for r in rows:
        g, c = r["gpu"], r["cpu"]  # type: ignore[index]
        md.append(f"| {r['nprobe']} | {g['recall_at_10']} | {g['batch_qps']} | {g['single_ms']} | {c['recall_at_10']} "
                  f"| {c['batch_qps']} | {c['single_ms']} |")
    (args.out / f"gpu-bench-{stamp}.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
