"""What the one store schema costs a Quora build: the store file's size, the time to open it, and the time of an
id lookup, for a store in the one schema (`write_store` today) and the same documents in the schema Quora builds
wrote before it (`docs`, `queries`, `gold`, `meta` only; `Store` builds the corpus tables for it when it opens it).

Both stores hold the same documents (the real Quora questions when the data is there, else generated texts, ids =
their row). Opens and lookups are timed in interleaved rounds (old, new, old, new, ...) on the machine's shared
cores; the load average is printed with the figures.

    python bench/store_schema.py [--docs 404000] [--rounds 5] [--out bench/results]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from indexer.runtime.store import Store, write_store  # noqa: E402

OLD_SCHEMA = """
CREATE TABLE docs (id INTEGER PRIMARY KEY, text TEXT NOT NULL);
CREATE TABLE queries (id INTEGER PRIMARY KEY, text TEXT NOT NULL);
CREATE TABLE gold (query_id INTEGER NOT NULL, doc_id INTEGER NOT NULL, PRIMARY KEY (query_id, doc_id));
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


def texts(n: int) -> tuple[list[str], str]:
    try:
        from indexer.quora import read_rows
        from indexer.runtime.paths import data_dir

        out: list[str] = []
        for row in read_rows(data_dir() / "quora_duplicate_questions.partial.tsv.gz"):
            out += [row.question1, row.question2]
            if len(out) >= n:
                return out[:n], "real Quora questions (rows < 300,000)"
    except (FileNotFoundError, ImportError, OSError):
        pass
    return [f"What is question number {i} about, and how would a kite fly in weather {i * 7}?" for i in range(n)], \
        "generated texts (no Quora data found)"


def write_old(path: Path, docs: list[str]) -> None:
    con = sqlite3.connect(path)
    con.executescript(OLD_SCHEMA)
    con.executemany("INSERT INTO docs VALUES (?, ?)", enumerate(docs))
    con.commit()
    con.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=404_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path, default=None, help="write the figures to OUT/store-schema-<time>.md")
    args = ap.parse_args()
    docs, source = texts(args.docs)
    with tempfile.TemporaryDirectory() as tmp:
        paths = {"old schema": Path(tmp) / "old.sqlite", "one schema": Path(tmp) / "new.sqlite"}
        write_old(paths["old schema"], docs)
        write_store(paths["one schema"], list(range(len(docs))), docs, [], [], [])
        wanted = list(range(0, len(docs), max(1, len(docs) // 64)))
        opens: dict[str, list[float]] = {k: [] for k in paths}
        lookups: dict[str, list[float]] = {k: [] for k in paths}
        for _ in range(args.rounds):
            for name, path in paths.items():
                t0 = time.perf_counter()
                store = Store(path)
                t1 = time.perf_counter()
                found = store.ids_of(wanted)
                t2 = time.perf_counter()
                store.close()
                assert len(found) == len(wanted)
                opens[name].append((t1 - t0) * 1000)
                lookups[name].append((t2 - t1) * 1000)
        sizes = {k: p.stat().st_size for k, p in paths.items()}
    load = os.getloadavg()
    lines = [f"# Store schema: {len(docs):,} documents ({datetime.now(timezone.utc):%Y-%m-%dT%H:%M:%SZ})", "",
             f"texts: {source}",
             "", f"load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} on {os.cpu_count()} cores; "
             f"{args.rounds} interleaved rounds; `python bench/store_schema.py --docs {args.docs}`", "",
             f"| store | file MB | open ms (median, min-max) | ids_of({len(wanted)}) ms (median) |",
             "|---|---|---|---|"]
    for name in paths:
        o = opens[name]
        lines.append(f"| {name} | {sizes[name] / 1e6:.1f} | {statistics.median(o):.0f} ({min(o):.0f}-{max(o):.0f}) | "
                     f"{statistics.median(lookups[name]):.2f} |")
    old, new = statistics.median(opens["old schema"]), statistics.median(opens["one schema"])
    lines += ["", f"ratios: file one/old {sizes['one schema'] / sizes['old schema']:.2f}; open old/one "
              f"{old / new:.1f} (the old schema's corpus tables are built at open)"]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        path = args.out / f"store-schema-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}.md"
        path.write_text(text)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
