"""What checksums cost: hashing a version's files, and verifying them before the version is opened for serving.

On one built version (`indexer build`), in interleaved rounds (A B C … A B C …), both with the files in the page
cache (warm: a swap right after a build) and evicted from it with posix_fadvise(DONTNEED) (cold: a restart after
a reboot):
1. throughput of three digests over the version's files: xxh3-128 (what Strata records), BLAKE2b-256, SHA-256;
2. opening the version as the service's local backend does (`IndexVersion`: FAISS read_index + the store);
3. `integrity.verify_folder` (the real check) then the open — what the service does;
4. the alternative: verifying in a thread while the version is opened (the open is thrown away if a file is
   damaged), to see what ordering the files before FAISS reads them costs.
Then the figures scaled linearly in bytes to the full Quora corpus (537,933 unique questions), and the sealing
time a build pays. Writes bench/results/integrity-<UTC>.md and .json.

    python bench/integrity.py --root /tmp/big [--version V] [--rounds 5]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import xxhash

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from indexer.runtime import integrity  # noqa: E402
from indexer.runtime.layout import IndexRoot  # noqa: E402
from indexer.runtime.version import IndexVersion  # noqa: E402

FULL_QUORA_DOCS = 537_933
DIGESTS: dict[str, Callable[[], object]] = {
    "xxh3-128": xxhash.xxh3_128,
    "blake2b-256": lambda: hashlib.blake2b(digest_size=32),
    "sha256": hashlib.sha256,
}


def evict(folder: Path) -> None:
    """Drop the version's files from the page cache (clean pages: no root needed)."""
    for rel in integrity.version_files(folder) + [integrity.MANIFEST]:
        fd = os.open(folder / rel, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def hash_files(folder: Path, make: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    buf = bytearray(integrity.CHUNK)
    view = memoryview(buf)
    for rel in integrity.version_files(folder):
        h = make()
        with open(folder / rel, "rb", buffering=0) as fh:
            while n := fh.readinto(buf):
                h.update(view[:n])  # type: ignore[attr-defined]
    return time.perf_counter() - t0


def open_version(folder: Path) -> float:
    t0 = time.perf_counter()
    IndexVersion(folder).close()
    return time.perf_counter() - t0


def verify_then_open(folder: Path) -> float:
    t0 = time.perf_counter()
    integrity.verify_folder(folder)
    IndexVersion(folder).close()
    return time.perf_counter() - t0


def verify_while_opening(folder: Path) -> float:
    t0 = time.perf_counter()
    errors: list[BaseException] = []

    def check() -> None:
        try:
            integrity.verify_folder(folder)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    t = threading.Thread(target=check)
    t.start()
    v = IndexVersion(folder)
    t.join()
    v.close()
    assert not errors, errors
    return time.perf_counter() - t0


def verify_only(folder: Path) -> float:
    t0 = time.perf_counter()
    integrity.verify_folder(folder)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, required=True, help="an index root built with `indexer build`")
    ap.add_argument("--version", default=None, help="version to measure (default: current)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = ap.parse_args()

    root = IndexRoot(args.root)
    folder = root.version_dir(args.version) if args.version else root.current_dir()
    raw = json.loads((folder / integrity.MANIFEST).read_text())
    t0 = time.perf_counter()
    computed = integrity.compute(folder)
    seal_s = time.perf_counter() - t0
    if raw.get(integrity.CHECKSUMS_KEY) is None:  # a version built before checksums: seal it here
        integrity.seal(folder)
    files = {rel: (folder / rel).stat().st_size for rel in integrity.version_files(folder)}
    total = sum(files.values())
    ntotal = int(raw["index"]["ntotal"])
    load0 = os.getloadavg()
    print(f"version {folder.name}: {ntotal:,} documents, {len(files)} files, {total / 2**20:,.1f} MiB "
          f"({', '.join(f'{k} {v / 2**20:,.1f} MiB' for k, v in files.items())}); load {load0[0]:.2f}")

    cases: dict[str, Callable[[], float]] = {f"hash {name}": (lambda make=make: hash_files(folder, make))
                                             for name, make in DIGESTS.items()}
    cases |= {"open (no check)": lambda: open_version(folder), "verify": lambda: verify_only(folder),
              "verify, then open": lambda: verify_then_open(folder),
              "verify while opening": lambda: verify_while_opening(folder)}
    times: dict[tuple[str, str], list[float]] = {}
    for r in range(args.rounds):
        for cache in ("warm", "cold"):
            for name, fn in cases.items():
                if cache == "cold":
                    evict(folder)
                else:
                    fn()  # warm the cache with this very access pattern
                times.setdefault((cache, name), []).append(fn())
        print(f"round {r + 1}/{args.rounds} done")
    load1 = os.getloadavg()

    med = {k: statistics.median(v) for k, v in times.items()}
    scale = FULL_QUORA_DOCS / ntotal
    protocol = raw["data"]["protocol"]
    lines = [f"# Integrity checks: cost (bench/integrity.py, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC)", "",
             f"Version {folder.name}: {ntotal:,} documents (`indexer build`, {protocol} protocol), {len(files)} files, "
             f"{total / 2**20:,.1f} MiB: " + ", ".join(f"`{k}` {v / 2**20:,.1f} MiB" for k, v in files.items()) + ".",
             f"{args.rounds} interleaved rounds, median; warm = files in the page cache, cold = evicted with "
             f"posix_fadvise(DONTNEED) before each case. Machine: {os.cpu_count()} cores shared with other jobs "
             f"(load average {load0[0]:.2f} at the start, {load1[0]:.2f} at the end).", "",
             "| case | warm s | cold s | warm MiB/s | cold MiB/s | scaled to 537,933 docs: warm s | cold s |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for name in cases:
        w, c = med[("warm", name)], med[("cold", name)]
        lines.append(f"| {name} | {w:.3f} | {c:.3f} | {total / 2**20 / w:,.0f} | {total / 2**20 / c:,.0f} | "
                     f"{w * scale:.2f} | {c * scale:.2f} |")
    ratios = []
    for cache in ("warm", "cold"):
        base = med[(cache, "open (no check)")]
        seq, par = med[(cache, "verify, then open")], med[(cache, "verify while opening")]
        ratios.append(f"- {cache}: verify-then-open / open = {seq / base:.2f}x (+{seq - base:.2f} s, "
                      f"+{(seq - base) * scale:.2f} s scaled); verify-while-opening / open = {par / base:.2f}x; "
                      f"xxh3-128 is {med[(cache, 'hash blake2b-256')] / med[(cache, 'hash xxh3-128')]:.1f}x faster "
                      f"than BLAKE2b-256 and {med[(cache, 'hash sha256')] / med[(cache, 'hash xxh3-128')]:.1f}x "
                      f"than SHA-256 over these files")
    lines += ["", "Ratios (same run):", *ratios, "",
              f"Sealing (checksums computed once per build, `integrity.compute`): {seal_s:.2f} s here, "
              f"{seal_s * scale:.2f} s scaled to 537,933 documents.", ""]
    report = "\n".join(lines)
    print(report)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"integrity-{stamp}.md").write_text(report)
    (args.out / f"integrity-{stamp}.json").write_text(json.dumps({
        "version": folder.name, "ntotal": ntotal, "files": files, "bytes": total, "rounds": args.rounds,
        "load_before": load0, "load_after": load1, "seal_s": seal_s, "scale_to_full_quora": scale,
        "median_s": {f"{cache}/{name}": v for (cache, name), v in med.items()},
        "all_s": {f"{cache}/{name}": v for (cache, name), v in times.items()}}, indent=2))
    print(f"wrote {args.out}/integrity-{stamp}.md and .json")
    assert computed["files"].keys() == files.keys()
    return 0


if __name__ == "__main__":
    sys.exit(main())
