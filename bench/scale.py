"""What Strata costs as N grows: build, bytes per document, memory, startup, swaps, search latency, writes.

    PYTHONPATH=$PWD STRATA_DATA_DIR=/work/shared/data python -m bench.scale 100000 1000000

Run it at normal priority: the build lowers its own (`STRATA_BUILD_PRIORITY`, nice 19 by default), while the server
and wrk inherit the bench's; a bench started with `nice` measures a starved server (the first 1M run, at nice 10
beside load 15, reported a dense p50 of 101 ms where the same server answers in 12 ms at normal priority).

Per size N, on a corpus of Quora's real texts and real vectors grown to N (`bench.scale_corpus`: how and why):
- `indexer build --data <parquet folder>` from the corpus's vectors (nothing encoded), under /usr/bin/time:
  seconds per stage (the manifest's `build_seconds`) and peak RSS;
- bytes per document by part: vectors (IVF codes), id map (the lists' int64 ids), the quantizer, store (texts,
  external ids and metadata JSON), filters (the store's metadata table and its index), lexical (BM25 files), write
  log (per document written by PUT);
- a server (`python -m service`, STRATA_MMAP default on): startup to /ready, steady RSS after warm-up, then
  `/search` p50/p99 and throughput with wrk at 1 and 8 connections, two interleaved rounds, on 100 held-out Quora
  questions: dense and hybrid sent as text (the server encodes) and as the query's vector, lexical as text, each
  with and without a 1 % filter (`{"bucket": 7}`); the same queries timed in-process (the lexical engine itself,
  Strata's lexical search, the ANN index) and the scale targets computed from them (`targets`);
- dense recall@10 of the served defaults against exact search on 300 query vectors (in-process, same version);
- `PUT /documents` latency of 16 documents with vectors (20 writes), `indexer compact` time, and the swap to the
  compacted version under search load: RSS sampled every 20 ms (total and anonymous), swap seconds.
- `--cold-filters` instead: a new filter's first request beside its second and warm ones (`cold_filters`).
Results: bench/results/scale-<N>-<stamp>.md and .json. Resumable: a size whose build is there is not rebuilt
(`--rebuild` forces it). Every figure is printed beside the load average it was measured under.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import httpx
import numpy as np

from bench import scale_corpus as sc
from bench.common import PeakSampler, load, log, rss, start_server
from bench.common import wrk as run_wrk

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
WRK_SECONDS = int(os.environ.get("STRATA_SCALE_WRK_S", "8"))
FILTER = {"bucket": 7}
MODES = ("dense", "lexical", "hybrid")


def _env() -> dict[str, str]:
    return os.environ | {"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}


def build(n: int, corpus: Path, root: Path, model: Path, threads: int) -> dict[str, object]:
    """`indexer build` under /usr/bin/time -v: the manifest's stage seconds and the peak RSS."""
    cmd = ["/usr/bin/time", "-v", sys.executable, "-m", "indexer.cli", "build", "--model", str(model), "--data",
           str(corpus), "--root", str(root), "--no-eval", "--threads", str(threads), "--keep", "3"]
    log(f"N={n}: building ({' '.join(cmd[2:])}), load {load()}")
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-3000:])
    peak_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr).group(1))  # type: ignore[union-attr]
    # CPU seconds: what the build costs whatever the machine's load (its wall time is the load's figure)
    cpu = sum(float(m) for m in re.findall(r"(?:User|System) time \(seconds\): ([\d.]+)", r.stderr))
    return {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "peak_rss_mib": round(peak_kb / 1024),
            "load": load(), "priority": os.environ.get("STRATA_BUILD_PRIORITY", "build default (nice 19)")}


def version_dir(root: Path) -> Path:
    from indexer.runtime.layout import IndexRoot

    ir = IndexRoot(root)
    return ir.version_dir(ir.current_version() or "")


def bytes_per_doc(folder: Path, n: int, code_size: int) -> dict[str, float]:
    """Bytes per document of each part of a version (the write log's is measured after the PUTs)."""
    index = (folder / "index.faiss").stat().st_size
    con = sqlite3.connect(f"file:{folder / 'store.sqlite'}?mode=ro", uri=True)
    try:
        pages = dict(con.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name").fetchall())
    finally:
        con.close()
    filters = sum(v for k, v in pages.items() if k.startswith("doc_meta"))
    store = (folder / "store.sqlite").stat().st_size - filters
    lexical = sum(f.stat().st_size for f in (folder / "lexical").rglob("*") if f.is_file()) \
        if (folder / "lexical").is_dir() else 0
    return {"vectors": code_size, "id_map": 8.0, "quantizer+lists": round((index - n * (code_size + 8)) / n, 2),
            "store": round(store / n, 1), "filters": round(filters / n, 1), "lexical": round(lexical / n, 1),
            "total_on_disk": round((index + store + filters + lexical) / n, 1)}


def start(root: Path, tmp: Path, env: dict[str, str], args: tuple[str, ...] = (), checkout: Path = REPO
          ) -> tuple[subprocess.Popen[bytes], str, float]:
    """`python -m service ARGS` on the root, from `checkout`; (process, url, seconds until /ready answered 200)."""
    return start_server(root, tmp, env, args, checkout)


def wrk(url: str, bodies: list[dict[str, object]], conns: int, tmp: Path) -> dict[str, object]:
    """p50/p99 ms and requests/s of POST /search cycling through `bodies` for `WRK_SECONDS`."""
    r = run_wrk(url, bodies, conns, WRK_SECONDS, tmp, timeout_s=2)
    return {k: r[k] for k in ("p50_ms", "p99_ms", "rps", "errors", "bad_answers") if k in r}


def search_bodies(mode: str, qvecs: np.ndarray, qtexts: list[str],
                  filter_of: Callable[[int], dict[str, object] | None] = lambda i: None, via: str = "vector"
                  ) -> list[dict[str, object]]:
    """`/search` bodies of the first 100 queries for `mode`, the i-th with the filter `filter_of(i)` when it gives one.
    `via` "vector": dense sends the query vector, hybrid the vector and the text (nothing encoded by the server);
    "text": the text alone, as a user sends it (the server encodes it for dense and hybrid). Lexical: the text."""
    out: list[dict[str, object]] = []
    for i, (v, t) in enumerate(zip(qvecs[:100], qtexts[:100], strict=True)):
        body: dict[str, object] = {"top_k": 10, "mode": mode}
        if via == "vector" and mode != "lexical":
            body["vector"] = [round(float(x), 6) for x in v]
        if mode != "dense" or via == "text":
            body["query"] = t
        if (flt := filter_of(i)) is not None:
            body["filter"] = flt
        out.append(body)
    return out


THIS = "this tree"  # the server of the checkout running the bench (`--against` adds another's)
QUERY_KINDS = (("dense", "text"), ("hybrid", "text"), ("dense", "vector"), ("hybrid", "vector"), ("lexical", "text"))


def latencies(urls: dict[str, str], qvecs: np.ndarray, qtexts: list[str], tmp: Path, rounds: int = 2
              ) -> list[dict[str, object]]:
    """wrk at 1 and 8 connections for each mode and query kind, with and without the 1 % filter, against each server
    of `urls` (label → URL: this tree's, and with `--against` another checkout's serving the same version). The
    kinds take turns inside each (filter, connections) pair, the servers inside each kind, and `rounds` passes repeat
    it all, so that the ratios between modes (and between servers) compare runs seconds apart, under the same load."""
    out, first_ms = [], {}
    for rnd in range(rounds):
        for filtered in (False, True):
            for conns in (1, 8):
                for mode, via in QUERY_KINDS:
                    bodies = search_bodies(mode, qvecs, qtexts, (lambda i: FILTER) if filtered else (lambda i: None),
                                           via)
                    for server, url in urls.items():
                        key = (server, mode, via, filtered)
                        if key not in first_ms:  # a configuration's first request, timed apart: a filter's first
                            t0 = time.perf_counter()  # use builds its row set, inside wrk's run a timeout
                            httpx.post(f"{url}/search", json=bodies[0], timeout=120).raise_for_status()
                            first_ms[key] = round((time.perf_counter() - t0) * 1000, 1)
                        r = wrk(url, bodies, conns, tmp)
                        row = {"round": rnd + 1, "server": server, "mode": mode, "via": via,
                               "filter": "1 %" if filtered else "none", "conns": conns, **r, "load": load(),
                               "first_request_ms": first_ms[key] if rnd == 0 and conns == 1 else None}
                        log(f"  {row}")
                        out.append(row)
    return out


def in_process(folder: Path, qvecs: np.ndarray, qtexts: list[str], rounds: int = 3) -> dict[str, float]:
    """p50 ms of the served version's engines called in this process (no HTTP), on the same 100 queries: the
    lexical engine itself (top 10; with the 1 % filter's rows, on its first uses and used again), Strata's lexical
    search around it, the ANN index (with the 1 % filter too, on its first uses and used again)."""
    from indexer.runtime.version import IndexVersion

    v = IndexVersion(folder, mmap=True)
    try:
        match = v.match(FILTER)
        allowed_rows = match.lexical_rows(v.lexical.rows_of)
        first_use = allowed_rows.copy()  # another array: never prepared (a filter's first requests)
        v.lexical.prepare_rows(allowed_rows)  # a filter used again (pisa: its own postings)
        flt, flt_again = match.prepared, v.ann.with_codes(match.prepared)  # used again: IVF, its own lists
        calls: dict[str, Callable[[int], object]] = {
            "engine": lambda i: v.lexical.search(qtexts[i], 10),
            "engine_filter": lambda i: v.lexical.search(qtexts[i], 10, allowed_rows=first_use),
            "engine_filter_again": lambda i: v.lexical.search(qtexts[i], 10, allowed_rows=allowed_rows),
            "lexical_search": lambda i: v.lexical_search([qtexts[i]], 10),
            "ann": lambda i: v.search(qvecs[i:i + 1], 10),
            "ann_filter": lambda i: v.ann.filtered_search(qvecs[i:i + 1], 10, flt),
            "ann_filter_again": lambda i: v.ann.filtered_search(qvecs[i:i + 1], 10, flt_again)}
        times: dict[str, list[float]] = {k: [] for k in calls}
        for _ in range(rounds):
            for i in range(min(100, len(qtexts))):
                for name, call in calls.items():
                    t0 = time.perf_counter()
                    call(i)
                    times[name].append((time.perf_counter() - t0) * 1000)
        return {f"{k}_p50_ms": round(float(np.median(t)), 3) for k, t in times.items()} | {
            "engine": v.manifest.lexical.engine if v.manifest.lexical else None, "load": load()}
    finally:
        v.close()


def legs(folder: Path, qvecs: np.ndarray, qtexts: list[str], variants: list[str], rounds: int = 2) -> list[str]:
    """Hybrid's lexical leg in process: exact beside each bounded variant `SELECTIVE_DF:DEPTH` (PISA's pruned leg;
    the bound forced where the query reaches `BOUNDED_FROM`), interleaved per query, completed with the dense top 100:
    p50/mean/p90 ms, the leg's top 100 against the exact one's, the fused top 10 (convex 0.5) against the exact
    hybrid's. Markdown table rows."""
    from indexer.runtime import bounded_leg as bl
    from indexer.runtime import fusion
    from indexer.runtime import lexical_pisa as lp
    from indexer.runtime.version import IndexVersion

    v = IndexVersion(folder, mmap=True)
    lx, sides = v.lexical, {"exact": None, **{x: tuple(map(float, x.split(":"))) for x in variants}}
    assert lx is not None, "the version has no lexical index"
    ms: dict[str, list[float]] = {k: [] for k in sides}
    top: dict[str, list[set[int]]] = {k: [] for k in sides}
    fused: dict[str, list[set[int]]] = {k: [] for k in sides}
    n_bounded = 0
    for rnd in range(rounds):
        for i, text in enumerate(qtexts):
            dense = v.search(qvecs[i:i + 1], fusion.HYBRID_DEPTH)
            for name, var in sides.items():
                if var is not None:
                    lp.Engine.SELECTIVE_DF, lp.PRUNED_DEPTH = var[0], int(var[1])
                t0 = time.perf_counter()
                leg = bl.begin(lx, text, fusion.HYBRID_DEPTH, bounded_from=None if var is None else bl.BOUNDED_FROM)
                got = bl.complete(lx, leg, dense[1][0])
                ms[name].append((time.perf_counter() - t0) * 1000)
                n_bounded += leg.bounded and rnd == 0
                top[name].append(set(got[1].tolist()))
                fused[name].append(set(fusion.convex((dense[0][0], dense[1][0]), got, 10)[1].tolist()))
    v.close()
    out = [f"- {n_bounded // max(len(variants), 1)} of {len(qtexts)} questions took the bounded leg; load {load()}",
           "", "| leg | p50 ms | mean ms | p90 ms | top 100 ∩ exact's | fused top 10 overlap (identical) |",
           "|---|---|---|---|---|---|"]
    for name in sides:
        t, e = np.array(ms[name]), zip(top[name], top["exact"], strict=True)
        f = [len(a & b) / max(len(b), 1) for a, b in zip(fused[name], fused["exact"], strict=True)]
        out.append(f"| {name} | {np.median(t):.2f} | {t.mean():.2f} | {np.percentile(t, 90):.2f} | "
                   f"{np.mean([len(a & b) / max(len(b), 1) for a, b in e]):.3f} | "
                   f"{np.mean(f):.3f} ({sum(x == 1 for x in f)} / {len(f)}) |")
    return out


def targets(search: list[dict[str, object]], inproc: dict[str, object]) -> list[str]:
    """The scale targets from one run's figures: each a ratio of p50s (or of throughputs) from the same round."""
    lines = []
    for rnd, server in sorted({(int(s["round"]), str(s.get("server", THIS))) for s in search}):  # type: ignore[call-overload]
        p = {(s["mode"], s["via"], s["filter"], s["conns"]): s for s in search
             if s["round"] == rnd and s.get("server", THIS) == server}
        on = "" if server == THIS else f" ({server})"
        for flt in ("none", "1 %"):
            d1, h1 = p[("dense", "text", flt, 1)], p[("hybrid", "text", flt, 1)]
            d8, h8 = p[("dense", "text", flt, 8)], p[("hybrid", "text", flt, 8)]
            lines.append(f"- round {rnd}{on}, filter {flt}: hybrid / dense p50 (text queries, 1 conn) "
                         f"{float(h1['p50_ms']) / float(d1['p50_ms']):.2f} (target ≤ 1.5); hybrid / dense req/s "
                         f"at 8 conns "
                         f"{float(h8['rps']) / float(d8['rps']):.2f} (target ≥ 0.6)")
        if inproc and server == THIS:
            lex, dv = p[("lexical", "text", "none", 1)], p[("dense", "vector", "none", 1)]
            overhead = float(dv["p50_ms"]) - float(inproc["ann_p50_ms"])  # type: ignore[arg-type]
            bound = 1.5 * float(inproc["engine_p50_ms"]) + overhead  # type: ignore[arg-type]
            lines.append(f"- round {rnd}: lexical HTTP p50 {lex['p50_ms']} ms vs 1.5 × engine in-process p50 "
                         f"{inproc['engine_p50_ms']} ms + dense HTTP overhead {overhead:.2f} ms = {bound:.2f} ms "
                         f"(ratio {float(lex['p50_ms']) / bound:.2f}, target ≤ 1)")
    return lines


def cold_filters(url: str, qvecs: np.ndarray, qtexts: list[str], rounds: int = 8) -> dict[str, object]:
    """Per mode, interleaved: a 1 % filter no request has used, sent with four queries (first, second, then two warm,
    after a pause for what the cache prepares on its own thread); the process's first filtered request apart."""
    ms, server = {}, {}
    with httpx.Client(base_url=url, timeout=120) as c:
        for r in range(rounds):
            for m, mode in enumerate(MODES):
                bodies = search_bodies(mode, qvecs[4 * r:], qtexts[4 * r:], lambda i, b=10 + 3 * r + m: {"bucket": b})
                for use, body in enumerate(bodies[:4]):
                    time.sleep(0.5 if use == 2 else 0)
                    t0 = time.perf_counter()
                    answer = c.post("/search", json=body).raise_for_status().json()
                    key = (mode, ("first", "second", "warm", "warm")[use])
                    ms.setdefault(key, []).append((time.perf_counter() - t0) * 1000)
                    server.setdefault(key, []).append(float(answer["search_ms"]))
    out: dict[str, object] = {"process_first_ms": round(ms[("dense", "first")][0], 1), "load": load()}
    for mode in MODES:
        p50 = {use: float(np.median(ms[(mode, use)])) for use in ("first", "second", "warm")}
        out[mode] = {**{f"{u}_p50_ms": round(v, 2) for u, v in p50.items()},
                     **{f"server_{u}_p50_ms": round(float(np.median(server[(mode, u)])), 2) for u in ("first", "warm")},
                     "first_over_warm": round(p50["first"] / p50["warm"], 2)}
        log(f"  cold filters, {mode}: {out[mode]}")
    return out


def cold_table(c: dict[str, dict[str, float]]) -> list[str]:
    row = ("| {} | {first_p50_ms} | {second_p50_ms} | {warm_p50_ms} | {first_over_warm} | {server_first_p50_ms} / "
           "{server_warm_p50_ms} |")
    return [] if not c else [f"- new filters (`--cold-filters`), 8 a mode; the process's first filtered request "
                             f"{c['process_first_ms']} ms; load {c['load']}:", "", "| mode | first p50 ms | second p50 "
                             "ms | warm p50 ms | first / warm | server first / warm p50 ms |", "|---" * 6 + "|",
                             *(row.format(m, **c[m]) for m in MODES), ""]


def recall(folder: Path, qvecs: np.ndarray) -> dict[str, float]:
    """Dense recall@10 of the served defaults against exact search, same version (in-process, memory-mapped)."""
    from indexer.runtime.version import IndexVersion

    v = IndexVersion(folder, mmap=True)
    try:
        _, got = v.ann.search(qvecs, 10)
        _, exact = v.ann.exact_search(qvecs, 10)
        r = np.mean([len(set(g) & set(e)) / 10 for g, e in zip(got, exact, strict=True)])
        return {"recall_at_10": round(float(r), 4), **v.ann.defaults()}
    finally:
        v.close()


def writes(url: str, dim: int, n: int) -> dict[str, float]:
    rng = np.random.default_rng(n)
    took = []
    with httpx.Client(base_url=url, timeout=60) as c:
        for w in range(20):
            vecs = rng.normal(size=(16, dim)).astype(np.float32)
            docs = [{"id": n + 1_000_000 + 16 * w + k, "text": f"written document {w} {k}",
                     "metadata": {"bucket": 7, "year": 2025, "lang": "en"}, "vector": vecs[k].tolist()}
                    for k in range(16)]
            t0 = time.perf_counter()
            r = c.put("/documents", json={"documents": docs})
            took.append((time.perf_counter() - t0) * 1000)
            r.raise_for_status()
    return {"put16_p50_ms": round(float(np.percentile(took, 50)), 1),
            "put16_p99_ms": round(float(np.percentile(took, 99)), 1)}


def next_version(root: Path, model: Path, threads: int, how: str) -> dict[str, object]:
    """The version the swap goes to: `indexer compact` (timed), or, where compaction is too long for one sitting
    (about an hour at 10M), a byte copy of the served version under a new name. A copy has its own inodes, so its
    pages are as new to the page cache as a compacted version's: the swap's memory is measured the same way."""
    t0 = time.perf_counter()
    if how == "copy":
        from indexer.runtime.layout import IndexRoot, new_version_name

        ir = IndexRoot(root)
        name = new_version_name()
        shutil.copytree(version_dir(root), ir.versions_dir / f".{name}.tmp")
        (ir.versions_dir / f".{name}.tmp").rename(ir.version_dir(name))
        ir.set_current(name)
        return {"copy_s": round(time.perf_counter() - t0, 1)}
    r = subprocess.run([sys.executable, "-m", "indexer.cli", "compact", "--root", str(root), "--model", str(model),
                        "--no-eval", "--threads", str(threads)], cwd=REPO, env=_env(), capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-3000:])
    return {"compact_s": round(time.perf_counter() - t0, 1)}


def dense_searches(url: str, qvecs: np.ndarray, stop: threading.Event) -> None:
    """A closed loop of dense `/search` requests (the query vectors in turn) until `stop` is set: a swap's load."""
    with httpx.Client(base_url=url, timeout=60) as c:
        i = 0
        while not stop.is_set():
            c.post("/search", json={"vector": qvecs[i % len(qvecs)].tolist(), "top_k": 10})
            i += 1


def swap(url: str, pid: int, root: Path, model: Path, qvecs: np.ndarray, threads: int,
         how: str = "compact") -> dict[str, object]:
    """The next version (compacted or copied), then the swap to it under search load, RSS sampled."""
    made = next_version(root, model, threads, how)
    # steady under this load: one pass over every query vector the load cycles through, first (compaction's writes
    # push the served version's pages out of the page cache; without the pass, their return during the swap was
    # counted as the swap's memory: 538 -> 2,510 MiB at 10M, `scale-10000000-20261128T1406Z.md`)
    with httpx.Client(base_url=url, timeout=60) as c:
        for q in qvecs:
            c.post("/search", json={"vector": q.tolist(), "top_k": 10})
    steady = rss(pid)
    stop = threading.Event()
    loaders = [threading.Thread(target=dense_searches, args=(url, qvecs, stop)) for _ in range(2)]
    with PeakSampler(pid) as peak:
        for t in loaders:
            t.start()
        t1 = time.perf_counter()
        resp = httpx.post(f"{url}/admin/reload", timeout=600)
        swap_s = time.perf_counter() - t1
        time.sleep(1.0)  # the old version is closed once its leases drain
        stop.set()
        for t in loaders:
            t.join()
    after = rss(pid)
    return {**made, "swap_s": round(swap_s, 2), "swap_outcome": resp.json().get("outcome"),
            "steady_rss_mib": round(steady.total / 2**20), "steady_anon_mib": round(steady.anon / 2**20),
            "swap_peak_rss_mib": round(peak.peak_total / 2**20), "swap_peak_anon_mib": round(peak.peak_anon / 2**20),
            "swap_ratio_rss": round(peak.peak_total / steady.total, 3),
            "swap_ratio_anon": round(peak.peak_anon / steady.anon, 3),
            "after_swap_rss_mib": round(after.total / 2**20)}


def run_size(n: int, quora: Path, work: Path, threads: int, rebuild: bool, mmap: bool,
             save: Callable[[dict[str, object]], None], swap_to: str = "compact", against: Path | None = None
             ) -> dict[str, object]:
    """Every measurement of one size; `save(out)` after each stage, so that a run cut short keeps what it had."""
    from indexer.runtime.manifest import Manifest

    model = sc.encoder_dir()
    corpus = sc.corpus(quora, n)
    root = work / f"root-{n}"
    state = work / f"build-{n}.json"
    if rebuild and root.exists():
        shutil.rmtree(root)
        state.unlink(missing_ok=True)
    if not state.is_file():
        state.write_text(json.dumps(build(n, corpus, root, model, threads) | {"version": version_dir(root).name}))
    built = json.loads(state.read_text())
    # a rerun serves the built version again, without the writes of the run before (resumable, same figures)
    from indexer.runtime.layout import IndexRoot

    IndexRoot(root).set_current(built["version"])
    shutil.rmtree(root / "writes", ignore_errors=True)
    folder = version_dir(root)
    manifest = Manifest.load(folder)
    dim = manifest.model.dim
    code = 2 * dim if manifest.index.params.kind == "ivf" and manifest.index.params.codec == "SQfp16" else 4 * dim
    out: dict[str, object] = {"n_docs": manifest.index.ntotal, "dim": dim, "index": manifest.index.factory,
                              "build": built,
                              "stages_s": {k: round(v, 1) for k, v in manifest.build_seconds.model_dump().items()},
                              "nlist_reason": getattr(manifest.index.params, "nlist_reason", None),
                              "bytes_per_doc": bytes_per_doc(folder, manifest.index.ntotal, code)}
    qvecs, qtexts = sc.queries(quora), sc.query_texts(quora)
    if swap_to != "cold":
        out["recall"] = recall(folder, qvecs)
    save(out)
    log(f"N={n}: {out}")
    htexts, hvecs = sc.held_out(quora)  # what users send: held-out questions, as text or as their vectors
    if swap_to != "cold":
        out["in_process"] = in_process(folder, hvecs, htexts)
        log(f"N={n}: in-process {out['in_process']}")
    tmp = work / "tmp"
    tmp.mkdir(exist_ok=True)
    proc, url, startup = start(root, tmp, {"STRATA_MMAP": "1" if mmap else "0", "STRATA_THREADS": "1"})
    try:
        out["startup_s"] = round(startup, 2)
        for q in qvecs[:200]:  # warm-up
            httpx.post(f"{url}/search", json={"vector": q.tolist(), "top_k": 10}, timeout=60)
        out["steady_rss_mib"] = round(rss(proc.pid).total / 2**20)
        save(out)
        if swap_to == "cold":  # `--cold-filters`: new filters' first requests only
            out["cold_filters"] = cold_filters(url, qvecs, qtexts)
            out["load_end"] = load()
            return out
        urls = {THIS: url}
        if against is not None:  # the same version served by another checkout, side by side
            rev = subprocess.run(["git", "-C", str(against), "rev-parse", "--short", "HEAD"], capture_output=True,
                                 text=True).stdout.strip()
            label = f"{against} at {rev}"
            other, urls[label], _ = start(root, tmp, {"STRATA_MMAP": "1" if mmap else "0",
                                                             "STRATA_THREADS": "1"}, checkout=against)
            for q in qvecs[:200]:
                httpx.post(f"{urls[label]}/search", json={"vector": q.tolist(), "top_k": 10}, timeout=60)
        try:
            out["search"] = latencies(urls, hvecs, htexts, tmp)
        finally:
            if against is not None:
                other.terminate()
                other.wait(timeout=30)
        out["targets"] = targets(out["search"], out.get("in_process", {}))  # type: ignore[arg-type]
        if swap_to == "none":  # `--latency-only`
            out["load_end"] = load()
            save(out)
            return out
        save(out)
        out["writes"] = writes(url, dim, n)
        save(out)
        log_bytes = sum(f.stat().st_size for f in (root / "writes").iterdir() if f.is_file())  # with its WAL
        out["bytes_per_doc"]["write_log_per_written_doc"] = round(log_bytes / 320, 1)  # type: ignore[index]
        out["swap"] = swap(url, proc.pid, root, model, qvecs, threads, swap_to)
        save(out)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    out["load_end"] = load()
    return out


def report(results: list[dict[str, object]], stamp: str, mmap: bool) -> str:
    lines = [f"# Scale: {', '.join(str(r['n_docs']) for r in results)} documents ({stamp})", "",
             f"`PYTHONPATH=$PWD STRATA_DATA_DIR=/work/shared/data {f'nice -n {os.nice(0)} ' if os.nice(0) else ''}"
             f"python -m bench.scale {' '.join(sys.argv[1:])}` on a 2-core machine (load averages beside each "
             f"figure). Corpus: "
             f"`bench/scale_corpus.py` (Quora's real texts and all-MiniLM-L6-v2 vectors, grown). Served with "
             f"STRATA_MMAP={'1' if mmap else '0'}, STRATA_THREADS=1, "
             f"STRATA_HYBRID_LEXICAL={os.environ.get('STRATA_HYBRID_LEXICAL', 'bounded (default)')}.", ""]
    for r in results:
        g = r.get
        lines += [f"## N = {r['n_docs']:,} ({r['index']}, {r['dim']} dims)", "",
                  f"- build: {r['build']} — stages (s): {r['stages_s']}", f"- nlist: {r['nlist_reason']}",
                  f"- bytes per document: {r['bytes_per_doc']}", f"- dense recall@10 vs exact: {g('recall')}",
                  f"- startup {g('startup_s')} s, steady RSS {g('steady_rss_mib')} MiB",
                  f"- writes: {g('writes')}", f"- compact and swap: {g('swap')}",
                  *cold_table(g("cold_filters", {})),  # type: ignore[arg-type]
                  f"- load at the end: {g('load_end', 'not reached: the run was cut short')}",
                  f"- in-process p50 (no HTTP, same queries): {g('in_process')}", *g("targets", []),  # type: ignore[misc]
                  "", "| round | server | mode | query | filter | conns | p50 ms | p99 ms | req/s | errors "
                  "| first request ms | load |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for s in r.get("search", []):  # type: ignore[union-attr]
            lines.append(f"| {s.get('round', 1)} | {s.get('server', THIS)} | {s['mode']} | {s.get('via', 'vector')} | "
                         f"{s['filter']} | "
                         f"{s['conns']} | "
                         f"{s['p50_ms']} | {s['p99_ms']} | {s['rps']} | "
                         f"{s['errors']} | {s.get('first_request_ms') or ''} | {s['load']} |")
        lines += [f"- errors, {s['mode']} {s['filter']} at {s['conns']}: {s['error_detail']}"
                  for s in r.get("search", []) if s.get("error_detail")]  # type: ignore[union-attr]
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("sizes", nargs="+", type=int)
    p.add_argument("--work", type=Path, default=sc.cache_dir() / "work")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rebuild", action="store_true")
    p.add_argument("--no-mmap", action="store_true", help="serve with STRATA_MMAP=0 (the in-memory comparison)")
    p.add_argument("--latency-only", action="store_true",
                   help="serve the built version and measure startup, RSS and latencies only (no recall, writes, swap)")
    p.add_argument("--cold-filters", action="store_true",
                   help="serve the built version and measure new filters' first requests beside their warm ones")
    p.add_argument("--legs", metavar="DF:DEPTH,…", help="hybrid's lexical leg in process only: exact beside each "
                   "bounded variant (`legs`), on --legs-queries held-out questions")
    p.add_argument("--legs-queries", type=int, default=100)
    p.add_argument("--against", type=Path, metavar="CHECKOUT",
                   help="with --latency-only: serve the same version from another checkout too (a worktree of "
                        "another revision), its wrk runs interleaved with this tree's")
    p.add_argument("--swap-to", choices=("compact", "copy"), default="compact",
                   help="the version swapped to: `indexer compact`'s (timed) or a byte copy of the served one "
                        "(when compaction does not fit the sitting: ~1 h at 10M)")
    args = p.parse_args()
    from indexer.runtime.paths import data_dir

    quora = data_dir() / "quora_duplicate_questions.partial.tsv.gz"
    args.work.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%MZ")
    results: list[dict[str, object]] = []
    for n in args.sizes:
        if args.legs:  # in process on the built version only
            texts, vecs = sc.held_out(quora, args.legs_queries)
            head = [f"# Hybrid's lexical leg at {n:,} documents ({stamp})", "", f"`PYTHONPATH=$PWD STRATA_DATA_DIR="
                    f"/work/shared/data python -m bench.scale {' '.join(sys.argv[1:])}`; load at start {load()}"]
            body = legs(version_dir(args.work / f"root-{n}"), vecs, texts, args.legs.split(","))
            (RESULTS / f"hybrid-legs-{n}-{stamp}.md").write_text("\n".join(head + body) + "\n")
            print("\n".join(head + body))
            continue

        def save(out: dict[str, object], n: int = n) -> None:
            done = [*results, out]
            suffix = "-nommap" * args.no_mmap + "-latency" * args.latency_only + "-cold-filters" * args.cold_filters
            name = f"scale-{'-'.join(str(r['n_docs']) for r in done)}-{stamp}{suffix}"
            (RESULTS / f"{name}.json").write_text(json.dumps(done, indent=1))
            (RESULTS / f"{name}.md").write_text(report(done, stamp, not args.no_mmap))

        out = run_size(n, quora, args.work, args.threads, args.rebuild, not args.no_mmap, save,
                       "none" if args.latency_only else "cold" if args.cold_filters else args.swap_to, args.against)
        save(out)
        results.append(out)
        print(report([out], stamp, not args.no_mmap))


if __name__ == "__main__":
    main()
