"""One vector database, driven from inside its own venv by `bench/peers_scale.py` (only numpy, pyarrow, the
standard library and the peer's own client are imported here). Every command prints one JSON line.

    python vector_worker.py ingest chroma --url URL --data DIR --n N
    python vector_worker.py ingest milvus --path DB --data DIR --n N [--nlist L]
    python vector_worker.py recall PEER --url URL --queries Q.npy --truth T.npy --knobs 8,16,32
    python vector_worker.py load PEER --url URL --queries Q.npy --knob K --conns C --seconds S
    python vector_worker.py configure chroma --url URL --knob EF    # ef_search, applied at the server's restart

Ingestion sends what Strata's build reads: integer id, text, vector and the `bucket` metadata, in batches. Every
query asks for what Strata's `/search` answers with: ids, scores, texts and metadata of the top 10.
`load` is a closed loop of `--conns` threads, each sending the next one-vector top-10 query as soon as the answer
is back, through the peer's own client (Milvus Lite speaks gRPC only) or, for `strata`, plain HTTP/1.1 keep-alive
requests from http.client: the same Python harness on both sides, so the client costs the same.
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

COLLECTION = "bench"
TOP_K = 10


def batches(data: Path, n: int, rows: int) -> Any:
    """(ids, texts, vectors, buckets) of the corpus's first `n` rows, `rows` at a time."""
    done = 0
    for part in sorted(data.glob("*.parquet")):
        for b in pq.ParquetFile(part).iter_batches(batch_size=rows, columns=["id", "text", "vector", "bucket"]):
            take = min(len(b), n - done)
            if take <= 0:
                return
            b = b.slice(0, take)
            vecs = b.column("vector").flatten().to_numpy().reshape(take, -1).astype(np.float32)
            yield (b.column("id").to_numpy(), b.column("text").to_pylist(), vecs, b.column("bucket").to_pylist())
            done += take


# --- Chroma (`chroma run`, HTTP) ---------------------------------------------------------------------------------

def chroma_client(url: str) -> Any:
    import chromadb

    host, port = url.removeprefix("http://").split(":")
    return chromadb.HttpClient(host=host, port=int(port))


def chroma_ingest(args: argparse.Namespace) -> dict[str, Any]:
    client = chroma_client(args.url)
    hnsw: dict[str, Any] = {"space": "ip"}  # Chroma's default graph unless given (M 16, ef_construction 100)
    if args.max_neighbors:
        hnsw["max_neighbors"] = args.max_neighbors
    if args.ef_construction:
        hnsw["ef_construction"] = args.ef_construction
    col = client.create_collection(COLLECTION, configuration={"hnsw": hnsw})
    step = min(client.get_max_batch_size(), 5000)
    t0 = time.perf_counter()
    for ids, texts, vecs, buckets in batches(args.data, args.n, step):
        col.add(ids=[str(i) for i in ids], embeddings=vecs, documents=texts, metadatas=[{"bucket": b} for b in buckets])
    return {"ingest_s": round(time.perf_counter() - t0, 1), "count": col.count(), "collection_id": str(col.id)}


def chroma_configure(args: argparse.Namespace) -> dict[str, Any]:
    """Store ef_search in the collection's configuration. A running server keeps searching its loaded HNSW index
    with the ef_search it was loaded with (chromadb 1.5.9, measured: recall@10 0.8943 on this bench's 1M corpus
    after setting 10, 512 and back, until a restart): `bench/peers_scale.py` restarts the server after this."""
    col = chroma_client(args.url).get_collection(COLLECTION)
    col.modify(configuration={"hnsw": {"ef_search": args.knob}})
    return {"ef_search": args.knob, "configuration": col.configuration}


def chroma_searcher(args: argparse.Namespace, knob: int) -> Callable[[np.ndarray], list[int]]:
    """Searches at the ef_search the server loaded (`chroma_configure`, then a restart): `knob` is not applied here."""
    col = chroma_client(args.url).get_collection(COLLECTION)

    def search(q: np.ndarray) -> list[int]:
        r = col.query(query_embeddings=q[None, :], n_results=TOP_K, include=["documents", "metadatas", "distances"])
        return [int(i) for i in r["ids"][0]]
    return search


# --- Milvus Lite (pymilvus + milvus-lite: a local server process over gRPC) -------------------------------------

def milvus_client(path: str | None, url: str | None = None) -> Any:
    """A client of the standalone `milvus-lite server` at `url`, or of the in-process one pymilvus starts for a
    `.db` path (used for ingestion)."""
    from pymilvus import MilvusClient

    return MilvusClient(uri=url) if url else MilvusClient(path)


def milvus_ingest(args: argparse.Namespace) -> dict[str, Any]:
    from pymilvus import DataType, MilvusClient

    client = milvus_client(args.path)
    dim = 384
    schema = MilvusClient.create_schema(auto_id=False)
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=dim)
    schema.add_field("text", DataType.VARCHAR, max_length=4096)
    schema.add_field("bucket", DataType.INT64)
    client.create_collection(COLLECTION, schema=schema)
    t0 = time.perf_counter()
    for ids, texts, vecs, buckets in batches(args.data, args.n, 10_000):
        client.insert(COLLECTION, [{"id": int(i), "vector": v, "text": t[:4000], "bucket": int(b)}
                                   for i, v, t, b in zip(ids, vecs, texts, buckets, strict=True)])
    client.flush(COLLECTION)
    t1 = time.perf_counter()
    params = client.prepare_index_params()
    params.add_index("vector", index_type="IVF_FLAT", metric_type="IP", params={"nlist": args.nlist})
    client.create_index(COLLECTION, params)
    client.load_collection(COLLECTION)
    t2 = time.perf_counter()
    stats = client.get_collection_stats(COLLECTION)
    return {"ingest_s": round(t2 - t0, 1), "insert_s": round(t1 - t0, 1), "index_and_load_s": round(t2 - t1, 1),
            "count": int(stats.get("row_count", -1)), "index": client.describe_index(COLLECTION, "vector")}


def milvus_searcher(args: argparse.Namespace, knob: int) -> Callable[[np.ndarray], list[int]]:
    client = milvus_client(args.path, args.url)
    client.load_collection(COLLECTION)
    params = {"metric_type": "IP", "params": {"nprobe": knob} if knob else {}}

    def search(q: np.ndarray) -> list[int]:
        r = client.search(COLLECTION, data=[q.tolist()], limit=TOP_K, search_params=params,
                          output_fields=["text", "bucket"])
        return [int(h["id"]) for h in r[0]]
    return search


# --- Strata over HTTP, through the same harness ------------------------------------------------------------------

def strata_searcher(args: argparse.Namespace, knob: int) -> Callable[[np.ndarray], list[int]]:
    host, port = args.url.removeprefix("http://").split(":")
    local = threading.local()

    def search(q: np.ndarray) -> list[int]:
        if not hasattr(local, "conn"):
            local.conn = http.client.HTTPConnection(host, int(port), timeout=60)
        body = {"vector": [round(float(x), 6) for x in q], "top_k": TOP_K}
        if knob:
            body["nprobe"] = knob
        local.conn.request("POST", "/search", json.dumps(body), {"Content-Type": "application/json"})
        r = local.conn.getresponse()
        out = json.loads(r.read())
        if r.status != 200:
            raise RuntimeError(f"{r.status}: {out}")
        return [int(h["id"]) for h in out["hits"]]
    return search


SEARCHERS = {"chroma": chroma_searcher, "milvus": milvus_searcher, "strata": strata_searcher}


def recall(args: argparse.Namespace) -> dict[str, Any]:
    queries, truth = np.load(args.queries), np.load(args.truth)
    out = []
    for knob in (int(k) for k in args.knobs.split(",")):
        search = SEARCHERS[args.peer](args, knob)
        got = [search(q) for q in queries]
        r = float(np.mean([len(set(g) & set(t.tolist())) / TOP_K for g, t in zip(got, truth, strict=True)]))
        out.append({"knob": knob, "recall_at_10": round(r, 4)})
        if r >= args.stop_at:
            break
    return {"recall": out}


def load(args: argparse.Namespace) -> dict[str, Any]:
    queries = np.load(args.queries)
    search = SEARCHERS[args.peer](args, args.knob)
    for q in queries[:10]:  # warm-up, untimed (and every thread's connection opened below before the clock)
        search(q)
    lat: list[list[float]] = [[] for _ in range(args.conns)]
    errors: list[str] = []
    start = threading.Barrier(args.conns + 1)
    stop = [0.0]

    def worker(w: int) -> None:
        search(queries[w])
        start.wait()
        i = w
        while time.perf_counter() < stop[0]:
            t0 = time.perf_counter()
            try:
                search(queries[i % len(queries)])
            except Exception as e:  # noqa: BLE001 - counted and reported, never hidden
                errors.append(repr(e)[:200])
                continue
            lat[w].append(time.perf_counter() - t0)
            i += args.conns

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(args.conns)]
    for t in threads:
        t.start()
    stop[0] = time.perf_counter() + 1e9
    start.wait()
    t0 = time.perf_counter()
    stop[0] = t0 + args.seconds
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    ms = np.array([x for w in lat for x in w]) * 1000
    return {"conns": args.conns, "requests": len(ms), "rps": round(len(ms) / wall, 1),
            "p50_ms": round(float(np.percentile(ms, 50)), 2), "p99_ms": round(float(np.percentile(ms, 99)), 2),
            "errors": len(errors), "error_examples": errors[:3]}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("command", choices=["ingest", "recall", "load", "configure"])
    p.add_argument("peer", choices=sorted(SEARCHERS))
    p.add_argument("--url")
    p.add_argument("--path")
    p.add_argument("--data", type=Path)
    p.add_argument("--n", type=int)
    p.add_argument("--nlist", type=int, default=4096)
    p.add_argument("--queries")
    p.add_argument("--truth")
    p.add_argument("--knobs", default="0")
    p.add_argument("--stop-at", type=float, default=1.1)
    p.add_argument("--knob", type=int, default=0)
    p.add_argument("--conns", type=int, default=1)
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--max-neighbors", type=int, default=0, help="Chroma's HNSW M (0: Chroma's default, 16)")
    p.add_argument("--ef-construction", type=int, default=0, help="Chroma's HNSW ef_construction (0: its default, 100)")
    args = p.parse_args()
    if args.command == "ingest":
        out = {"chroma": chroma_ingest, "milvus": milvus_ingest}[args.peer](args)
    elif args.command == "configure":
        out = chroma_configure(args)
    else:
        out = recall(args) if args.command == "recall" else load(args)
    print(json.dumps(out, default=str), flush=True)


if __name__ == "__main__":
    sys.exit(main())
