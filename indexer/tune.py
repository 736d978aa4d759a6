"""`indexer tune`: sweep FAISS index types and parameters on a built version's own vectors and queries.

No re-encoding: the documents' vectors are read back from the version's IVF-Flat lists and the evaluation
queries' vectors from `queries.npy`, so each configuration is judged on exactly the same vectors. For each
configuration: MRR@10, Recall@10 against exact search (top-10 overlap), ms per single query, memory; the
Pareto front over (MRR@10 ↑, ms/query ↓, memory ↓) is marked.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass

import numpy as np

from indexer.evaluate import drop_self, rank_metrics
from indexer.runtime.faiss.devices import get_threads, set_threads
from indexer.runtime.faiss.files import memory_bytes
from indexer.runtime.faiss.search import brute_force_search, search, set_search_param
from indexer.runtime.faiss.training import MIN_POINTS_PER_LIST, index_from_factory
from indexer.runtime.version import IndexVersion

log = logging.getLogger(__name__)


@dataclass
class TuneRow:
    factory: str
    search_param: str
    mrr_at_10: float
    recall_vs_exact: float
    ms_per_query: float
    memory_mb: float
    build_s: float
    pareto: bool = False


@dataclass
class Candidate:
    factory: str
    params: list[tuple[str, int]]  # (faiss parameter name, value): nprobe for IVF, efSearch for HNSW


PROBES = [1, 2, 4, 5, 8, 12, 16, 24, 32, 64]
EF_SEARCH = [16, 32, 64, 128]


def search_params(factory: str, n_docs: int) -> Candidate:
    """The search settings swept for one factory string: nprobe for IVF, efSearch for HNSW, none for Flat."""
    if factory.startswith("IVF"):
        nlist = int(factory[3:].split(",")[0].split("_")[0])
        return Candidate(factory, [("nprobe", p) for p in PROBES if p <= nlist])
    if factory.startswith("HNSW"):
        return Candidate(factory, [("efSearch", e) for e in EF_SEARCH])
    return Candidate(factory, [("", 0)])


def default_grid(n_docs: int, dim: int) -> list[Candidate]:
    probes = PROBES
    grid: list[Candidate] = [Candidate("Flat", [("", 0)])]
    nlists = [n for n in (256, 512, 1024, 2048, 4096) if n_docs >= MIN_POINTS_PER_LIST * n]
    for nlist in nlists or [max(1, n_docs // MIN_POINTS_PER_LIST)]:  # small corpora: the largest trainable
        ps = [("nprobe", p) for p in probes if p <= nlist]
        grid.append(Candidate(f"IVF{nlist},Flat", ps))
        if nlist == 1024 or len(nlists) == 0:
            grid.append(Candidate(f"IVF{nlist},SQ8", ps))
            if dim % 48 == 0:
                grid.append(Candidate(f"IVF{nlist},PQ{dim // 8}x8", ps))
    grid.append(Candidate("HNSW32,Flat", [("efSearch", e) for e in EF_SEARCH]))
    return grid


def _pareto(rows: list[TuneRow]) -> None:
    for r in rows:
        r.pareto = not any(
            o is not r and o.mrr_at_10 >= r.mrr_at_10 and o.ms_per_query <= r.ms_per_query
            and o.memory_mb <= r.memory_mb
            and (o.mrr_at_10 > r.mrr_at_10 or o.ms_per_query < r.ms_per_query or o.memory_mb < r.memory_mb)
            for o in rows
        )


def sweep(version: IndexVersion, grid: list[Candidate] | None = None, *, max_queries: int = 5000,
          threads: int = 1, seed: int = 0) -> Iterator[TuneRow]:
    """Yield one row per (index, search parameter); single-query timing with `threads` FAISS threads."""
    ids, vecs = version.ann.stored_vectors()
    qids, _, gold = version.store.eval_set()
    qvecs = version.query_vectors()
    if qvecs is None or not qids:
        raise ValueError(f"{version.folder} has no evaluation queries to tune on")
    rng = np.random.default_rng(seed)
    pick = np.sort(rng.choice(len(qids), size=min(max_queries, len(qids)), replace=False))
    qvecs, gold = qvecs[pick], [gold[i] for i in pick]
    query_ids = np.asarray(qids, dtype=np.int64)[pick]
    exclude_self = version.manifest.data.protocol in ("full", "heldout")
    depth = 11 if exclude_self else 10
    all_threads = get_threads()
    set_threads(threads)

    exact = ids[brute_force_search(vecs, qvecs, depth)[1]]
    if exclude_self:
        exact = drop_self(exact, query_ids, 10)

    for cand in grid or default_grid(len(ids), vecs.shape[1]):
        t0 = time.perf_counter()
        index = index_from_factory(vecs.shape[1], cand.factory)  # fp16 lists stored as `indexer build` does
        set_threads(all_threads)  # train with every core, time with `threads`
        index.train(vecs)
        index.add(vecs)
        set_threads(threads)
        build_s = time.perf_counter() - t0
        mem = memory_bytes(index) / 1e6
        for name, value in cand.params:
            if name:
                set_search_param(index, name, value)
            t0 = time.perf_counter()
            pos = np.empty((len(qvecs), depth), dtype=np.int64)
            for i in range(len(qvecs)):
                pos[i] = search(index, qvecs[i : i + 1], depth)[1][0]
            ms = (time.perf_counter() - t0) * 1000 / len(qvecs)
            got = np.where(pos >= 0, ids[np.clip(pos, 0, None)], -1)
            if exclude_self:
                got = drop_self(got, query_ids, 10)
            mrr, _ = rank_metrics(got, gold, 10)
            overlap = float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got.tolist(), exact.tolist(),
                                                                                 strict=True)]))
            row = TuneRow(cand.factory, f"{name}={value}" if name else "exact", round(mrr, 5), round(overlap, 5),
                          round(ms, 4), round(mem, 1), round(build_s, 2))
            log.info("%s", asdict(row))
            yield row


def pareto(rows: list[TuneRow]) -> list[TuneRow]:
    _pareto(rows)
    return rows


def format_table(rows: list[TuneRow]) -> str:
    head = (f"{'index':<18} {'search':<12} {'MRR@10':>7} {'R@10 vs exact':>13} {'ms/query':>9} {'MB':>7} "
            f"{'build s':>8}  front")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r.factory:<18} {r.search_param:<12} {r.mrr_at_10 * 100:>7.2f} {r.recall_vs_exact * 100:>13.2f} "
                     f"{r.ms_per_query:>9.4f} {r.memory_mb:>7.1f} {r.build_s:>8.2f}  {'*' if r.pareto else ''}")
    return "\n".join(lines)
