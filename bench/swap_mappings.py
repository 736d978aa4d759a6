"""Where a served process's memory is during a swap, by mapping: anonymous memory and each mapped file's resident
pages (`/proc/PID/smaps`), before the swap, at the sampled peak during it, right after and 5 s later.

    PYTHONPATH=$PWD STRATA_DATA_DIR=/work/shared/data python bench/swap_mappings.py \\
        [--root ~/.cache/strata-scale/work/root-1000000] [--warmup N]

The root's version is served as `bench/scale.py` serves it (STRATA_MMAP=1, one thread), warmed with `--warmup`
dense queries (default: each of the 300 query vectors the swap's load then cycles through, once: with 200, at 10M
the old version's pages grew during the swap, 1,156 → 1,604 MiB, `bench/results/swap-mappings-20261128T1652Z.md`);
a byte copy of the version is made the root's current one (`bench.scale.next_version(..., "copy")`: its own inodes,
so its pages are new to the process) and `POST /admin/reload` swaps to it under two closed loops
of dense queries, as `bench/scale.py` measures the swap. What it answers: whether total RSS during a swap is a
second copy of anything the process owns (anonymous memory) or the two versions' memory-mapped files (the old
one's resident pages until it is closed, the new one's as searches touch them). Results:
bench/results/swap-mappings-<stamp>.md.
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from bench import scale  # noqa: E402
from bench import scale_corpus as sc  # noqa: E402
from bench.runlog import load  # noqa: E402


def resident_by_mapping(pid: int) -> collections.Counter[str]:
    """MiB resident per mapped file ("[anon]" for anonymous mappings, "[heap]", ...) of one process."""
    out: collections.Counter[str] = collections.Counter()
    current = "[anon]"
    with open(f"/proc/{pid}/smaps") as fh:
        for line in fh:
            parts = line.split()
            if len(parts) >= 5 and "-" in parts[0] and ":" in parts[3]:  # a mapping's header line
                current = parts[5] if len(parts) > 5 else "[anon]"
            elif parts and parts[0] == "Rss:":
                out[current] += int(parts[1]) // 1024
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=sc.cache_dir() / "work" / "root-1000000")
    ap.add_argument("--warmup", type=int, default=None,
                    help="dense queries before `before` is read (default: every query vector the swap's load sends, "
                         "so that the served version's pages that load touches are resident before the swap)")
    ap.add_argument("--to", choices=("copy", "compact"), default="copy",
                    help="the version swapped to: a byte copy of the served one, or (as bench/scale.py) the served one "
                         "with 320 documents written through PUT /documents, folded by `indexer compact`")
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "results")
    a = ap.parse_args()
    from indexer.runtime.paths import data_dir

    qvecs = sc.queries(data_dir() / "quora_duplicate_questions.partial.tsv.gz")
    load_start = load()
    with tempfile.TemporaryDirectory() as tmp_s:
        proc, url, _ = scale.start(a.root, Path(tmp_s), {"STRATA_MMAP": "1", "STRATA_THREADS": "1"})
        try:
            def warm() -> None:
                for q in qvecs[:a.warmup or len(qvecs)]:
                    httpx.post(f"{url}/search", json={"vector": q.tolist(), "top_k": 10}, timeout=60)

            warm()
            if a.to == "compact":
                from indexer.runtime.manifest import Manifest

                manifest = Manifest.load(a.root / "current")
                scale.writes(url, manifest.model.dim, manifest.index.ntotal)
                scale.next_version(a.root, sc.encoder_dir(), 2, "compact")
            else:
                scale.next_version(a.root, Path(), 2, "copy")
            warm()  # again: writing the next version may have pushed the served index's pages out of the page cache
            before = resident_by_mapping(proc.pid)
            stop = threading.Event()
            peak: collections.Counter[str] = collections.Counter()

            def sample() -> None:
                while not stop.is_set():
                    now = resident_by_mapping(proc.pid)
                    if sum(now.values()) > sum(peak.values()):
                        peak.clear()
                        peak.update(now)
                    time.sleep(0.05)

            threads = [threading.Thread(target=scale.dense_searches, args=(url, qvecs, stop)) for _ in range(2)]
            threads.append(threading.Thread(target=sample))
            for t in threads:
                t.start()
            outcome = httpx.post(f"{url}/admin/reload", timeout=600).json().get("outcome")
            time.sleep(1.0)  # the old version is closed once its leases drain
            stop.set()
            for t in threads:
                t.join()
            after = resident_by_mapping(proc.pid)
            time.sleep(5)
            later = resident_by_mapping(proc.pid)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%MZ")
    snaps = {"before": before, "peak during": peak, "1 s after": after, "5 s later": later}
    lines = [f"# Memory by mapping during a swap ({stamp})", "",
             f"`python bench/swap_mappings.py {' '.join(sys.argv[1:])}`; root `{a.root}`; swap outcome {outcome}; "
             f"load at start {load_start}, at end {load()}. MiB resident.", "",
             "| mapping | " + " | ".join(snaps) + " |", "|---|" + "---|" * len(snaps),
             "| **total** | " + " | ".join(str(sum(s.values())) for s in snaps.values()) + " |"]
    keys = sorted(set().union(*snaps.values()), key=lambda k: -max(s.get(k, 0) for s in snaps.values()))
    for k in keys[:12]:
        name = k.replace(str(a.root), "ROOT")
        lines.append(f"| `{name}` | " + " | ".join(str(s.get(k, 0)) for s in snaps.values()) + " |")
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / f"swap-mappings-{stamp}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
