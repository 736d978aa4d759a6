"""Retrieval side by side on one built version's own stored vectors and evaluation queries: exact FAISS search,
Strata's IVF (as built), and other ANN libraries (`ann_worker.py` in the encoders venv) on exactly the same
vectors, scored by the same MRR@10 code (`indexer.evaluate.rank_metrics`) on the same query sample as
`indexer tune` draws. Single queries, one search thread, ms per query.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

from indexer.evaluate import drop_self, rank_metrics
from indexer.runtime.faiss.exact import stored_vectors
from indexer.runtime.layout import IndexRoot
from indexer.runtime.version import IndexVersion
from indexer.tune import Candidate, sweep

WORKER = Path(__file__).with_name("ann_worker.py")


def _sample(n: int, max_queries: int, seed: int = 0) -> np.ndarray:
    """The query positions `indexer.tune.sweep` evaluates (same generator, same seed)."""
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(n, size=min(max_queries, n), replace=False))


def compare(root: Path, work: Path, python: Path | None, libs: list[str], efs: list[int], max_queries: int,
            log=print) -> dict[str, Any]:  # noqa: ANN001
    version = IndexVersion(IndexRoot(root).current_dir())
    try:
        m = version.manifest
        ids, vecs = stored_vectors(version.index)
        qids, _, gold = version.store.eval_set()
        qvecs = version.query_vectors()
        if qvecs is None or not qids:
            raise SystemExit(f"{version.folder} has no evaluation queries")
        pick = _sample(len(qids), max_queries)
        exclude_self = m.data.protocol in ("full", "heldout")
        depth = 11 if exclude_self else 10
        rows: list[dict[str, Any]] = []
        for label, cand in (("FAISS Flat (exact)", Candidate("Flat", [("", 0)])),
                            (f"Strata {m.index.factory}", Candidate(m.index.factory, [("nprobe", m.index.nprobe)]))):
            log(f"retrieval: {label}")
            for t in sweep(version, [cand], max_queries=max_queries, threads=1):
                rows.append({"index": label, "search": t.search_param, "ms_per_query": t.ms_per_query,
                             "mrr_at_10": round(t.mrr_at_10 * 100, 2),
                             "recall_vs_exact": round(t.recall_vs_exact * 100, 2),
                             "memory_mb": t.memory_mb, "build_s": t.build_s})
    finally:
        version.close()
    errors: dict[str, str] = {}
    if python is not None and libs:
        qv, g = qvecs[pick], [gold[i] for i in pick]
        query_ids = np.asarray(qids, dtype=np.int64)[pick]
        data = work / "ann-input.npz"
        work.mkdir(parents=True, exist_ok=True)
        np.savez(data, docs=vecs, queries=qv)
        exact_pos = np.argsort(-(qv @ vecs.T), axis=1)[:, :depth]
        exact = ids[exact_pos]
        if exclude_self:
            exact = drop_self(exact, query_ids, 10)
        for lib in libs:
            log(f"retrieval: {lib}")
            proc = subprocess.run([str(python), str(WORKER), lib, str(data), str(work / "ann-out"), str(depth),
                                   ",".join(map(str, efs))], capture_output=True, text=True)
            if proc.returncode != 0:
                errors[lib] = "\n".join(proc.stderr.strip().splitlines()[-6:])
                continue
            for line in proc.stdout.splitlines():
                r = json.loads(line)
                pos = np.load(r["positions"])
                got = np.where(pos >= 0, ids[np.clip(pos, 0, None)], -1)
                if exclude_self:
                    got = drop_self(got, query_ids, 10)
                mrr, _ = rank_metrics(got, g, 10)
                overlap = float(np.mean([len(set(a) & set(b)) / 10
                                         for a, b in zip(got.tolist(), exact.tolist(), strict=True)]))
                rows.append({"index": f"{lib} HNSW M=32", "search": r["param"], "ms_per_query": r["ms_per_query"],
                             "mrr_at_10": round(mrr * 100, 2), "recall_vs_exact": round(overlap * 100, 2),
                             "memory_mb": r["mb"], "build_s": r["build_s"]})
    exact_row = rows[0]
    for r in rows:
        r["mrr_vs_exact"] = round(r["mrr_at_10"] - exact_row["mrr_at_10"], 2)
        r["speedup_vs_exact"] = round(exact_row["ms_per_query"] / r["ms_per_query"], 1)
    return {"protocol": m.data.protocol, "rows_read": m.data.rows_read, "docs": len(ids), "queries": len(pick),
            "queries_total": len(qids), "rows": rows, "errors": errors}
