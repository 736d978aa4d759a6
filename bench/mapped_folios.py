"""How much of a memory-mapped file one touch makes resident, by how its pages came into the page cache: why the
same searches map 923 MiB of one served `index.faiss` and 2,552 MiB of the freshly compacted next one.

    python -m bench.mapped_folios [--mib 1024] [--dir /tmp]

A file of `--mib` MiB is written, memory-mapped read-only, and one byte is read every MiB (one 4 KiB page each);
the process's RssFile growth is reported for four page-cache states: just written (the writer's folios), dropped
from the cache (`POSIX_FADV_DONTNEED`) then touched with and without `MADV_RANDOM`, and cached by those random
reads. Results: bench/results/mapped-folios-STAMP.md, with the kernel's version.
"""

from __future__ import annotations

import argparse
import mmap
import os
import platform
import tempfile
from datetime import datetime, timezone
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def rss_file_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssFile"):
                return int(line.split()[1]) / 1024
    return 0.0


def touch(path: Path, size: int, advice: int | None) -> float:
    """MiB of the file made resident by reading one byte per MiB through a fresh read-only mapping."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        if advice is not None:
            m.madvise(advice)
        before = rss_file_mib()
        total = 0
        for off in range(0, size, 1 << 20):
            total += m[off]
        return rss_file_mib() - before


def drop(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mib", type=int, default=1024)
    p.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    args = p.parse_args()
    size = args.mib << 20
    path = args.dir / f"mapped-folios-{os.getpid()}.bin"
    try:
        with open(path, "wb") as f:
            block = os.urandom(1 << 20)
            for _ in range(args.mib):
                f.write(block)
        rows = [("just written (in the page cache as written)", touch(path, size, None))]
        drop(path)
        rows.append(("dropped from the cache, MADV_RANDOM", touch(path, size, mmap.MADV_RANDOM)))
        rows.append(("cached by those random reads", touch(path, size, None)))
        drop(path)
        rows.append(("dropped from the cache, no advice (readahead)", touch(path, size, None)))
    finally:
        path.unlink(missing_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%MZ")
    lines = [f"# One touch per MiB of a mapped file: what becomes resident ({stamp})", "",
             f"`python -m bench.mapped_folios --mib {args.mib}`; kernel {platform.release()}; {args.mib} touches "
             f"of one 4 KiB page each.", "", "| page cache state | RssFile growth, MiB | per touch, KiB |",
             "|---|---|---|"]
    lines += [f"| {name} | {mib:.0f} | {mib * 1024 / args.mib:.0f} |" for name, mib in rows]
    text = "\n".join(lines) + "\n"
    (RESULTS / f"mapped-folios-{stamp}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
