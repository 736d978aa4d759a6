"""`indexer build` over a folder of hostile files, its peak memory measured: a 200 MB text file, a 500,000-deep
nested HTML page, a 50 MB HTML page, a 59 MB Markdown file, beside a few ordinary documents, a dangling symlink,
a FIFO and a symlink out of the folder. The target (docs/own-corpus.md#limits): the build finishes, its peak RSS
stays under a fixed bound whatever the files' sizes, and its final lines name what it skipped and cut. Each build
runs under `/usr/bin/time -v` (its maximum resident set size is the figure), once with passages (`--chunk auto`)
and once without (`--chunk off`); the figures go to bench/results/hostile-files-<UTC>.md.

    nice python bench/hostile_files.py --model MODEL_DIR [--text-mb 200] [--depth 500000]

MODEL_DIR: an exported encoder (the tests' tiny random BERT is enough: memory is the loaders' and the
tokenizer's, not the model's).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORDS = ("the glacier retreated quickly during the warm decade while basalt lava flows from the vent and magma "
         "cools under a grey sky near the blue sea").split()


def _prose(n_bytes: int, seed: int) -> bytes:
    """About `n_bytes` of English-like text in paragraphs (soft line breaks inside them)."""
    import random

    rng = random.Random(seed)
    para = " ".join(rng.choice(WORDS) for _ in range(200)) + ".\n\n"
    block = "".join(para.replace(" ", "\n", 1) for _ in range(50)).encode()
    return block * (n_bytes // len(block) + 1)


def write_folder(folder: Path, text_mb: int, depth: int) -> None:
    folder.mkdir(parents=True)
    with open(folder / "huge.txt", "wb") as fh:  # written in blocks: the bench itself stays small
        block = _prose(1 << 20, 1)
        for _ in range(text_mb):
            fh.write(block[: 1 << 20])
    (folder / "deep.html").write_text("<html><body>" + "<div>" * depth + "deep" + "</div>" * depth + "</body></html>")
    html_par = b"<p>" + _prose(4096, 2)[:4000] + b" <b>bold</b> <a href='#'>link</a></p>\n"
    (folder / "big.html").write_bytes(b"<html><head><title>Big</title></head><body>" + html_par * 12_800
                                      + b"</body></html>")  # ~50 MB
    (folder / "big.md").write_bytes(b"# Big\n\n" + _prose(59 << 20, 3)[: 59 << 20])
    for i in range(5):
        (folder / f"note{i}.md").write_text(f"# Note {i}\n\nThe glacier note number {i}\nwalks on.\n")
    os.symlink(folder / "missing", folder / "dangling.txt")
    os.symlink("/etc/hostname", folder / "outside.txt")
    os.mkfifo(folder / "pipe.txt")


def run_build(model: Path, folder: Path, root: Path, chunk: str) -> tuple[float, int, str]:
    """(seconds, peak RSS in KiB, the build's output) of one `indexer build` under /usr/bin/time -v."""
    cmd = ["/usr/bin/time", "-v", sys.executable, "-m", "indexer.cli", "build", "--data", str(folder), "--model",
           str(model), "--root", str(root), "--threads", "2", "--chunk", chunk, "--no-eval"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env, timeout=3600)
    seconds = time.perf_counter() - t0
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr)
    if r.returncode != 0 or m is None:
        raise SystemExit(f"build failed ({r.returncode}):\n{r.stdout}\n{r.stderr[-3000:]}")
    return seconds, int(m.group(1)), r.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--text-mb", type=int, default=200)
    ap.add_argument("--depth", type=int, default=500_000)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="hostile-files-"))
    try:
        folder = tmp / "docs"
        write_folder(folder, args.text_mb, args.depth)
        sizes = {p.name: p.stat().st_size for p in sorted(folder.iterdir()) if p.is_file() and not p.is_symlink()}
        rows = []
        outputs = {}
        for chunk in ("auto", "off"):
            seconds, kib, out = run_build(args.model, folder, tmp / f"root-{chunk}", chunk)
            rows.append(f"| --chunk {chunk} | {seconds:.1f} | {kib / 1024:,.0f} |")
            outputs[chunk] = "\n".join(ln for ln in out.splitlines() if ln.startswith(("files", "  ", "limits",
                                                                                        "files:")))
            print(rows[-1], flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%MZ")
    out = REPO / "bench" / "results" / f"hostile-files-{stamp}.md"
    load = os.getloadavg()[0]
    out.write_text(
        "# `indexer build` over hostile files: peak memory\n\n"
        f"`nice python bench/hostile_files.py --model MODEL --text-mb {args.text_mb} --depth {args.depth}` "
        f"({os.cpu_count()} CPUs, load {load:.1f}; the encoder: {args.model.name})\n\n"
        "Files: " + ", ".join(f"{k} {v / 2**20:,.1f} MiB" for k, v in sizes.items())
        + "; a dangling symlink, a symlink to /etc/hostname, a FIFO.\n\n"
        "| build | seconds | peak RSS (MiB, /usr/bin/time -v) |\n| --- | ---: | ---: |\n" + "\n".join(rows)
        + "\n\nThe build's final lines (--chunk auto):\n\n```text\n" + outputs["auto"] + "\n```\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
