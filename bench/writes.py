"""Writes over HTTP: how long until a written document is searchable, and how many documents/s the API takes.

Copies an index root (the writes go to the copy's log, never to the original), starts `python -m service` on it
(127.0.0.1, free port) and measures, on the machine's shared cores:
- write-to-visible latency: one `PUT /documents` of a new document, then `/search` for its text until it is the
  top hit; the time from sending the PUT to the first answer that shows it (p50/p95/max), next to the PUT alone.
  A 200 means logged (fsync'd) *and* applied, so the first search after it always finds the document;
- throughput: `PUT /documents` with batches of `--batch` new documents from 1 and 4 clients, documents/s (the
  texts are encoded by the server: that is most of the cost) and the per-request latency;
- `POST /documents/delete` latency (no encoding: the log's fsync and the overlay).
Texts are real Quora questions (rows < 300,000) when the data is there, else generated.

    python bench/writes.py --root ~/.strata/indexes/quora [--samples 50] [--batches 20] [--batch 64]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common import pct, start_server, stop  # noqa: E402
from indexer.runtime.layout import IndexRoot  # noqa: E402


def texts(n: int) -> list[str]:
    from indexer.quora import read_rows
    from indexer.runtime.paths import data_dir

    out: list[str] = []
    path = data_dir() / "quora_duplicate_questions.partial.tsv.gz"
    if path.is_file():
        for row in read_rows(path):
            if row.id >= 200_000:  # far from any test index's first rows; below the held-out 300,000
                out.append(f"{row.question1} (written {len(out)})")
                if len(out) >= n:
                    return out
    return out + [f"generated text {i}: how far does a paper plane fly?" for i in range(len(out), n)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, required=True, help="index root to copy and serve")
    ap.add_argument("--samples", type=int, default=50, help="write-to-visible samples")
    ap.add_argument("--batches", type=int, default=20, help="PUT requests per client in the throughput runs")
    ap.add_argument("--batch", type=int, default=64, help="documents per PUT in the throughput runs")
    ap.add_argument("--threads", type=int, default=1, help="STRATA_THREADS of the server")
    ap.add_argument("--out-dir", type=Path, default=REPO / "bench" / "results",
                    help="where writes-<UTC>.json goes (docs/benchmarks.md's figures come from these files)")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="strata-bench-writes-"))
    root = tmp / "root"
    src = IndexRoot(args.root)
    (root / "versions").mkdir(parents=True)
    version = src.current_version()
    shutil.copytree(src.current_dir(), root / "versions" / str(version))
    IndexRoot(root).set_current(str(version))
    proc, url, _ = start_server(root, tmp, {"STRATA_THREADS": str(args.threads)})
    pool = texts(args.samples + args.batches * args.batch * 5 + 10)
    next_id = iter(range(50_000_000, 60_000_000))
    try:
        with httpx.Client(base_url=url, timeout=120) as c:
            c.put("/documents", json={"documents": [{"id": next(next_id), "text": pool.pop()}]})  # warm-up
            put_ms, visible_ms, polls = [], [], []
            for _ in range(args.samples):
                doc = {"id": next(next_id), "text": pool.pop()}
                t0 = time.perf_counter()
                r = c.put("/documents", json={"documents": [doc]})
                t1 = time.perf_counter()
                assert r.status_code == 200, r.text
                n = 0
                while True:
                    n += 1
                    hit = c.post("/search", json={"query": doc["text"], "top_k": 1}).json()["hits"][0]
                    if hit["id"] == doc["id"]:
                        break
                t2 = time.perf_counter()
                put_ms.append((t1 - t0) * 1000)
                visible_ms.append((t2 - t0) * 1000)
                polls.append(n)
            delete_ms = []
            for _ in range(args.samples):
                t0 = time.perf_counter()
                r = c.post("/documents/delete", json={"ids": [next(next_id)]})
                delete_ms.append((time.perf_counter() - t0) * 1000)
                assert r.status_code == 200, r.text

        def run(clients: int) -> tuple[float, list[float]]:
            lat: list[float] = []
            lock = threading.Lock()
            batches = [[{"id": next(next_id), "text": pool.pop()} for _ in range(args.batch)]
                       for _ in range(clients * args.batches)]

            def client(mine: list[list[dict[str, object]]]) -> None:
                with httpx.Client(base_url=url, timeout=300) as cc:
                    for docs in mine:
                        t0 = time.perf_counter()
                        r = cc.put("/documents", json={"documents": docs})
                        assert r.status_code == 200, r.text
                        with lock:
                            lat.append((time.perf_counter() - t0) * 1000)

            threads = [threading.Thread(target=client, args=(batches[i::clients],)) for i in range(clients)]
            t0 = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            return len(batches) * args.batch / (time.perf_counter() - t0), lat

        rates = {n: run(n) for n in (1, 4)}
        size = httpx.get(f"{url}/ready").json()["index_size"]
    finally:
        stop(proc)
        log_bytes = sum(p.stat().st_size for p in (root / "writes").glob("log.sqlite*"))
        shutil.rmtree(tmp, ignore_errors=True)

    out = {
        "root": str(args.root), "version": version, "index_size_after": size, "threads": args.threads,
        "load_avg": os.getloadavg()[0],
        "write_to_visible_ms": {"p50": statistics.median(visible_ms), "p95": pct(visible_ms, 95),
                                "max": max(visible_ms)},
        "put_one_ms": {"p50": statistics.median(put_ms), "p95": pct(put_ms, 95)},
        "searches_until_visible": {"max": max(polls)},
        "delete_one_ms": {"p50": statistics.median(delete_ms), "p95": pct(delete_ms, 95)},
        "throughput_docs_per_s": {str(n): rate for n, (rate, _) in rates.items()},
        "put_batch_ms_p50": {str(n): statistics.median(lat) for n, (_, lat) in rates.items()},
        "batch": args.batch, "log_bytes": log_bytes,
    }
    print(json.dumps(out, indent=2))
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / f"writes-{stamp}.json").write_text(json.dumps(
        {"command": "python bench/writes.py " + " ".join(sys.argv[1:]), "index": str(version), **out}, indent=1))
    print(f"write-to-visible p50 {out['write_to_visible_ms']['p50']:.1f} ms, p95 "
          f"{out['write_to_visible_ms']['p95']:.1f} ms (PUT alone p50 {out['put_one_ms']['p50']:.1f} ms; the first "
          f"search after the 200 found it every time: {max(polls) == 1}); delete p50 "
          f"{out['delete_one_ms']['p50']:.1f} ms; throughput {rates[1][0]:.0f} docs/s (1 client), {rates[4][0]:.0f} "
          f"docs/s (4 clients), batches of {args.batch}; load average {out['load_avg']:.1f}")


if __name__ == "__main__":
    main()
