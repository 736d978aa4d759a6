"""Ingest over HTTP into a collection created over HTTP, auto-compaction on, beside Chroma's server.

    PYTHONPATH=$PWD STRATA_DATA_DIR=/work/shared/data nice python -m bench.ingest \\
        [--vectors 1000000] [--texts 100000] [--writers 4] [--batch 256] [--rounds 1]

Data: the first `--vectors` rows of the grown-Quora corpus (`bench.scale_corpus`: id, text, all-MiniLM-L6-v2
vector, `bucket`), then `--texts` real Quora questions without vectors (the server encodes them, into a second
collection; Chroma's server does not encode, so that phase is Strata's alone). Each round starts each engine on a
fresh folder, the order alternating: Strata (`python -m service` on an empty STRATA_COLLECTIONS_DIR, collections
made by `POST /collections`, compaction policy at its defaults) and Chroma (`chroma run` from its venv,
`python -m bench.peers.venvs`; inner-product HNSW at Chroma's defaults). `--writers` aiohttp tasks send their next
batch of `--batch` as soon as the last is acknowledged: to Strata as PUTs of at most `MAX_WRITE_DOCS` (what
`strata_client` does), vectors as JSON numbers; to Chroma as one `add`, vectors as base64 float32 (what its client
sends); 429/503 sent again after their Retry-After (else 0.5 s), for up to 10 min; their loop runs `--writer-nice`
levels below the server and wrk (10; 0: equal), so that the load generator's own CPU on the shared cores is not
charged to the searches measured. Every `--sample-every` s: `/search` with wrk for `--window` s (one-vector top-10
queries), the server's RSS (and its process tree's, with a compaction's child), the load; Strata's compactions from
`GET /collections` every second. Idle: after the writes, once no compaction runs or is due (at most `--settle-s`),
the same window `--idle-windows` times, then as many again beside a nice-19 busy loop in a process of its own
(`busy_window`: the floor any background CPU puts under the ratio). Recall@10 against exact inner-product search
(numpy) on 300 query vectors: Chroma at its default ef_search, Strata at its served default and by nprobe, so that the
rates are read at equal recall. Results: bench/results/ingest-<stamp>.md and .json.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import numpy as np
import orjson

from bench import scale_corpus as sc
from bench.common import REPO, load, log, percentiles, rss, safe_ratio, start_server, wrk
from bench.common import stop as stop_proc
from bench.peers.http_load import TreeRss, closed_loop
from bench.peers.vector_worker import batches
from bench.peers.venvs import VENVS, ensure
from bench.peers_scale import CHROMA_QUERY, chroma_server, du, truth
from indexer.runtime.paths import data_dir
from indexer.runtime.priority import lower_thread
from service.schemas.documents import MAX_WRITE_DOCS

CHROMA_COLLECTIONS = "/api/v2/tenants/default_tenant/databases/default_database/collections"
NPROBES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
RETRY_FOR_S = 600  # a refused write is sent again until then (a write held back waits for a compaction)
Batch = tuple[list[int], list[str], np.ndarray | None, list[int]]  # ids, texts, vectors (None: encode), buckets


@dataclass
class Engine:
    name: str
    proc: subprocess.Popen[bytes]
    url: str
    startup_s: float
    collection: str  # Strata: the name; Chroma: the collection's id
    rows: list[dict[str, Any]] = field(default_factory=list)  # samples
    compactions: dict[str, dict[str, Any]] = field(default_factory=dict)  # Strata's, by collection@finish time
    acked: int = 0

    def bodies(self, batch: Batch) -> list[tuple[str, str, bytes, int]]:
        """(method, path, body, documents) of the requests that write one batch."""
        ids, texts, vecs, buckets = batch
        if self.name == "chroma":
            return [("POST", f"{CHROMA_COLLECTIONS}/{self.collection}/add", orjson.dumps(  # as chromadb sends it
                {"ids": [str(i) for i in ids], "embeddings": [base64.b64encode(v.astype("<f4").tobytes()).decode()
                                                               for v in vecs], "documents": texts,
                 "metadatas": [{"bucket": b} for b in buckets]}), len(ids))]
        name = self.collection if vecs is not None else f"{self.collection}-texts"
        docs = [{"id": i, "text": t, "metadata": {"bucket": b}} | ({"vector": vecs[k]} if vecs is not None else {})
                for k, (i, t, b) in enumerate(zip(ids, texts, buckets, strict=True))]
        return [("PUT", f"/collections/{name}/documents",
                 orjson.dumps({"documents": docs[k : k + MAX_WRITE_DOCS]}, option=orjson.OPT_SERIALIZE_NUMPY),
                 len(docs[k : k + MAX_WRITE_DOCS])) for k in range(0, len(docs), MAX_WRITE_DOCS)]

    def search(self, q: np.ndarray, nprobe: int | None = None) -> tuple[str, dict[str, Any]]:
        v = [round(float(x), 6) for x in q]
        if self.name == "chroma":
            return CHROMA_QUERY.format(id=self.collection), {
                "query_embeddings": [v], "n_results": 10, "include": ["documents", "metadatas", "distances"]}
        return f"/collections/{self.collection}/search", {"vector": v, "top_k": 10} | (
            {"nprobe": nprobe} if nprobe else {})


def start(name: str, work: Path) -> Engine:
    folder = work / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    if name == "chroma":
        ensure(VENVS["chroma"])
        chroma = chroma_server(folder / "data", folder)
        r = httpx.post(chroma.url + CHROMA_COLLECTIONS, json={"name": "bench", "configuration": {"hnsw": {
            "space": "ip"}}}, timeout=60)
        r.raise_for_status()
        return Engine(name, chroma.proc, chroma.url, chroma.startup_s, r.json()["id"])
    models = folder / "models"
    models.mkdir()
    (models / "minilm-mean").symlink_to(sc.encoder_dir())
    (folder / "collections").mkdir()
    proc, url, startup = start_server(None, folder, {"STRATA_COLLECTIONS_DIR": str(folder / "collections"),
                                                     "STRATA_MODELS_DIR": str(models)}, ready="/health")
    for col in ("bench", "bench-texts"):
        r = httpx.post(url + "/collections", json={"name": col, "encoder": "minilm-mean"}, timeout=120)
        if r.status_code != 201:
            raise RuntimeError(f"POST /collections {col}: {r.status_code} {r.text}")
    return Engine(name, proc, url, round(startup, 1), "bench")


async def write_all(engine: Engine, source: Any, writers: int, phase: str, out: dict[str, Any]) -> None:
    """`writers` closed loops over the batches of `source` (`http_load.closed_loop`); per-batch latency, retries and
    failures into `out`. A failed request's documents are not counted (a 504 is not retried: the server may still
    apply it, as strata_client)."""
    lat: list[float] = []
    retries = failed = 0
    examples: list[str] = []
    batches_left = iter(source)  # one iterator shared by every task: each batch is taken once

    async def step(session: aiohttp.ClientSession) -> bool:
        nonlocal retries, failed
        batch = next(batches_left, None)
        if batch is None:
            return False
        t0 = time.perf_counter()
        for method, path, body, n in engine.bodies(batch):
            give_up = time.monotonic() + RETRY_FOR_S
            while True:  # as strata_client does: a 429/503 is sent again after its Retry-After (else 0.5 s)
                async with session.request(method, path, data=body, headers={"Content-Type": "application/json"}) as r:
                    text = await r.read()
                if r.status < 300 or r.status not in (429, 503) or time.monotonic() > give_up:
                    break
                retries += 1
                await asyncio.sleep(float(r.headers.get("Retry-After", 0.5)))
            if r.status < 300:
                engine.acked += n
            else:
                failed += 1
                examples.append(f"{r.status} {text[:200]!r}")
        lat.append(time.perf_counter() - t0)
        return True

    before = engine.acked
    async with aiohttp.ClientSession(engine.url, timeout=aiohttp.ClientTimeout(total=600),
                                     connector=aiohttp.TCPConnector(limit=writers)) as session:
        wall = await closed_loop(session, writers, step)
    p = percentiles([x * 1000 for x in lat])
    docs = engine.acked - before
    out[phase] = {"docs": docs, "seconds": round(wall, 1), "docs_per_s": round(docs / wall, 1),
                  "batch_p50_ms": round(p[50], 1), "batch_p99_ms": round(p[99], 1), "retries": retries,
                  "failed_requests": failed, "failed_examples": examples[:3]}
    log(f"{engine.name} {phase}: {out[phase]}")


def writing(nice: int, writers: Any) -> None:  # noqa: ANN401 (the writers' coroutine)
    """The writers' loop on a thread `nice` levels below the server and wrk, which share its cores (0: equal)."""
    with ThreadPoolExecutor(1, initializer=lower_thread, initargs=(nice,)) as pool:
        pool.submit(asyncio.run, writers).result()


def text_batches(n: int, batch: int, first_id: int) -> Any:
    texts = sc.quora_texts(data_dir() / "quora_duplicate_questions.partial.tsv.gz")[-n:]
    for k in range(0, len(texts), batch):
        chunk = texts[k : k + batch]
        yield list(range(first_id + k, first_id + k + len(chunk))), chunk, None, [0] * len(chunk)


def sampler(engine: Engine, window: Callable[[], dict[str, Any]], every_s: float, stop: threading.Event,
            tree: TreeRss, phase: list[str]) -> None:
    """Every `every_s`: a wrk `window` on /search, the server's RSS, the load, what was acknowledged."""
    t0, last = time.perf_counter(), (0.0, 0)
    while not stop.wait(max(0.0, every_s - (time.perf_counter() - t0) % every_s)):
        w = window()
        now, mem = time.perf_counter() - t0, rss(engine.proc.pid)
        acked = engine.acked
        row = {"t_s": round(now, 1), "phase": phase[0], "acked": acked,
               "docs_per_s": round((acked - last[1]) / max(now - last[0], 1e-9), 1),
               **{k: w[k] for k in ("p50_ms", "p99_ms", "rps", "errors")}, "rss_mib": round(mem.total / 2**20),
               "anon_mib": round(mem.anon / 2**20), "tree_mib": round(tree.sample() / 2**20),
               "compacting": any(c.get("running") for c in engine.compactions.values()), "load": load()}
        last = (now, acked)
        engine.rows.append(row)
        log(f"{engine.name}: {row}")


def compaction_poller(engine: Engine, stop: threading.Event) -> None:
    """Strata's compactions as `GET /collections` shows them, once a second."""
    with httpx.Client(base_url=engine.url, timeout=30) as c:
        while not stop.wait(1.0):
            try:
                cols = c.get("/collections").json()["collections"]
            except (httpx.HTTPError, ValueError, KeyError):
                continue
            for col in cols:
                state = col["compaction"]
                engine.compactions[col["name"]] = {"running": state["running_since"] is not None,
                                                   "due": state["pending"]["due"]}
                if state.get("last"):
                    engine.compactions[f"{col['name']}@{state['last']['at']}"] = state["last"] | {
                        "collection": col["name"], "documents": col.get("documents")}


def settle(engine: Engine, limit_s: float) -> float:
    """Seconds until no compaction runs or is due (Strata), at most `limit_s`."""
    t0 = time.perf_counter()
    while engine.name == "strata" and time.perf_counter() - t0 < limit_s:
        live = [c for k, c in engine.compactions.items() if "@" not in k]
        if live and not any(c["running"] or c["due"] for c in live):
            break
        time.sleep(2)
    return round(time.perf_counter() - t0, 1)


def recall(engine: Engine, queries: np.ndarray, exact: np.ndarray, nprobe: int | None = None) -> float | None:
    got = []
    with httpx.Client(base_url=engine.url, timeout=60) as c:
        for q in queries:
            path, body = engine.search(q, nprobe)
            r = c.post(path, json=body)
            if r.status_code != 200:
                return None  # (an nprobe the served kind does not take)
            a = r.json()
            got.append([int(h["id"]) for h in a["hits"]] if engine.name == "strata" else [int(i) for i in a["ids"][0]])
    return round(float(np.mean([len(set(g) & set(t.tolist())) / 10 for g, t in zip(got, exact, strict=True)])), 4)


def visible(engine: Engine, n: int) -> dict[str, Any]:
    """Write-to-visible on the idle server: one PUT of one new text (encoded, logged, applied), then `/search` for
    that text until its document is the top hit, from sending the PUT; then a delete of it (no encoding)."""
    texts = sc.quora_texts(data_dir() / "quora_duplicate_questions.partial.tsv.gz")[:n]
    put, seen, polls, deletes = [], [], [], []
    col = f"/collections/{engine.collection}-texts"
    with httpx.Client(base_url=engine.url, timeout=120) as c:
        for i, text in enumerate(texts):
            doc = {"id": 2 * 10**9 + i, "text": f"{text} (written {i})"}
            t0 = time.perf_counter()
            c.put(f"{col}/documents", json={"documents": [doc]}).raise_for_status()
            put.append(time.perf_counter() - t0)
            polls.append(next((k for k in range(1, 51) if [h["id"] for h in c.post(f"{col}/search", json={
                "query": doc["text"], "top_k": 1}).json()["hits"]] == [doc["id"]]), 51))  # 51: not within 50
            seen.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            c.post(f"{col}/documents/delete", json={"ids": [doc["id"]]}).raise_for_status()
            deletes.append(time.perf_counter() - t0)
    return {name: {f"p{q}": round(v * 1000, 1) for q, v in percentiles(x, (50, 95, 100)).items()}
            for name, x in (("visible_ms", seen), ("put_ms", put), ("delete_ms", deletes))} | {
        "searches_until_visible_max": max(polls)}


BUSY_LOOP = "import os\nos.nice(19)\nwhile True:\n    pass\n"


def busy_window(window: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """The idle window again beside a nice-19 busy loop in a process of its own (no memory traffic, no lock
    shared with the server): the cost of any background CPU at all on these cores, which a compaction's child is;
    the floor under what the p99 / idle ratio can reach while one runs."""
    loop = subprocess.Popen([sys.executable, "-c", BUSY_LOOP])
    try:
        time.sleep(1)
        return window() | {"load": load()}
    finally:
        loop.kill()
        loop.wait()


def run(name: str, args: argparse.Namespace, queries: np.ndarray, exact: np.ndarray, data: Path, work: Path
        ) -> dict[str, Any]:
    log(f"{name}: starting, load {load()}")
    engine = start(name, work)
    out: dict[str, Any] = {"startup_s": engine.startup_s, "load_start": load()}
    tree = TreeRss(engine.proc.pid)
    stop, phase = threading.Event(), ["vectors"]
    bodies = [engine.search(q) for q in queries[:100]]

    def window() -> dict[str, Any]:  # one wrk run of `--window` s on the engine's search path
        return wrk(engine.url, [b for _, b in bodies], args.search_conns, args.window, work, path=bodies[0][0],
                   timeout_s=10)

    threads = [threading.Thread(target=sampler, args=(engine, window, args.sample_every, stop, tree, phase),
                                daemon=True)]
    if name == "strata":
        threads.append(threading.Thread(target=compaction_poller, args=(engine, stop), daemon=True))
    for t in threads:
        t.start()
    try:
        writing(args.writer_nice, write_all(engine, batches(data, args.vectors, args.batch), args.writers, "vectors",
                                            out))
        if name == "strata" and args.texts:
            phase[0] = "texts"
            writing(args.writer_nice, write_all(engine, text_batches(args.texts, args.batch, 10**9), args.writers,
                                                "texts", out))
        phase[0] = "settling"
        out["settle_s"] = settle(engine, args.settle_s)
        stop.set()
        for t in threads[:1]:
            t.join()
        out["idle"] = [window() | {"load": load()} for _ in range(args.idle_windows)]
        out["idle_busy"] = [busy_window(window) for _ in range(args.idle_windows)]
        out["recall_default"] = recall(engine, queries, exact)
        if name == "strata":
            out["recall_nprobe"] = {}
            for k in NPROBES:  # up to the first that reaches 0.9995, or that the served kind refuses
                out["recall_nprobe"][k] = got = recall(engine, queries, exact, k)
                if got is None or got >= 0.9995:
                    break
            if args.texts and args.visible:
                out["visible"] = visible(engine, args.visible)
        mem = rss(engine.proc.pid)
        out |= {"rss_end_mib": round(mem.total / 2**20), "tree_peak_mib": round(tree.stop() * 1024),
                "disk_bytes": du(work / name / ("data" if name == "chroma" else "collections")),
                "samples": engine.rows, "compactions": [c for k, c in engine.compactions.items() if "@" in k],
                "load_end": load()}
    finally:
        stop.set()
        stop_proc(engine.proc)
    return out


def texts(r: dict[str, Any]) -> str:
    t = r.get("texts")
    return "—" if t is None else f"{t['docs_per_s']}" + (
        f" ({t['failed_requests']} PUTs failed: {t['failed_examples'][0][:40]}…)" if t["failed_requests"] else "")


def ms(x: float) -> str:
    return "no answer" if x == float("inf") else "—" if x != x else f"{x:.1f}"


def summary(r: dict[str, Any], phase: str) -> str:
    """`phase`'s windows in which writes were acknowledged (not those where all were held back at the overlay's
    bound), p50 / p99 as the median of windows (a window with no answer within it counts as infinite), the worst
    window's p99, and the median p99 over the idle windows' median p99."""
    idle = float(np.median([w["p99_ms"] for w in r["idle"]]))
    won = [s for s in r["samples"] if s["phase"] == phase and s["docs_per_s"] > 0]
    if not won:
        return "— | — | — |"
    p50, p99 = ([s[k] if s["rps"] else float("inf") for s in won] for k in ("p50_ms", "p99_ms"))
    med = float(np.median(p99))
    ratio = "∞" if med == float("inf") else f"{med / idle:.2f}"
    held = sum(s["phase"] == phase for s in r["samples"]) - len(won)
    windows = f"({len(won)} windows, {held} held)"
    return f"{ms(float(np.median(p50)))} / {ms(med)} | {ms(max(p99))} | **{ratio}×** {windows} |"


def report(rounds: list[dict[str, Any]], args: argparse.Namespace, stamp: str, cmd: str) -> str:
    n_docs = {"strata": args.vectors + args.texts, "chroma": args.vectors}
    lines = [f"# Ingest over HTTP: {args.vectors:,} documents with vectors + {args.texts:,} texts ({stamp})", "",
             f"`{cmd}`  ", f"{args.writers} writers, batches of {args.batch} (Strata: PUTs of {MAX_WRITE_DOCS}); "
             f"/search sampled every {args.sample_every:g} s with wrk ({args.search_conns} connection, {args.window:g} "
             f"s); {len(rounds)} round(s), the engines' order alternating; {os.cpu_count()} cores shared with other "
             "jobs (load averages below).", "",
             "| round | engine | vectors docs/s | batch p50 / p99 ms | texts docs/s | search p50 / p99 ms idle | "
             "writing vectors: p50 / p99 ms | worst p99 | p99 / idle | writing texts: p50 / p99 ms | worst p99 | "
             "p99 / idle | recall@10 | server RSS peak / end MiB | tree peak MiB | disk B/doc | load start → end |",
             "|" + "---|" * 17]
    ratios: list[float | None] = []
    notes: list[str] = []
    for k, res in enumerate(rounds, 1):
        for e, r in res.items():
            v, idle = r["vectors"], {q: float(np.median([w[q] for w in r["idle"]])) for q in ("p50_ms", "p99_ms")}
            peak = max((s["rss_mib"] for s in r["samples"]), default=r["rss_end_mib"])
            lines.append(f"| {k} | {e} | **{v['docs_per_s']:.0f}** | {v['batch_p50_ms']:.0f} / {v['batch_p99_ms']:.0f} "
                         f"| {texts(r)} | {idle['p50_ms']:.1f} / "
                         f"{idle['p99_ms']:.1f} | {summary(r, 'vectors')} {summary(r, 'texts')} {r['recall_default']} "
                         f"| {peak} / {r['rss_end_mib']} | {r['tree_peak_mib']} | {r['disk_bytes'] / n_docs[e]:.0f} | "
                         f"{r['load_start']} → {r['load_end']} |")
        if {"strata", "chroma"} <= res.keys():
            target = res["chroma"]["recall_default"] or 0
            knob = next((n for n, x in res["strata"]["recall_nprobe"].items() if x is not None and x >= target), None)
            ratios.append(safe_ratio(res["strata"]["vectors"]["docs_per_s"], res["chroma"]["vectors"]["docs_per_s"]))
            notes.append(f"- Round {k}: ingest with vectors, Strata / Chroma **{ratios[-1]}×**; recall@10 Chroma "
                         f"{target} (default ef_search), Strata {res['strata']['recall_default']} (served default), "
                         f"≥ Chroma's from nprobe {knob}.")
    for k, res in enumerate(rounds, 1):
        for e, r in res.items():
            if r.get("idle_busy"):
                busy = float(np.median([w["p99_ms"] for w in r["idle_busy"]]))
                idle99 = float(np.median([w["p99_ms"] for w in r["idle"]]))
                notes.append(f"- Round {k}, {e}: idle search p99 beside a nice-19 busy loop (`busy_window`) "
                             f"{busy:.1f} ms against {idle99:.1f} alone: **{busy / idle99:.2f}×** before any write "
                             "(the floor under p99 / idle while a compaction's child runs).")
    if notes:
        lines += ["", *notes]
    if ratios:
        lines += ["", f"**Strata / Chroma, ingest with vectors: median {float(np.median(ratios)):.2f}×** "
                  "(target ≥ 2×)."]
    for k, res in enumerate(rounds, 1):
        if "strata" in res:
            r = res["strata"]
            sweep = ", ".join(f"{n}: {x}" for n, x in r["recall_nprobe"].items())
            vis = r.get("visible")
            lines += ["", f"Round {k}, Strata: recall@10 by nprobe {sweep}. Waited {r['settle_s']} s after the last "
                      f"write for no compaction to run or be due (at most {args.settle_s:g})."]
            if vis:
                t = {k: " / ".join(map(str, v.values())) for k, v in vis.items() if isinstance(v, dict)}
                lines.append(f"Write-to-visible on the idle server ({args.visible} texts, one per PUT), p50 / p95 / "
                             f"max: {t['visible_ms']} ms (the PUT alone {t['put_ms']}; searches until visible, at "
                             f"most {vis['searches_until_visible_max']}); a delete {t['delete_ms']} ms.")
            lines += ["Compactions (background, default policy):", "",
                      "| collection | finished | outcome | seconds | index kind | documents served |",
                      "|---|---|---|---|---|---|"]
            lines += [f"| {c['collection']} | {c['at']} | {c['outcome']} | {c['seconds']:.1f} | "
                      f"{c.get('index_kind')} | {c.get('documents')} |" for c in r["compactions"]]
    lines += ["", "Samples (during the ingest, then while compaction settles):", "", "| round | engine | t s | phase | "
              "acked | docs/s | p50 ms | p99 ms | req/s | errors | RSS MiB (anon) | tree MiB | compacting | load |",
              "|" + "---|" * 14]
    lines += [f"| {k} | {e} | {s['t_s']} | {s['phase']} | {s['acked']} | {s['docs_per_s']:.0f} | {s['p50_ms']:.1f} | "
              f"{s['p99_ms']:.1f} | {s['rps']:.0f} | {s['errors']} | {s['rss_mib']} ({s['anon_mib']}) | "
              f"{s['tree_mib']} | {'yes' if s['compacting'] else ''} | {s['load']} |"
              for k, res in enumerate(rounds, 1) for e, r in res.items() for s in r["samples"]]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--vectors", type=int, default=1_000_000, help="documents written with their vectors")
    p.add_argument("--texts", type=int, default=100_000, help="documents written as texts (Strata encodes them)")
    p.add_argument("--writers", type=int, default=4)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--writer-nice", type=int, default=10, help="the writers' nice levels below server and wrk")
    p.add_argument("--engines", nargs="+", choices=["strata", "chroma"], default=["strata", "chroma"])
    p.add_argument("--rounds", type=int, default=1, help="each engine once per round, the order alternating")
    p.add_argument("--sample-every", type=float, default=10.0)
    p.add_argument("--window", type=float, default=2.0, help="seconds of wrk per sample")
    p.add_argument("--search-conns", type=int, default=1)
    p.add_argument("--idle-windows", type=int, default=5)
    p.add_argument("--visible", type=int, default=50, help="write-to-visible samples after the ingest (Strata)")
    p.add_argument("--settle-s", type=float, default=120.0, help="longest wait for compaction to settle")
    p.add_argument("--work", type=Path, default=REPO / "bench" / "work" / "ingest")
    p.add_argument("--out-dir", type=Path, default=REPO / "bench" / "results")
    args = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a kill stops the servers too (`run`'s finally)
    quora = data_dir() / "quora_duplicate_questions.partial.tsv.gz"
    # a corpus's first rows do not depend on its size: the smallest one made that is large enough, else one made
    made = sorted((int(d.name.split("-")[1]), d) for d in sc.cache_dir().glob(f"corpus-*-s1-t{sc.TEXT_VERSION}")
                  if (d / ".complete").is_file())
    data = next((d for k, d in made if k >= args.vectors), None) or sc.corpus(
        quora, -(-args.vectors // sc.ROWS_PER_FILE) * sc.ROWS_PER_FILE)
    args.work.mkdir(parents=True, exist_ok=True)
    queries = sc.queries(quora)
    exact = truth(args.work, args.vectors, queries, data)
    rounds = []
    for k in range(args.rounds):
        order = args.engines if k % 2 == 0 else args.engines[::-1]
        rounds.append({e: run(e, args, queries, exact, data, args.work) for e in order})
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%MZ")
    cmd = "PYTHONPATH=$PWD python -m bench.ingest " + " ".join(sys.argv[1:])
    md = report(rounds, args, stamp, cmd)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / f"ingest-{stamp}.md").write_text(md)
    (args.out_dir / f"ingest-{stamp}.json").write_text(json.dumps(
        {"command": cmd, "args": vars(args), "rounds": rounds}, indent=1, default=str))
    print(md)


if __name__ == "__main__":
    main()
