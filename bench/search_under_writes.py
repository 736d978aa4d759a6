"""`/search` latency under a steady stream of writes, next to the same server without writes.

For each variant (a source tree of Strata plus optional STRATA_ settings — e.g. this branch against a copy of
main's tree, to compare the old and the new scheduling of writes) and each round, the script copies the index root
(writes go to the copy's log, never to the original), starts `python -m service` from that tree on 127.0.0.1 and
measures `/search` with `wrk` (`--clients` connections, one thread, a Lua script cycling through the index's own
evaluation queries) twice: without writes, and while another process (this script in `--writer` mode) sends
`PUT /documents` of `--batch` new documents back to back (closed loop: as fast as the server acknowledges;
`--writers` such processes), and with `--swap` a version swap in the middle (`indexer compact` folding the writes
so far, then `POST /admin/reload`). Searches' and writes' answers are counted by status (429s, 5xx). The two
conditions alternate their order from round to round, and the variants too, so a drift in the machine's load (it is
shared) hits all alike; the 1-minute load average is recorded around every measurement. Printed and written to
bench/results/search-under-writes-<UTC>.md/.json: per variant, the medians over rounds of p50/p99/requests/s with
and without writes, the ratio p99(writes)/p99(no writes) (median of per-round ratios), and the writes'
documents/s during the measurement.

    git -C /work/main archive main | tar -x -C /tmp/main-src     # the old scheduling, for comparison
    python bench/search_under_writes.py --root ~/.strata/indexes/quora --variant main /tmp/main-src \\
        --variant lane . [--variant lane-nice19 . STRATA_WRITE_NICE=19] [--rounds 3] [--seconds 20]
    # admission: 32 connections beside 2 writers and a swap; the target is 0 x 429 for searches
    python bench/search_under_writes.py --root DIR --clients 32 --writers 2 --swap [--variant old TREE --variant new .]
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
import threading
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common import load as load_text  # noqa: E402
from bench.common import log, start_server, stop, wrk  # noqa: E402
from indexer.runtime.layout import IndexRoot, LayoutError  # noqa: E402
from indexer.runtime.store import STORE, Store  # noqa: E402


def write_texts(n: int) -> list[str]:
    """Texts to write: Quora rows 200,000..299,999 (far from any test index's first rows, below the held-out
    300,000), else generated ones."""
    from indexer.quora import read_rows
    from indexer.runtime.paths import data_dir

    out: list[str] = []
    path = data_dir() / "quora_duplicate_questions.partial.tsv.gz"
    if path.is_file():
        for row in read_rows(path):
            if row.id >= 200_000:
                out.append(f"{row.question1} (written {len(out)})")
                if len(out) >= n:
                    return out
    return out + [f"generated text {i}: how far does a paper plane fly?" for i in range(len(out), n)]


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
    statuses: dict[int, int] = {}
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
            statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
            if r.status_code == 200:
                done.append((t0, time.time(), batch))
            elif r.status_code == 429:  # as a client should: after Retry-After
                time.sleep(float(r.headers.get("retry-after", 1)))
    out.write_text(json.dumps({"acks": done, "statuses": statuses}))


# -- the driver -------------------------------------------------------------------------------------------------------
def swap(variant: Variant, root: Path, url: str, delay_s: float, out: dict[str, object]) -> None:
    """After `delay_s`: a new version folding the writes so far (`indexer compact`), then a swap to it."""
    time.sleep(delay_s)
    t0 = time.time()
    c = subprocess.run([sys.executable, "-m", "indexer.cli", "compact", "--root", str(root), "--no-eval"],
                       cwd=variant.tree, env=os.environ | {"PYTHONPATH": str(variant.tree)}, capture_output=True)
    r = httpx.post(f"{url}/admin/reload", timeout=300)
    out |= {"swap": f"compact exit {c.returncode}, reload {r.json().get('outcome')}", "swap_s": time.time() - t0}


def drained(url: str, timeout_s: float = 120) -> None:
    """Until the server holds no search: wrk's last requests run on after it stops, holding admission slots."""
    deadline = time.time() + timeout_s
    while "strata_inference_in_flight 0.0" not in httpx.get(f"{url}/metrics").text and time.time() < deadline:
        time.sleep(0.1)


def counted(statuses: dict[int, int]) -> dict[str, int]:
    return {"429": statuses.get(429, 0), "5xx": sum(n for c, n in statuses.items() if int(c) >= 500)}


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
            drained(url)
            load_before = os.getloadavg()[0]
            ws, acks = [], [tmp / f"acks-{variant.name}-{rnd}-{k}.json" for k in range(args.writers)]
            row: dict[str, object] = {"variant": variant.name, "round": rnd + 1, "condition": cond}
            if cond == "writes":
                ws = [subprocess.Popen([sys.executable, __file__, "--writer", url, "--texts", str(texts_file),
                                        "--first-id", str(first_id + k * 1_000_000), "--batch", str(args.batch),
                                        "--seconds", str(args.seconds + args.settle + 2), "--acks", str(acks[k])],
                                       cwd=REPO) for k in range(args.writers)]
                time.sleep(args.settle)  # the stream is steady before the searches start
                swapper = threading.Thread(target=swap, args=(variant, root, url, args.seconds / 2, row))
                swapper.start() if args.swap else None
            t0 = time.time()
            r = wrk(url, bodies, args.clients, args.seconds, tmp, timeout_s=30)
            t1 = time.time()
            row |= {**r, "search": counted(r["statuses"]), "load_before": load_before,
                    "load_after": os.getloadavg()[0]}
            if ws:
                swapper.join() if args.swap else None
                if any([w.wait(timeout=args.seconds + 300) for w in ws]):
                    raise SystemExit(f"a writer failed: exit statuses {[w.returncode for w in ws]}")
                a = [json.loads(f.read_text()) for f in acks]
                # documents acknowledged while wrk ran, pro rata for PUTs straddling its start or end
                docs = sum(n * max(0.0, min(t1, ack) - max(t0, sent)) / max(ack - sent, 1e-9)
                           for x in a for sent, ack, n in x["acks"])
                lat = sorted(ack - sent for x in a for sent, ack, _ in x["acks"] if sent >= t0 and ack <= t1)
                statuses: Counter[int] = sum((Counter({int(c): n for c, n in x["statuses"].items()}) for x in a),
                                             Counter())
                row |= {"write_docs_per_s": docs / (t1 - t0), "write_put_p50_ms": 1000 * statistics.median(lat)
                        if lat else None, "write_statuses": dict(statuses), "write": counted(statuses)}
            rows.append(row)
            log(f"round {rnd + 1} {variant.name:>12} {cond:>9}: /search {r['rps']:.0f} req/s p50 {r['p50_ms']:.1f} "
                f"p99 {r['p99_ms']:.1f} ms, errors {r['errors']}"
                + (f"; writes {row['write_docs_per_s']:.0f} docs/s {row['write']} {row.get('swap', '')}" if ws else "")
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
        for who, c in (("search", "no writes"), ("search", "writes"), ("write", "writes")):
            for code in ("429", "5xx"):  # sums over rounds: the target is none
                med[f"{who} {code} ({c})"] = sum(r[who][code] for r in by[c])  # type: ignore[index]
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
    p.add_argument("--writers", type=int, default=1, help="writer processes")
    p.add_argument("--swap", action="store_true", help="a version swap while the writes run (compact, reload)")
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
             f"writes: {args.writers} process(es) each sending `PUT /documents` of {args.batch} new Quora questions "
             f"back to back{', a version swap (compact, reload) halfway through the searches' if args.swap else ''}; "
             f"{args.rounds} rounds, conditions and variants alternating, {args.seconds:.0f} s per measurement; "
             f"{os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), shared with other jobs: "
             f"1-minute load average {min(float(r['load_before']) for r in rows):.1f}–"  # type: ignore[arg-type]
             f"{max(float(r['load_after']) for r in rows):.1f} "  # type: ignore[arg-type]
             "(every measurement's is in the JSON).", "",
             "| variant | settings | req/s (no writes) | p50 ms | p99 ms | req/s (writes) | p50 ms | p99 ms | "
             "p99 writes / no writes | req/s writes / no writes | writes docs/s | search 429 / 5xx (no writes; "
             "writes) | write 429 / 5xx |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for v in variants:
        m = med[v.name]
        settings = " ".join(f"{k}={x}" for k, x in v.env.items()) or "defaults"
        lines.append(f"| {v.name} | {settings} | {m['rps (no writes)']:.0f} | {m['p50_ms (no writes)']:.1f} | "
                     f"{m['p99_ms (no writes)']:.1f} | {m['rps (writes)']:.0f} | {m['p50_ms (writes)']:.1f} | "
                     f"{m['p99_ms (writes)']:.1f} | **{m['p99 ratio']:.2f}×** | {m['rps ratio']:.2f}× | "
                     f"{m['write docs/s']:.0f} | {m['search 429 (no writes)']:.0f} / "
                     f"{m['search 5xx (no writes)']:.0f}; "
                     f"**{m['search 429 (writes)']:.0f}** / {m['search 5xx (writes)']:.0f} | "
                     f"{m['write 429 (writes)']:.0f} / {m['write 5xx (writes)']:.0f} |")
    lines += ["", "Medians over rounds (429s and 5xx: sums); the ratios are medians of per-round ratios (writes and "
              "no writes measured on the same server, a minute apart). Per measurement:", "",
              "| round | variant | condition | req/s | p50 ms | p99 ms | max ms | searches (by status) | "
              "writes docs/s | PUT p50 ms | writes (by status) | swap | load 1 min before → after |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        wd = f"{r['write_docs_per_s']:.0f}" if "write_docs_per_s" in r else ""
        wp = f"{r['write_put_p50_ms']:.0f}" if r.get("write_put_p50_ms") else ""
        lines.append(f"| {r['round']} | {r['variant']} | {r['condition']} | {r['rps']:.0f} | {r['p50_ms']:.1f} | "
                     f"{r['p99_ms']:.1f} | {r['max_ms']:.0f} | {r['statuses']} | {wd} | {wp} | "
                     f"{r.get('write_statuses', '')} | {r.get('swap', '')} | "
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
