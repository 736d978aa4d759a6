"""PISA's document order and query algorithm: row order with MaxScore against `lexical_pisa.document_order` with
MaxScore and with block-max WAND (`--variants`: any layouts and PISA algorithms), same postings, side by side in one
process.

    PYTHONPATH=$PWD STRATA_DATA_DIR=/work/shared/data python -m bench.pisa_order --version VERSION_DIR
    PYTHONPATH=$PWD STRATA_DATA_DIR=/work/shared/data python -m bench.pisa_order --quora
    ... --variants ordered:block_max_wand,ordered:wand   (LAYOUT:ALGORITHM, the first the base; LAYOUT rows|ordered)

`--version`: a built version whose lexical engine is PISA (the scale corpus at 1M or 10M: `bench/scale.py`). Its
PISA files are laid out twice from its forward index (`lexical_pisa.lay_out`: the same impacts, only the document
ids differ), in row order (`ORDER_KEYS` 0) and in document order, into folders beside it (the rest of the lexical
index linked, not copied), and each held-out Quora question (rows >= 300,000) runs on each `VARIANTS` (layout,
query algorithm), interleaved: hybrid's
bounded leg (PISA's top 100 rescored, completed with the version's dense top 100, as served) and the exact lexical
top 10 (`mode: lexical`). `--quora`: real text, not grown: Quora's distinct training questions (rows < 300,000)
built twice through `build_lexical` with engine pisa, the held-out questions' exact top 10 and top 100 on each
variant.
Wall time per query (p50 / mean / p90 / p99) and whether the answers are the same. Results:
bench/results/pisa-order-<what>-<stamp>.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from bench import scale_corpus as sc
from bench.common import load, log

RESULTS = Path(__file__).resolve().parent / "results"
QUORA = "quora_duplicate_questions.partial.tsv.gz"


def open_pisa_version(folder: Path):  # noqa: ANN201 (an IndexVersion, imported late)
    """The version at `folder`, memory-mapped as served; SystemExit with the reason when it cannot be opened or its
    lexical engine is not PISA."""
    from indexer.commands.common import known_errors
    from indexer.runtime.version import IndexVersion

    if not (folder / "manifest.json").is_file():
        raise SystemExit(f"{folder}: not a version folder (no manifest.json)")
    try:
        v = IndexVersion(folder, mmap=True)
    except known_errors() as exc:
        raise SystemExit(f"{folder}: cannot be opened: {exc}") from None
    engine = v.manifest.lexical.engine if v.manifest.lexical else None
    if v.lexical is None or engine != "pisa":
        v.close()
        raise SystemExit(f"{folder}: its lexical engine is {engine or 'none'}, not pisa (build with "
                         f"--lexical-engine pisa, or from 1M documents)")
    return v


def relaid(version: Path, out: Path, keys: int) -> Path:
    """`version`'s lexical index with its PISA files laid out again in `out` with `keys` order keys (0: rows)."""
    from indexer.runtime import lexical_pisa as lp
    from indexer.runtime.lexical import LEXICAL_DIR

    src, dst = version / LEXICAL_DIR, out / LEXICAL_DIR
    shutil.rmtree(out, ignore_errors=True)
    dst.mkdir(parents=True)
    built = {"fwd.doclex", lp.WAND_FILE, lp.INDEX_FILE}
    for f in src.iterdir():
        if f.name not in built:
            (dst / f.name).symlink_to(f)
    indptr = np.load(src / "forward.indptr.npy")
    lens = np.diff(indptr)
    tids = np.load(src / "forward.terms.npy")
    weights = np.load(src / "forward.weights.npy")
    scale = float(json.loads((src / "pisa.json").read_text())["scale"])
    t0 = time.perf_counter()
    saved, lp.ORDER_KEYS = lp.ORDER_KEYS, keys
    try:  # a document's length: its distinct terms (PISA's impacts, not its scorer, give the scores)
        lp.lay_out(dst, np.repeat(np.arange(len(lens)), lens), tids, weights, np.load(src / "df.npy"), lens, scale)
    finally:
        lp.ORDER_KEYS = saved
    log(f"laid out {dst} ({keys} keys) in {time.perf_counter() - t0:.1f} s: "
        f"{(dst / lp.INDEX_FILE).stat().st_size / 2**20:.1f} MiB of postings")
    return out


VARIANTS = (("rows", "maxscore"), ("ordered", "maxscore"), ("ordered", "block_max_wand"))  # the first: the base
LAYOUTS = {"rows": 0, "ordered": 5}  # ORDER_KEYS of each layout
ALGORITHMS = ("maxscore", "block_max_maxscore", "wand", "block_max_wand")


def variants(arg: str) -> tuple[tuple[str, str], ...]:
    """`--variants`' LAYOUT:ALGORITHM list, checked."""
    out = []
    for item in arg.split(","):
        layout, _, algorithm = item.strip().partition(":")
        if layout not in LAYOUTS or algorithm not in ALGORITHMS:
            raise argparse.ArgumentTypeError(f"{item!r}: want LAYOUT:ALGORITHM, LAYOUT one of {', '.join(LAYOUTS)}, "
                                             f"ALGORITHM one of {', '.join(ALGORITHMS)}")
        out.append((layout, algorithm))
    if len(set(out)) != len(out):
        raise argparse.ArgumentTypeError(f"{arg!r} names a variant twice")
    return tuple(out)


def timed(runs: dict[str, Callable[[], tuple[np.ndarray, np.ndarray]]], rounds: int, n: int,
          chosen: tuple[tuple[str, str], ...] = VARIANTS) -> tuple[dict[str, list[float]], int]:
    """Each (variant, query i) run `rounds` times, variants interleaved (their order flipped every other query);
    ms per run, and how many queries gave the same answer (ids and scores) on every variant."""
    from indexer.runtime import lexical_pisa as lp

    names = [f"{layout}, {algorithm}" for layout, algorithm in chosen]
    ms: dict[str, list[float]] = {name: [] for name in names}  # in VARIANTS' order: the first is the base
    same = 0
    saved = lp.ALGORITHM
    for rnd in range(rounds):
        for i in range(n):
            got = {}
            for name in (names if (i + rnd) % 2 else names[::-1]):
                lp.ALGORITHM = name.split(", ")[1]
                t0 = time.perf_counter()
                got[name] = runs[f"{name.split(',')[0]}|{i}"]()
                ms[name].append((time.perf_counter() - t0) * 1000)
            if rnd == 0:
                first = got[names[0]]
                same += all(np.array_equal(g[1], first[1]) and np.allclose(g[0], first[0], rtol=1e-6)
                            for g in got.values())
    lp.ALGORITHM = saved
    return ms, same


def row(label: str, ms: dict[str, list[float]], same: int, n: int) -> list[str]:
    out = []
    base = np.array(next(iter(ms.values())))
    for name in ms:
        t = np.array(ms[name])
        p99 = np.percentile(t, 99)
        out.append(f"| {label} | {name} | {np.median(t):.2f} / {t.mean():.2f} / {np.percentile(t, 90):.2f} / "
                   f"{p99:.2f} | {t.mean() / base.mean():.2f} | {p99 / np.percentile(base, 99):.2f} | {same} / {n} |")
    return out


HEADER = ["| query | PISA's document ids, query algorithm | wall ms p50 / mean / p90 / p99 | mean / the first's "
          "| p99 / the first's | same answers on all |", "|---|---|---|---|---|---|"]


def on_version(version: Path, n_queries: int, rounds: int, chosen: tuple[tuple[str, str], ...] = VARIANTS
               ) -> list[str]:
    from indexer.runtime import bounded_leg as bl
    from indexer.runtime.lexical import open_lexical
    from indexer.runtime.paths import data_dir

    v = open_pisa_version(version)
    work = version.parent.parent / "pisa-order"
    engines = {name: open_lexical(relaid(version, work / name, LAYOUTS[name]), v.lexical.info, mmap=True)
               for name in dict.fromkeys(layout for layout, _ in chosen)}
    texts, vecs = sc.held_out(data_dir() / QUORA, n_queries)
    dense = [v.search(vecs[i:i + 1], 100)[1][0] for i in range(len(texts))]

    def leg(name: str, i: int) -> Callable[[], tuple[np.ndarray, np.ndarray]]:
        lx = engines[name]
        return lambda: bl.complete(lx, bl.begin(lx, texts[i], 100, bounded_from=bl.BOUNDED_FROM), dense[i])

    def exact(name: str, i: int) -> Callable[[], tuple[np.ndarray, np.ndarray]]:
        return lambda: engines[name].search(texts[i], 10)

    lines = [f"{v.lexical.ntotal:,} documents ({version}); {len(texts)} held-out questions, {rounds} rounds, "
             f"layouts interleaved; load at start {load()}", "", *HEADER]
    for label, make in (("hybrid's bounded leg (top 100, dense merged)", leg), ("lexical, exact top 10", exact)):
        runs = {f"{n}|{i}": make(n, i) for n in engines for i in range(len(texts))}
        ms, same = timed(runs, rounds, len(texts), chosen)
        lines += row(label, ms, same, len(texts))
        log(lines[-1])
    v.close()
    shutil.rmtree(work, ignore_errors=True)
    return [*lines, "", f"load at the end {load()}"]


def on_quora(n_queries: int, rounds: int, work: Path, chosen: tuple[tuple[str, str], ...] = VARIANTS
             ) -> list[str]:
    from indexer.quora import read_rows
    from indexer.runtime import lexical_pisa as lp
    from indexer.runtime.lexical import build_lexical, lexical_info, open_lexical
    from indexer.runtime.paths import data_dir

    rows = list(read_rows(data_dir() / QUORA))
    docs = list(dict.fromkeys(q for r in rows if r.id < 300_000 for q in (r.question1, r.question2)))
    texts, _ = sc.held_out(data_dir() / QUORA, n_queries)
    engines = {}
    for name in dict.fromkeys(layout for layout, _ in chosen):
        keys = LAYOUTS[name]
        saved, lp.ORDER_KEYS = lp.ORDER_KEYS, keys
        try:
            t0 = time.perf_counter()
            folder = work / name
            shutil.rmtree(folder, ignore_errors=True)
            info = build_lexical(folder, list(enumerate(docs)), lexical_info(engine="pisa"))
            log(f"built {name} in {time.perf_counter() - t0:.1f} s")
        finally:
            lp.ORDER_KEYS = saved
        engines[name] = open_lexical(folder, info, mmap=True)
    lines = [f"Quora's {len(docs):,} distinct training questions (rows < 300,000), real text; {len(texts)} held-out "
             f"questions, {rounds} rounds, layouts interleaved; load at start {load()}", "", *HEADER]
    for k in (10, 100):
        ms, same = timed({f"{n}|{i}": (lambda n=n, i=i, k=k: engines[n].search(texts[i], k)) for n in engines
                          for i in range(len(texts))}, rounds, len(texts), chosen)
        lines += row(f"lexical, exact top {k}", ms, same, len(texts))
        log(lines[-1])
    shutil.rmtree(work, ignore_errors=True)
    return [*lines, "", f"load at the end {load()}"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--version", type=Path, help="a built version folder whose lexical engine is PISA")
    what.add_argument("--quora", action="store_true", help="Quora's training questions (real text)")
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--work", type=Path, default=sc.cache_dir() / "pisa-order")
    p.add_argument("--variants", type=variants, default=VARIANTS,
                   help="LAYOUT:ALGORITHM,... timed side by side, the first the base (default: "
                        + ",".join(f"{a}:{b}" for a, b in VARIANTS) + ")")
    args = p.parse_args()
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%MZ")
    if args.version:
        body, tag = on_version(args.version.resolve(), args.queries, args.rounds, args.variants), "version"
    else:
        body, tag = on_quora(args.queries, args.rounds, args.work, args.variants), "quora"
    text = "\n".join([f"# PISA's document order ({stamp})", "", f"`PYTHONPATH=$PWD STRATA_DATA_DIR=/work/shared/data "
                      f"python -m bench.pisa_order {' '.join(sys.argv[1:])}`", "", *body]) + "\n"
    out = RESULTS / f"pisa-order-{tag}-{stamp}.md"
    out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
