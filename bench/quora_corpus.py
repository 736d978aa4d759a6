"""Write a small "your own corpus" from Quora rows below 300,000 (never the held-out rows): a JSONL corpus with
metadata plus evaluation queries and qrels, or the same as a BEIR folder. Used by the README's worked example
and to measure ingest rate.

    python bench/quora_corpus.py --rows 5000 --out /tmp/quora-corpus       # docs.jsonl queries.jsonl qrels.tsv
    python bench/quora_corpus.py --rows 5000 --out /tmp/quora-beir --beir  # corpus.jsonl queries.jsonl qrels/

Corpus = every question (id = its qid, an integer; BEIR: a string, as BEIR ids are), metadata `bucket` (qid
mod 10) and `chars` (length); queries = the question1 of duplicate pairs, under their qid; qrels = their
duplicates' qids with grade 1. A query is also a document (its own question) with the same id, which the
evaluation drops from its results as BEIR does (`ignore_identical_ids`), like BEIR's own Quora set.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from indexer.quora import HELD_OUT_FROM, read_rows
from indexer.runtime.paths import default_quora_source


def write_corpus(source: Path, out: Path, rows: int, beir: bool) -> tuple[int, int]:
    docs: dict[int, str] = {}
    dups: dict[int, list[int]] = {}
    for r in read_rows(source, rows):
        if r.id >= HELD_OUT_FROM:
            break
        for qid, text in ((r.qid1, r.question1), (r.qid2, r.question2)):
            if text:
                docs.setdefault(qid, text)
        if r.is_duplicate and r.question1 and r.question2:
            dups.setdefault(r.qid1, []).append(r.qid2)
    out.mkdir(parents=True, exist_ok=True)
    id_key = "_id" if beir else "id"
    with open(out / ("corpus.jsonl" if beir else "docs.jsonl"), "w", encoding="utf-8") as fh:
        for qid, text in docs.items():
            row = {id_key: str(qid) if beir else qid, "text": text, "bucket": qid % 10, "chars": len(text)}
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    with open(out / "queries.jsonl", "w", encoding="utf-8") as fh:
        for qid in dups:
            fh.write(json.dumps({"_id": str(qid), "text": docs[qid]}, ensure_ascii=False) + "\n")
    qrels = out / "qrels" / "test.tsv" if beir else out / "qrels.tsv"
    qrels.parent.mkdir(exist_ok=True)
    with open(qrels, "w", encoding="utf-8") as fh:
        fh.write("query-id\tcorpus-id\tscore\n")
        for qid, partners in dups.items():
            fh.writelines(f"{qid}\t{d}\t1\n" for d in partners)
    return len(docs), len(dups)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=Path(default_quora_source()), help="the Quora TSV")
    p.add_argument("--rows", type=int, default=5000, help="first N rows (all below 300,000)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--beir", action="store_true", help="BEIR layout instead of docs.jsonl + queries + qrels.tsv")
    args = p.parse_args()
    n_docs, n_queries = write_corpus(args.data, args.out, args.rows, args.beir)
    print(f"wrote {n_docs} documents and {n_queries} queries with qrels to {args.out}")


if __name__ == "__main__":
    main()
