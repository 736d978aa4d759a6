"""What a snapshot costs: `indexer.runtime.snapshot.create` and `indexer.runtime.restore.restore` on a built root.

Builds a root of N documents that bring their vectors (random unit vectors of the encoder's dimension, short texts;
`indexer build --index auto` with its lexical index), appends W written documents with vectors to its write log (as
`PUT /documents` does), then times, in R rounds: a snapshot of the current version and the log; a restore of it
into an empty folder. Prints the archive's size and the MB/s, and the time scaled linearly in bytes to 1M
documents (the work is reading, hashing and writing every byte once: linear in the archive's size). Writes
bench/results/snapshot-<UTC>.json and .md.

    python bench/snapshot.py --model DIR [--docs 100000] [--writes 10000] [--rounds 3] [--work /tmp/snap-bench]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from indexer.build import BuildConfig, build  # noqa: E402
from indexer.runtime import snapshot  # noqa: E402
from indexer.runtime.restore import restore  # noqa: E402
from indexer.runtime.writelog import Upsert, open_log  # noqa: E402

WORDS = "how what why can learn python money invest india sky blue sea green dog cat car road guitar".split()


def unit(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    v = rng.standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def corpus(path: Path, n: int, dim: int) -> Path:
    rng = np.random.default_rng(1)
    texts = [" ".join(rng.choice(WORDS, 8)) + f" {i}" for i in range(n)]
    vectors = unit(rng, n, dim)
    table = pa.table({"id": pa.array(range(n), pa.int64()), "text": texts,
                      "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), dim)})
    pq.write_table(table, path)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--docs", type=int, default=100_000)
    ap.add_argument("--writes", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--work", type=Path, default=Path("/tmp/snap-bench"))
    args = ap.parse_args()
    dim = int(json.loads((args.model / "encoder.json").read_text())["dim"])
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    root = args.work / "root"
    t0 = time.perf_counter()
    build(BuildConfig(model_dir=args.model, data=str(corpus(args.work / "docs.parquet", args.docs, dim)), root=root,
                      index="auto", threads=2, evaluate=False))
    built_s = time.perf_counter() - t0
    wlog = open_log(root, create=True)
    assert wlog is not None
    rng = np.random.default_rng(2)
    sha = json.loads((args.model / "encoder.json").read_text())["onnx_sha256"]
    for start in range(0, args.writes, 256):
        vecs = unit(rng, min(256, args.writes - start), dim)
        wlog.append([Upsert(f"w{start + i}", f"written {start + i}", {"n": start + i}, v, sha)
                     for i, v in enumerate(vecs)])
    wlog.close()
    made, restored, info = [], [], None
    for r in range(args.rounds):
        t0 = time.perf_counter()
        info = snapshot.create(root, name=f"bench-{r}")
        made.append(time.perf_counter() - t0)
        target = args.work / f"restored-{r}"
        t0 = time.perf_counter()
        restore(snapshot.archive_path(root, info.name), target)
        restored.append(time.perf_counter() - t0)
        shutil.rmtree(target)
        if r:
            snapshot.delete(root, f"bench-{r - 1}")
    assert info is not None
    mb = info.size / 2**20
    per_doc = info.size / (args.docs + args.writes)
    scale = 1_000_000 / (args.docs + args.writes)
    result = {"docs": args.docs, "writes": args.writes, "dim": dim, "build_s": round(built_s, 1),
              "archive_bytes": info.size, "bytes_per_doc": round(per_doc), "snapshot_s": [round(x, 2) for x in made],
              "restore_s": [round(x, 2) for x in restored], "snapshot_mb_s": round(mb / statistics.median(made)),
              "restore_mb_s": round(mb / statistics.median(restored)),
              "at_1m_docs": {"archive_gib": round(info.size * scale / 2**30, 2),
                             "snapshot_s": round(statistics.median(made) * scale, 1),
                             "restore_s": round(statistics.median(restored) * scale, 1)}}
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = REPO / "bench" / "results" / f"snapshot-{stamp}"
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    lines = [f"# Snapshot and restore, {args.docs:,} documents + {args.writes:,} written ({dim}-d vectors)", "",
             "| | median s | rounds | MB/s | scaled to 1M documents |", "|---|---|---|---|---|",
             f"| snapshot | {statistics.median(made):.2f} | {result['snapshot_s']} | {result['snapshot_mb_s']} | "
             f"{result['at_1m_docs']['snapshot_s']} s |",
             f"| restore | {statistics.median(restored):.2f} | {result['restore_s']} | {result['restore_mb_s']} | "
             f"{result['at_1m_docs']['restore_s']} s |", "",
             f"Archive: {mb:.1f} MiB ({per_doc:.0f} bytes per document); at 1M documents "
             f"{result['at_1m_docs']['archive_gib']} GiB. Command: `python bench/snapshot.py --model DIR --docs "
             f"{args.docs} --writes {args.writes} --rounds {args.rounds}`."]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
