"""Strata beside the vector databases people pick instead, on the same grown-Quora vectors (`bench.scale_corpus`).

    PYTHONPATH=$PWD STRATA_DATA_DIR=/work/shared/data python -m bench.peers_scale ingest 1000000
    PYTHONPATH=$PWD STRATA_DATA_DIR=/work/shared/data python -m bench.peers_scale measure 1000000 --rounds 2

- **Peers**, each from its own venv under bench/.venv-peers/ (`python -m bench.peers.venvs`; never a project
  dependency): Chroma (`chroma run`, HTTP), Milvus Lite (milvus-lite 3: Milvus's gRPC API over a Python engine
  with FAISS indexes; ingested through pymilvus's in-process server for a `.db` folder, then served for the
  measurements by `milvus-lite server` on that folder, gRPC only). Qdrant's server is not on PyPI (its binaries
  download from GitHub, unreachable here) and qdrant-client's "local mode" is a Python library, not a server: not
  run.
- **Ingest** (`ingest`, at nice 10 for every system): the first N rows of the corpus (id, text, vector, bucket).
  Strata: `indexer build --data` from the vectors (nothing encoded), as bench/scale.py; Chroma: `add` in batches
  of 5,000 to a collection with inner-product HNSW; Milvus Lite: inserts of 10,000, then an IVF_FLAT index
  (nlist as Strata's for the size) built and loaded. Ingest time is until the system answers queries.
- **Recall** (`measure`): recall@10 against exact inner-product search (computed here with numpy on the same
  vectors) on the corpus's 300 query vectors, through each system's own API; each system's knob (Strata nprobe,
  Chroma ef_search, Milvus nprobe) is stepped up until recall@10 >= --target, and the reached recall is reported
  (Chroma's ef_search is stored in the collection and takes effect when the server loads the index: the server is
  restarted at each step).
- **Load**, rounds interleaved (every system once per round): one- and eight-connection closed loops of one-vector
  top-10 queries at the chosen knob. HTTP servers (Strata, Chroma) with wrk and a Lua script POSTing JSON; every
  system, Milvus Lite included, also through one Python harness (bench/peers/vector_worker.py: threads over the
  peer's own client, http.client for Strata): the comparison with Milvus is made on that harness only, where both
  sides pay the same client cost. Server RSS (the server's process tree, peak while measured), on-disk size.
Results: bench/results/peers-<N>-<stamp>.md and .json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench import scale_corpus as sc
from bench.common import free_port, load, log
from bench.common import wrk as run_wrk
from bench.peers.http_load import TreeRss
from bench.peers.venvs import ROOT as VENVS

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
WORKER = REPO / "bench" / "peers" / "vector_worker.py"
PY = {"chroma": VENVS / "chroma" / "bin" / "python", "milvus": VENVS / "milvus" / "bin" / "python",
      "strata": VENVS / "milvus" / "bin" / "python"}  # the harness's Python for Strata: any venv with numpy
# each system at the cheapest knob reaching the recall target: Strata and Milvus nprobe, Chroma ef_search (its
# HNSW built with Chroma's defaults, max_neighbors 16 and ef_construction 100, did not pass 0.925 at 1M: see
# docs/scaling.md)
KNOBS = {"strata": [1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128],
         "chroma": [10, 16, 24, 32, 48, 64, 96, 128, 192, 256, 512, 1024, 2048],
         "milvus": [1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128]}
CHROMA_QUERY = "/api/v2/tenants/default_tenant/databases/default_database/collections/{id}/query"


def du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else path.stat().st_size


def corpus_view(n: int) -> Path:
    """The 1M corpus's parts, of which the first `n` rows are used (its rows do not depend on its size)."""
    if n > 1_000_000:
        raise ValueError("the peers bench reads the 1M corpus: at most 1,000,000 documents")
    from indexer.runtime.paths import data_dir

    return sc.corpus(data_dir() / "quora_duplicate_questions.partial.tsv.gz", 1_000_000)


def truth(work: Path, n: int, queries: np.ndarray, folder: Path | None = None) -> np.ndarray:
    """Exact top-10 ids by inner product over the first `n` vectors of the corpus in `folder` (default: the 1M
    corpus's), cached in `work`."""
    out = work / f"truth-{n}.npy"
    if out.is_file():
        return np.load(out)
    import pyarrow.parquet as pq

    best_s = np.full((len(queries), 10), -np.inf, np.float32)
    best_i = np.zeros((len(queries), 10), np.int64)
    done = 0
    for part in sorted((folder or corpus_view(n)).glob("*.parquet")):
        if done >= n:
            break
        t = pq.read_table(part, columns=["id", "vector"]).slice(0, n - done)
        vecs = t.column("vector").combine_chunks().flatten().to_numpy().reshape(len(t), -1)
        s = np.concatenate([best_s, queries @ vecs.T], axis=1)
        i = np.concatenate([best_i, np.broadcast_to(t.column("id").to_numpy(), (len(queries), len(t)))], axis=1)
        top = np.argsort(-s, axis=1)[:, :10]
        best_s, best_i = np.take_along_axis(s, top, 1), np.take_along_axis(i, top, 1)
        done += len(t)
    np.save(out, best_i)
    return best_i


def worker(peer: str, *args: str, nice: bool = False) -> dict[str, Any]:
    cmd = (["nice", "-n", "10"] if nice else []) + [str(PY[peer]), str(WORKER), args[0], peer, *args[1:]]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=os.environ | {"PYTHONPATH": ""})
    if r.returncode != 0:
        raise RuntimeError(f"{peer} {args[0]} failed: {r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


class Proc:
    """A server subprocess on 127.0.0.1 and its readiness."""

    def __init__(self, cmd: list[str], env: dict[str, str], ready: str | None, log_file: Path, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(cmd, cwd=REPO, env=os.environ | env, stdout=open(log_file, "wb"),
                                     stderr=subprocess.STDOUT, start_new_session=True)
        t0 = time.perf_counter()
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{cmd[0]} exited: {log_file.read_text()[-2000:]}")
            try:
                if ready is None:  # a gRPC server: ready once its port accepts connections
                    socket.create_connection(("127.0.0.1", port), timeout=2).close()
                    break
                if httpx.get(self.url + ready, timeout=2).status_code == 200:
                    break
            except (httpx.TransportError, OSError):
                pass
            time.sleep(0.2)
        self.startup_s = round(time.perf_counter() - t0, 1)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def chroma_server(path: Path, work: Path, nice: bool = False) -> Proc:
    port = free_port()
    cmd = (["nice", "-n", "10"] if nice else []) + [str(VENVS / "chroma" / "bin" / "chroma"), "run", "--path",
                                                   str(path), "--host", "127.0.0.1", "--port", str(port)]
    return Proc(cmd, {"ANONYMIZED_TELEMETRY": "False"}, "/api/v2/heartbeat", work / "chroma.log", port)


def milvus_server(path: Path, work: Path) -> Proc:
    """`milvus-lite server` (milvus-lite 3: Milvus's gRPC API over a Python engine with FAISS indexes) on the
    folder the ingestion wrote."""
    port = free_port()
    cmd = [str(VENVS / "milvus" / "bin" / "milvus-lite"), "server", "--data-dir", str(path), "--host", "127.0.0.1",
           "--port", str(port)]
    return Proc(cmd, {"PYTHONPATH": ""}, None, work / "milvus.log", port)


def strata_server(root: Path, work: Path) -> Proc:
    port = free_port()
    env = {"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "STRATA_INDEX_ROOT": str(root), "STRATA_PORT": str(port),
           "STRATA_HOST": "127.0.0.1", "STRATA_WATCH_INTERVAL_S": "0", "STRATA_LOG_LEVEL": "warning",
           "STRATA_THREADS": "1"}
    return Proc([sys.executable, "-m", "service"], env, "/ready", work / "strata.log", port)


def chroma_dir(work: Path, n: int, graph: tuple[int, int] | None) -> Path:
    """Chroma's data folder for `n` documents: its default graph, or `graph` = (max_neighbors, ef_construction)."""
    return work / (f"chroma-{n}" if graph is None else f"chroma-{n}-m{graph[0]}-efc{graph[1]}")


def ingest(peer: str, n: int, work: Path, graph: tuple[int, int] | None = None) -> dict[str, Any]:
    tag = peer if peer != "chroma" or graph is None else f"chroma-m{graph[0]}-efc{graph[1]}"
    state = work / f"ingest-{tag}-{n}.json"
    if state.is_file():
        return json.loads(state.read_text())
    log(f"{peer}: ingesting {n:,} documents, load {load()}")
    if peer == "strata":
        out = strata_build(n, work)
    elif peer == "chroma":
        path = chroma_dir(work, n, graph)
        shutil.rmtree(path, ignore_errors=True)
        srv = chroma_server(path, work, nice=True)
        rss = TreeRss(srv.proc.pid)
        try:
            out = worker("chroma", "ingest", "--url", srv.url, "--data", str(corpus_view(n)), "--n", str(n),
                         *(["--max-neighbors", str(graph[0]), "--ef-construction", str(graph[1])] if graph else []),
                         nice=True)
        finally:
            out_rss = rss.stop()
            srv.stop()
        out |= {"server_peak_rss_gib": out_rss, "disk_bytes": du(path)}
    else:
        path = work / f"milvus-{n}"
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        from indexer.runtime.faiss.training import auto_nlist

        out = worker("milvus", "ingest", "--path", str(path / "milvus.db"), "--data", str(corpus_view(n)),
                     "--n", str(n), "--nlist", str(auto_nlist(n)), nice=True)
        out |= {"disk_bytes": du(path)}
    out |= {"load_after": load()}
    state.write_text(json.dumps(out))
    log(f"{peer}: {out}")
    return out


def strata_build(n: int, work: Path) -> dict[str, Any]:
    """`indexer build` from the vectors at nice 10 (STRATA_BUILD_PRIORITY=normal: the build's own nice 19 is for
    sharing a machine with the API, and would make this ingest slower than the peers' for no reason of its own)."""
    root = work / f"strata-{n}"
    shutil.rmtree(root, ignore_errors=True)
    logf = work / f"build-{n}.log"
    cmd = ["nice", "-n", "10", "/usr/bin/time", "-v", sys.executable, "-m", "indexer.cli", "build", "--model",
           str(sc.encoder_dir()), "--data", str(corpus_view(n)), "--rows", str(n), "--root", str(root), "--no-eval",
           "--threads", "2", "--keep", "2"]
    t0 = time.perf_counter()
    with open(logf, "w") as f:
        r = subprocess.run(cmd, cwd=REPO, env=os.environ | {"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1",
                                                            "STRATA_BUILD_PRIORITY": "normal"}, stderr=f, stdout=f)
    if r.returncode:
        raise RuntimeError(logf.read_text()[-3000:])
    return strata_built(root, logf, time.perf_counter() - t0)


def strata_built(root: Path, logf: Path, wall: float) -> dict[str, Any]:
    from bench.scale import version_dir
    from indexer.runtime.manifest import Manifest

    peak_kb = int(re.findall(r"Maximum resident set size \(kbytes\): (\d+)", logf.read_text())[-1])
    folder = version_dir(root)
    m = Manifest.load(folder)
    return {"ingest_s": round(wall, 1), "build_peak_rss_gib": round(peak_kb / 2**20, 3), "index": m.index.factory,
            "stages_s": {k: round(v, 1) for k, v in m.build_seconds.model_dump().items()},
            "disk_bytes": du(folder), "root": str(root)}


def wrk(url: str, path: str, bodies: list[str], conns: int, seconds: int, work: Path) -> dict[str, Any]:
    r = run_wrk(url, bodies, conns, seconds, work, path=path, timeout_s=2)
    return {k: r[k] for k in ("conns", "p50_ms", "p99_ms", "rps", "errors")}


def tune(peer: str, where: list[str], work: Path, n: int, target: float,
         set_knob: Callable[[int], list[str]] | None = None) -> dict[str, Any]:
    """Each knob in turn until recall@10 >= target (the reached recall is what is reported; past the last knob, the
    last). `set_knob`: for a peer whose knob is applied by a restart (Chroma), sets it and returns the new `where`;
    the server then serves at the last knob tried, which is the chosen one."""
    args = ["--queries", str(work / "queries.npy"), "--truth", str(work / f"truth-{n}.npy")]
    if set_knob is None:
        r = worker(peer, "recall", *where, *args, "--knobs", ",".join(map(str, KNOBS[peer])),
                   "--stop-at", str(target))["recall"]
    else:
        r = []
        for knob in KNOBS[peer]:
            got = worker(peer, "recall", *set_knob(knob), *args, "--knobs", str(knob))["recall"][0]
            r.append(got)
            if got["recall_at_10"] >= target:
                break
    chosen = next((x for x in r if x["recall_at_10"] >= target), r[-1])
    log(f"{peer}: recall sweep {r} -> knob {chosen['knob']}")
    return {"sweep": r, "knob": chosen["knob"], "recall_at_10": chosen["recall_at_10"]}


def bodies(peer: str, queries: np.ndarray, knob: int) -> list[str]:
    out = []
    for q in queries[:100]:
        v = [round(float(x), 6) for x in q]
        out.append(json.dumps({"vector": v, "top_k": 10, "nprobe": knob} if peer == "strata" else
                              {"query_embeddings": [v], "n_results": 10,
                               "include": ["documents", "metadatas", "distances"]}))
    return out


def measure(peers: list[str], n: int, work: Path, target: float, rounds: int, seconds: int,
            graph: tuple[int, int] | None = None) -> dict[str, Any]:
    queries = np.load(work / "queries.npy")
    truth(work, n, queries)
    built = {p: ingest(p, n, work, graph) for p in peers}
    servers: dict[str, Proc] = {}
    rss: dict[str, TreeRss] = {}
    where: dict[str, list[str]] = {}
    out: dict[str, Any] = {p: {"ingest": built[p], "load": []} for p in peers}
    try:
        if "strata" in peers:
            servers["strata"] = strata_server(Path(built["strata"]["root"]), work)
        if "chroma" in peers:
            servers["chroma"] = chroma_server(chroma_dir(work, n, graph), work)
        if "milvus" in peers:
            servers["milvus"] = milvus_server(work / f"milvus-{n}" / "milvus.db", work)
        for p, s in servers.items():
            rss[p] = TreeRss(s.proc.pid)
            where[p] = ["--url", s.url]
            out[p]["startup_s"] = s.startup_s
        def chroma_knob(knob: int) -> list[str]:
            """ef_search stored, then the server restarted so that its HNSW index is loaded with it."""
            worker("chroma", "configure", *where["chroma"], "--knob", str(knob))
            rss["chroma"].stop()
            servers["chroma"].stop()
            servers["chroma"] = chroma_server(chroma_dir(work, n, graph), work)
            rss["chroma"] = TreeRss(servers["chroma"].proc.pid)
            where["chroma"] = ["--url", servers["chroma"].url]
            return where["chroma"]

        for p in peers:
            out[p]["recall"] = tune(p, where[p], work, n, target, chroma_knob if p == "chroma" else None)
        for rnd in range(rounds):
            for p in peers:  # interleaved: every system once per round
                knob = str(out[p]["recall"]["knob"])
                for conns in (1, 8):
                    row: dict[str, Any] = {"round": rnd, "conns": conns}
                    if p != "milvus":
                        path = "/search" if p == "strata" else CHROMA_QUERY.format(id=built[p]["collection_id"])
                        row["wrk"] = wrk(servers[p].url, path, bodies(p, queries, int(knob)), conns, seconds, work)
                    row["python"] = worker(p, "load", *where[p], "--queries", str(work / "queries.npy"), "--knob",
                                           knob, "--conns", str(conns), "--seconds", str(seconds))
                    row["load"] = load()
                    log(f"{p}: {row}")
                    out[p]["load"].append(row)
        for p in servers:
            out[p]["server_peak_rss_gib"] = rss[p].stop()  # (Chroma's: the server measured, started at its knob)
    finally:
        for s in servers.values():
            s.stop()
    return out


def report(res: dict[str, Any], n: int, stamp: str, cmd: str) -> str:
    lines = [f"# Strata beside Chroma and Milvus Lite: {n:,} documents ({stamp})", "", f"`{cmd}`", "",
             "| system | ingest s | disk bytes/doc | startup s | knob | recall@10 | server peak RSS GiB |",
             "|---|---|---|---|---|---|---|"]
    for p, r in res.items():
        if p.startswith("_"):
            continue
        rs = r.get("server_peak_rss_gib")
        lines.append(f"| {p} | {r['ingest']['ingest_s']} | {r['ingest']['disk_bytes'] / n:.0f} | "
                     f"{r.get('startup_s', '-')} | {r['recall']['knob']} | {r['recall']['recall_at_10']} | {rs} |")
    lines += [""] + [f"- {p} recall sweep (knob: recall@10): "
                     + ", ".join(f"{x['knob']}: {x['recall_at_10']}" for x in r["recall"]["sweep"])
                     for p, r in res.items() if not p.startswith("_")]
    lines += ["", "| system | round | conns | wrk req/s | wrk p50 ms | wrk p99 ms | harness req/s | harness p50 ms | "
              "harness p99 ms | errors | load |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for p, r in res.items():
        for x in r.get("load", []) if not p.startswith("_") else []:
            w, h = x.get("wrk", {}), x["python"]
            lines.append(f"| {p} | {x['round']} | {x['conns']} | {w.get('rps', '-')} | {w.get('p50_ms', '-')} | "
                         f"{w.get('p99_ms', '-')} | {h['rps']} | {h['p50_ms']} | {h['p99_ms']} | "
                         f"{w.get('errors', 0) + h['errors']} | {x['load']} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("step", choices=["ingest", "measure"])
    p.add_argument("n", type=int)
    p.add_argument("--peers", nargs="+", choices=["strata", "chroma", "milvus"], default=["strata", "chroma", "milvus"])
    p.add_argument("--work", type=Path, default=Path.home() / ".cache" / "strata-peers")
    p.add_argument("--target", type=float, default=0.95)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--seconds", type=int, default=10)
    p.add_argument("--chroma-graph", default=None, metavar="M,EFC",
                   help="Chroma's HNSW max_neighbors and ef_construction (default: Chroma's, 16,100), in a folder "
                        "of its own")
    args = p.parse_args()
    graph = tuple(int(x) for x in args.chroma_graph.split(",")) if args.chroma_graph else None
    args.work.mkdir(parents=True, exist_ok=True)
    from indexer.runtime.paths import data_dir

    np.save(args.work / "queries.npy", sc.queries(data_dir() / "quora_duplicate_questions.partial.tsv.gz"))
    if args.step == "ingest":
        for peer in args.peers:
            ingest(peer, args.n, args.work, graph)  # type: ignore[arg-type]
        return
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%MZ")
    res = measure(args.peers, args.n, args.work, args.target, args.rounds, args.seconds, graph)  # type: ignore[arg-type]
    res["_meta"] = {"load_end": load(), "cmd": " ".join(sys.argv), "cores": os.cpu_count()}
    name = f"peers-{args.n}-{stamp}"
    (RESULTS / f"{name}.json").write_text(json.dumps(res, indent=1))
    md = report(res, args.n, stamp, f"PYTHONPATH=$PWD python -m bench.peers_scale {' '.join(sys.argv[1:])}")
    (RESULTS / f"{name}.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
