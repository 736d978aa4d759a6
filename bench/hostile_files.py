"""`indexer build` over a folder of hostile files, its peak memory measured against the files' sizes: a 200 MB text
file, a 500,000-deep nested HTML page, a 50 MB HTML page, a 59 MB Markdown file (at `--scale 1`; 0.1 gives the
20 MB text and 5 MB HTML of the same reproductions), beside a few ordinary documents, a dangling symlink, a FIFO and
a symlink out of the folder. The target (docs/own-corpus.md#limits): the build finishes, its peak RSS follows the
encoder's batches, not the files (the same at every scale), and its final lines name what it skipped and cut. Each
build runs under `/usr/bin/time -v` (its maximum resident set size is the figure), with passages (`--chunk auto`)
and without (`--chunk off`), scales and chunkings interleaved; the figures go to bench/results/hostile-files-<UTC>.md.

    nice python bench/hostile_files.py --model MODEL_DIR [--scale 0.1 1] [--chunk auto off] [--depth 500000]

MODEL_DIR: an exported encoder (all-MiniLM-L6-v2 for the real figure; the tests' tiny random BERT for a quick one).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench.common import load, log  # noqa: E402

WORDS = ("the glacier retreated quickly during the warm decade while basalt lava flows from the vent and magma "
         "cools under a grey sky near the blue sea").split()


def _prose(n_bytes: int, seed: int) -> bytes:
    """About `n_bytes` of English-like text in paragraphs (soft line breaks inside them)."""
    rng = random.Random(seed)
    para = " ".join(rng.choice(WORDS) for _ in range(200)) + ".\n\n"
    block = "".join(para.replace(" ", "\n", 1) for _ in range(50)).encode()
    return block * (n_bytes // len(block) + 1)


def write_folder(folder: Path, scale: float, depth: int) -> None:
    folder.mkdir(parents=True)
    with open(folder / "huge.txt", "wb") as fh:  # written in blocks: the bench itself stays small
        block = _prose(1 << 20, 1)
        for _ in range(round(200 * scale)):
            fh.write(block[: 1 << 20])
    (folder / "deep.html").write_text("<html><body>" + "<div>" * depth + "deep" + "</div>" * depth + "</body></html>")
    html_par = b"<p>" + _prose(4096, 2)[:4000] + b" <b>bold</b> <a href='#'>link</a></p>\n"
    (folder / "big.html").write_bytes(b"<html><head><title>Big</title></head><body>"
                                      + html_par * round(12_800 * scale) + b"</body></html>")  # ~50 MB at scale 1
    (folder / "big.md").write_bytes(b"# Big\n\n" + _prose(round(59 * scale * 2**20), 3)[: round(59 * scale * 2**20)])
    for i in range(5):
        (folder / f"note{i}.md").write_text(f"# Note {i}\n\nThe glacier note number {i}\nwalks on.\n")
    os.symlink(folder / "missing", folder / "dangling.txt")
    os.symlink("/etc/hostname", folder / "outside.txt")
    os.mkfifo(folder / "pipe.txt")


def run_build(model: Path, folder: Path, root: Path, chunk: str) -> tuple[float, int, str]:
    """(seconds, peak RSS in KiB, the build's output) of one `indexer build` under /usr/bin/time -v."""
    cmd = ["/usr/bin/time", "-v", sys.executable, "-m", "indexer.cli", "build", "--data", str(folder), "--model",
           str(model), "--root", str(root), "--threads", "2", "--chunk", chunk, "--no-eval"]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=3600,
                       env={**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"})
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr)
    if r.returncode != 0 or m is None:
        raise SystemExit(f"build failed ({r.returncode}):\n{r.stdout}\n{r.stderr[-3000:]}")
    return time.perf_counter() - t0, int(m.group(1)), r.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--scale", type=float, nargs="+", default=[1.0], help="the big files' sizes, × (1: 200 MB text)")
    ap.add_argument("--chunk", nargs="+", default=["auto", "off"], help="the builds' --chunk values")
    ap.add_argument("--depth", type=int, default=500_000)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="hostile-files-"))
    rows, outputs, loads = [], {}, [load()]
    try:
        for scale in args.scale:
            write_folder(folder := tmp / f"docs-{scale:g}", scale, args.depth)
            sizes = ", ".join(f"{p.name} {p.stat().st_size / 2**20:,.1f}" for p in sorted(folder.iterdir())
                              if p.is_file() and not p.is_symlink() and p.stat().st_size > 2**20)
            for chunk in args.chunk:
                seconds, kib, out = run_build(args.model, folder, tmp / f"root-{scale:g}-{chunk}", chunk)
                rows.append(f"| {scale:g} | {sizes} | --chunk {chunk} | {seconds:.1f} | {kib / 1024:,.0f} | {load()} |")
                outputs[chunk] = "\n".join(ln for ln in out.splitlines() if ln.startswith(("files", "  ", "limits")))
                log(rows[-1])
            shutil.rmtree(folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%MZ")
    out = REPO / "bench" / "results" / f"hostile-files-{stamp}.md"
    out.write_text(
        "# `indexer build` over hostile files: peak memory against the files' sizes\n\n"
        f"`nice python bench/hostile_files.py --model MODEL --scale {' '.join(f'{s:g}' for s in args.scale)} "
        f"--chunk {' '.join(args.chunk)} --depth {args.depth}` ({os.cpu_count()} CPUs, load at the start {loads[0]}; "
        f"the encoder: {args.model.name}, `--threads 2`)\n\nBeside the big files: a {args.depth:,}-deep nested HTML "
        "page, 5 notes, a dangling symlink, a symlink to /etc/hostname, a FIFO.\n\n"
        "| scale | big files (MiB) | build | seconds | peak RSS (MiB, /usr/bin/time -v) | load after |\n"
        "| --- | --- | --- | ---: | ---: | --- |\n" + "\n".join(rows)
        + f"\n\nThe build's final lines (scale {args.scale[-1]:g}, --chunk {args.chunk[-1]}):\n\n```text\n"
        + outputs[args.chunk[-1]] + "\n```\n")
    print(out.read_text() + f"\nwrote {out}")


if __name__ == "__main__":
    main()
