"""`/search` latency under a steady stream of writes, next to the same server without writes.

For each variant (a source tree of Strata plus optional STRATA_ settings — e.g. this branch against a copy of
main's tree, to compare the old and the new scheduling of writes) and each round, the script copies the index root
(writes go to the copy's log, never to the original), starts `python -m service` from that tree on 127.0.0.1 and
measures `/search` with `wrk` (`--clients` connections, one thread, a Lua script cycling through the index's own
evaluation queries) twice: without writes, and while another process (this script in `--writer` mode) sends
`PUT /documents` of `--batch` new documents back to back (closed loop: as fast as the server acknowledges). The two
conditions alternate their order from round to round, and the variants too, so a drift in the machine's load (it is
shared) hits all alike; the 1-minute load average is recorded around every measurement. Printed and written to
bench/results/search-under-writes-<UTC>.md/.json: per variant, the medians over rounds of p50/p99/requests/s with
and without writes, the ratio p99(writes)/p99(no writes) (median of per-round ratios), and the writes'
documents/s during the measurement.

    git -C /work/main archive main | tar -x -C /tmp/main-src     # the old scheduling, for comparison
    python bench/search_under_writes.py --root ~/.strata/indexes/quora --variant main /tmp/main-src \\
        --variant lane . [--variant lane-nice19 . STRATA_WRITE_NICE=19] [--rounds 3] [--seconds 20]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common import load as load_text  # noqa: E402
from bench.common import (  # noqa: E402
    log,  # noqa: E402
    start_server,
    stop,
    wrk,
)
from indexer.runtime.layout import IndexRoot, LayoutError  # noqa: E402
from indexer.runtime.store import STORE, Store  # noqa: E402


@dataclass(frozen=True)
class Variant:
    name: str
    tree: Path  # a Strata source tree: the server runs from it (cwd and PYTHONPATH)
    env: dict[str, str]


def parse_variant(spec: list[str]) -> Variant:
    if len(spec) < 2:
        raise SystemExit("--variant takes NAME TREE [STRATA_KEY=VALUE ...]")
    tree = Path(spec[1]).resolve()
    if not (tree / "service" / "__main__.py").is_file():
        raise SystemExit(f"--variant {spec[0]}: {tree} is not a Strata source tree (no service/__main__.py)")
    env = {}
    for kv in spec[2:]:
        key, sep, value = kv.partition("=")
        if not sep or not key.startswith("STRATA_"):
            raise SystemExit(f"--variant {spec[0]}: {kv!r} is not STRATA_KEY=VALUE")
        env[key] = value
    return Variant(spec[0], tree, env)


def copy_root(src: Path, dst: Path) -> None:
    index = IndexRoot(src)
    version = index.current_version()
    (dst / "versions").mkdir(parents=True)
    shutil.copytree(index.current_dir(), dst / "versions" / str(version))
    IndexRoot(dst).set_current(str(version))


# -- the writer process -----------------------------------------------------------------------------------------------
def writer(url: str, texts_file: Path, first_id: int, batch: int, seconds: float, out: Path) -> None:
    """PUT /documents of `batch` new documents back to back for `seconds`; each acknowledgement's time and size."""
    texts = json.loads(texts_file.read_text())
    done: list[tuple[float, float, int]] = []  # (sent, acknowledged, documents), wall clock
    failed = 0
    next_id, pos = first_id, 0
    deadline = time.time() + seconds
    with httpx.Client(base_url=url, timeout=120) as c:
        while time.time() < deadline:
            docs = []
            for _ in range(batch):
                docs.append({"id": next_id, "text": texts[pos % len(texts)]})
                next_id, pos = next_id + 1, pos + 1
            t0 = time.time()
            r = c.put("/documents", json={"documents": docs})
            if r.status_code == 200:
                done.append((t0, time.time(), batch))
            else:
                failed += 1
    out.write_text(json.dumps({"acks": done, "failed": failed}))


def write_texts(n: int) -> list[str]:
    """Real Quora questions (rows 200,000..299,999: far from any test index's rows, below the held-out 300,000),
    else generated ones."""
    from bench.writes import texts

    return texts(n)


# -- the driver -------------------------------------------------------------------------------------------------------
def measure(variant: Variant, args: argparse.Namespace, bodies: list[dict[str, object]], texts_file: Path,
            tmp: Path, rnd: int, first_id: int) -> list[dict[str, object]]:
    root = tmp / f"root-{variant.name}-{rnd}"
    copy_root(args.root, root)
    proc, url, _ = start_server(root, tmp, variant.env, checkout=variant.tree)
    rows: list[dict[str, object]] = []
    try:
        wrk(url, bodies, args.clients, 3, tmp, timeout_s=30)  # warm-up: sessions, arenas, connections
        order = ["no writes", "writes"] if rnd % 2 == 0 else ["writes", "no writes"]
        for cond in order:
            load_before = os.getloadavg()[0]
            w = None
            if cond == "writes":
                acks = tmp / f"acks-{variant.name}-{rnd}.json"
                w = subprocess.Popen([sys.executable, __file__, "--writer", url, "--texts", str(texts_file),
                                      "--first-id", str(first_id), "--batch", str(args.batch),
                                      "--seconds", str(args.seconds + args.settle + 2), "--acks", str(acks)],
                                     cwd=REPO)
                time.sleep(args.settle)  # the stream is steady before the searches start
            t0 = time.time()
            r = wrk(url, bodies, args.clients, args.seconds, tmp, timeout_s=30)
            t1 = time.time()
            row: dict[str, object] = {"variant": variant.name, "round": rnd + 1, "condition": cond, **r,
                                      "load_before": load_before, "load_after": os.getloadavg()[0]}
            if w is not None:
                if w.wait(timeout=args.seconds + 300) != 0:
                    raise SystemExit(f"the writer exited with status {w.returncode}")
                a = json.loads(acks.read_text())
                # documents acknowledged while wrk ran, pro rata for PUTs straddling its start or end
                docs = sum(n * max(0.0, min(t1, ack) - max(t0, sent)) / max(ack - sent, 1e-9)
                           for sent, ack, n in a["acks"])
                lat = sorted(ack - sent for sent, ack, _ in a["acks"] if sent >= t0 and ack <= t1)
                row |= {"write_docs_per_s": docs / (t1 - t0), "write_put_p50_ms": 1000 * statistics.median(lat)
                        if lat else None, "write_failed": a["failed"]}
            rows.append(row)
            log(f"round {rnd + 1} {variant.name:>12} {cond:>9}: /search {r['rps']:.0f} req/s p50 {r['p50_ms']:.1f} "
                f"p99 {r['p99_ms']:.1f} ms, errors {r['errors']}"
                + (f"; writes {row['write_docs_per_s']:.0f} docs/s" if w is not None else "")
                + f"; load {load_text()}")
    finally:
        stop(proc)
        shutil.rmtree(root, ignore_errors=True)
    return rows


def summarise(rows: list[dict[str, object]], variants: list[Variant]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for v in variants:
        mine = [r for r in rows if r["variant"] == v.name]
        by = {c: [r for r in mine if r["condition"] == c] for c in ("no writes", "writes")}
        pairs = [(a, b) for a in by["no writes"] for b in by["writes"] if a["round"] == b["round"]]
        med = {f"{k} ({c})": statistics.median(float(r[k]) for r in rs)  # type: ignore[arg-type]
               for c, rs in by.items() for k in ("rps", "p50_ms", "p99_ms")}
        med["p99 ratio"] = statistics.median(float(b["p99_ms"]) / float(a["p99_ms"]) for a, b in pairs)  # type: ignore[arg-type]
        med["rps ratio"] = statistics.median(float(b["rps"]) / float(a["rps"]) for a, b in pairs)  # type: ignore[arg-type]
        med["write docs/s"] = statistics.median(float(r["write_docs_per_s"]) for r in by["writes"])  # type: ignore[arg-type]
        out[v.name] = med
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", type=Path, help="index root to copy and serve (with current)")
    p.add_argument("--variant", nargs="+", action="append", metavar="NAME TREE [STRATA_KEY=VALUE]",
                   help="a server to measure: a name, a Strata source tree, settings (repeatable; default: this "
                        "tree as 'this')")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=20.0, help="wrk duration per measurement")
    p.add_argument("--settle", type=float, default=3.0, help="seconds of writes before the searches start")
    p.add_argument("--clients", type=int, default=8, help="wrk connections")
    p.add_argument("--batch", type=int, default=64, help="documents per PUT /documents")
    p.add_argument("--out-dir", type=Path, default=REPO / "bench" / "results")
    # writer mode (the stream of writes runs in its own process)
    p.add_argument("--writer", metavar="URL", help=argparse.SUPPRESS)
    p.add_argument("--texts", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--first-id", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--acks", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.writer:
        writer(args.writer, args.texts, args.first_id, args.batch, args.seconds, args.acks)
        return 0
    if args.root is None:
        p.error("--root is required")
    if shutil.which("wrk") is None:
        raise SystemExit("bench/search_under_writes.py: wrk not found (apt-get install -y wrk)")
    variants = [parse_variant(v) for v in (args.variant or [["this", str(REPO)]])]
    try:
        folder = IndexRoot(args.root).current_dir()
    except LayoutError as exc:
        raise SystemExit(f"bench/search_under_writes.py: {exc}") from None
    store = Store(folder / STORE)
    _, queries, _ = store.eval_set()
    store.close()
    if not queries:
        raise SystemExit(f"{folder} has no stored queries to send")

    tmp = Path(tempfile.mkdtemp(prefix="strata-bench-search-under-writes-"))
    try:
        bodies: list[dict[str, object]] = [{"query": q, "top_k": 10} for q in queries[:2000]]
        texts_file = tmp / "texts.json"
        texts_file.write_text(json.dumps(write_texts(20_000)))
        rows: list[dict[str, object]] = []
        loads = [os.getloadavg()]
        for rnd in range(args.rounds):
            for v in variants if rnd % 2 == 0 else variants[::-1]:
                rows += measure(v, args, bodies, texts_file, tmp, rnd, first_id=50_000_000 + rnd * 10_000_000)
            loads.append(os.getloadavg())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    med = summarise(rows, variants)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    cmd = "python bench/search_under_writes.py " + " ".join(sys.argv[1:])
    lines = [f"# `/search` under a steady write stream ({stamp})", "", f"Command: `{cmd}`  ",
             f"Index {folder.name}; wrk, {args.clients} connections, the index's evaluation queries (top_k 10); "
             f"writes: one process sending `PUT /documents` of {args.batch} new Quora questions back to back; "
             f"{args.rounds} rounds, conditions and variants alternating, {args.seconds:.0f} s per measurement; "
             f"{os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), shared with other jobs: "
             f"1-minute load average {min(float(r['load_before']) for r in rows):.1f}–"  # type: ignore[arg-type]
             f"{max(float(r['load_after']) for r in rows):.1f} "  # type: ignore[arg-type]
             "(every measurement's is in the JSON).", "",
             "| variant | settings | req/s (no writes) | p50 ms | p99 ms | req/s (writes) | p50 ms | p99 ms | "
             "p99 writes / no writes | req/s writes / no writes | writes docs/s |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for v in variants:
        m = med[v.name]
        settings = " ".join(f"{k}={x}" for k, x in v.env.items()) or "defaults"
        lines.append(f"| {v.name} | {settings} | {m['rps (no writes)']:.0f} | {m['p50_ms (no writes)']:.1f} | "
                     f"{m['p99_ms (no writes)']:.1f} | {m['rps (writes)']:.0f} | {m['p50_ms (writes)']:.1f} | "
                     f"{m['p99_ms (writes)']:.1f} | **{m['p99 ratio']:.2f}×** | {m['rps ratio']:.2f}× | "
                     f"{m['write docs/s']:.0f} |")
    lines += ["", "Medians over rounds; the ratios are medians of per-round ratios (writes and no writes measured on "
              "the same server, a minute apart). Per measurement:", "",
              "| round | variant | condition | req/s | p50 ms | p99 ms | max ms | errors | writes docs/s | "
              "PUT p50 ms | load 1 min before → after |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        wd = f"{r['write_docs_per_s']:.0f}" if "write_docs_per_s" in r else ""
        wp = f"{r['write_put_p50_ms']:.0f}" if r.get("write_put_p50_ms") else ""
        lines.append(f"| {r['round']} | {r['variant']} | {r['condition']} | {r['rps']:.0f} | {r['p50_ms']:.1f} | "
                     f"{r['p99_ms']:.1f} | {r['max_ms']:.0f} | {r['errors']} | {wd} | {wp} | "
                     f"{r['load_before']:.2f} → {r['load_after']:.2f} |")
    text = "\n".join(lines) + "\n"
    print("\n" + text)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / f"search-under-writes-{stamp}.md").write_text(text)
    (args.out_dir / f"search-under-writes-{stamp}.json").write_text(json.dumps(
        {"command": cmd, "index": folder.name, "variants": [{"name": v.name, "tree": str(v.tree), "env": v.env}
                                                           for v in variants],
         "median": med, "rows": rows, "loads": loads}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
