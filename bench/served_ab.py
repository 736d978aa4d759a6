"""Two served versions of the same corpus side by side: dense `/search` latency (wrk, the query vector brought, as
`bench/scale.py` sends it) of each, rounds interleaved so the machine's load weighs on both alike.

    python bench/served_ab.py --n 1000000 --a flat=~/.cache/strata-scale/work/root-1000000 \\
        --b hnsw=~/.cache/strata-scale/work/root-1000000-hnsw [--build-b] [--rounds 3]

`--build-b` first builds root B from `bench/scale.py`'s corpus of that size with this tree's `indexer build` (the
same corpus, encoder and settings as A's, so what differs is what this tree builds differently). Each root's current
version is served by `python -m service` (STRATA_MMAP=1, STRATA_THREADS=1, as bench/scale.py serves), warmed with 200
queries, then measured at 1 and 8 connections per round. Results: bench/results/served-ab-<stamp>.md and .json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import httpx

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from bench import scale  # noqa: E402
from bench import scale_corpus as sc  # noqa: E402
from indexer.runtime.manifest import Manifest  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, required=True, help="the corpus size (bench/scale.py's corpus)")
    ap.add_argument("--a", required=True, help="NAME=ROOT")
    ap.add_argument("--b", required=True, help="NAME=ROOT")
    ap.add_argument("--build-b", action="store_true")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "results")
    a = ap.parse_args()
    sides = dict(s.split("=", 1) for s in (a.a, a.b))
    roots = {k: Path(v).expanduser() for k, v in sides.items()}
    quora = Path(os.environ.get("STRATA_DATA_DIR", "/work/shared/data")) / "quora_duplicate_questions.partial.tsv.gz"
    report: dict[str, object] = {"command": "python bench/served_ab.py " + " ".join(sys.argv[1:]),
                                 "load_start": scale.load()}
    name_b = list(roots)[1]
    if a.build_b:
        report["build_b"] = scale.build(a.n, sc.corpus(quora, a.n), roots[name_b], sc.encoder_dir(), 2)
    manifests = {k: (scale.version_dir(r), Manifest.load(scale.version_dir(r))) for k, r in roots.items()}
    report["versions"] = {k: {"folder": str(f), "factory": m.index.factory, "nprobe": m.index.nprobe}
                          for k, (f, m) in manifests.items()}
    bodies = scale.search_bodies("dense", sc.queries(quora), sc.query_texts(quora))
    rows: dict[str, dict[int, list[dict[str, float]]]] = {k: {1: [], 8: []} for k in roots}
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        for r in range(a.rounds):
            for name in (list(roots) if r % 2 == 0 else list(roots)[::-1]):
                proc, url, _ = scale.start(roots[name], tmp, {"STRATA_MMAP": "1", "STRATA_THREADS": "1"})
                try:
                    for body in bodies * 2:  # warm-up
                        httpx.post(f"{url}/search", json=body, timeout=60)
                    for conns in (1, 8):
                        got = scale.wrk(url, bodies, conns, tmp)
                        rows[name][conns].append(got | {"load": scale.load()})
                        print(f"round {r + 1} {name} c{conns}: {got}", file=sys.stderr, flush=True)
                finally:
                    proc.terminate()
                    proc.wait(timeout=30)
    report["rounds"] = rows
    report["load_end"] = scale.load()
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    med = {k: {c: {m: statistics.median(x[m] for x in v) for m in ("p50_ms", "p99_ms", "rps")} for c, v in cs.items()}
           for k, cs in rows.items()}
    report["medians"] = med
    names = list(roots)
    lines = [f"# Two served versions side by side, N = {a.n:,} ({stamp})", "", f"`{report['command']}`; load at start "
             f"{report['load_start']}, at end {report['load_end']}; dense `/search` with the query vector, top_k 10, "
             f"wrk, {a.rounds} interleaved rounds (medians).", ""]
    for k, v in report["versions"].items():  # type: ignore[union-attr]
        lines.append(f"- {k}: `{v['folder']}` ({v['factory']}, nprobe {v['nprobe']})")
    if "build_b" in report:
        lines.append(f"- {name_b} built by this tree: {report['build_b']}")
    lines += ["", "| side | conns | p50 ms | p99 ms | req/s |", "|---|---|---|---|---|"]
    for k in names:
        for c in (1, 8):
            m = med[k][c]
            lines.append(f"| {k} | {c} | {m['p50_ms']} | {m['p99_ms']} | {m['rps']} |")
    lines += ["", f"{names[1]} / {names[0]} p50: " + ", ".join(
        f"{c} conn {med[names[1]][c]['p50_ms'] / med[names[0]][c]['p50_ms']:.2f}×" for c in (1, 8))]
    text = "\n".join(lines) + "\n"
    print(text)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / f"served-ab-{stamp}.md").write_text(text)
    (a.out / f"served-ab-{stamp}.json").write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
