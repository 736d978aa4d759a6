"""What the label-free recipes (`models.corpus_adapt`) make of a user's corpus: its documents, the held-out split,
the training views, and the selection sets the checkpoints are scored on.

- Documents: every non-empty one of a corpus `indexer build --data` reads (`indexer.corpus`), title kept apart.
  Training documents are a seeded sample of at most `max_docs`; proxy documents are drawn first with a fixed seed
  (`PROXY_SEED`, the same for every run over a corpus), so seeds differ only in training.
- Views: title → body where a document has a title, else two independent random crops (10–50 % of its words, each
  at least `MIN_CROP_WORDS`, Contriever), plus a mined neighbour's view (`models.mine`'s TSV) for `crops`.
- Selection sets: `RetrievalDev`, dev nDCG@10 of exact search over the dev queries' judged documents plus random
  others; `CropProxy`, held-out crop-pair top-1 accuracy (label-free); `selection_curve` reads the figures back
  from the trainer's log.

It imports `indexer.corpus`, `indexer.eval_files` and `indexer.metrics`; never torch, nor the recipes.
"""

from __future__ import annotations

import csv
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

MIN_CROP_WORDS = 5
CROP_RATIO = (0.1, 0.5)  # Contriever's independent cropping
PROXY_SEED = 0  # proxy and dev documents: the same for every seed of a corpus


class AdaptInputError(ValueError):
    """A corpus, queries or qrels file unfit for adaptation; the message names the file (and line)."""


# --- the corpus ------------------------------------------------------------------------------------------------

@dataclass
class CorpusDoc:
    ext_id: str
    title: str
    body: str

    @property
    def text(self) -> str:
        return (self.title + " " + self.body).strip() if self.title else self.body


def read_corpus(data: Path, *, id_field: str | None = None, text_field: str | None = None,
                title_field: str | None = None) -> list[CorpusDoc]:
    """Every non-empty document of `data` (the formats `indexer build --data` reads), title kept apart."""
    from indexer.corpus import CorpusFormatError, open_corpus

    try:
        src = open_corpus(Path(data), id_field=id_field, text_field=text_field, title_field=title_field)
        return _documents(data, src)
    except CorpusFormatError as exc:
        raise AdaptInputError(str(exc)) from exc


def _documents(data: Path, src: Any) -> list[CorpusDoc]:  # noqa: ANN401 (an indexer.corpus source)
    title_field = src.fields.title
    docs: list[CorpusDoc] = []
    for doc in src.docs():
        title = doc.metadata.get(title_field) if title_field else None
        title = " ".join(str(title).split()) if isinstance(title, str) else ""
        full = " ".join(doc.text.split())
        body = full[len(title):].strip() if title and full.startswith(title) else full
        if full:
            docs.append(CorpusDoc(str(doc.ext_id), title, body or full))
    if not docs:
        raise AdaptInputError(f"{data}: no documents with text")
    return docs


@dataclass
class Split:
    proxy: list[int]  # indices of held-out documents (never trained on)
    train: list[int]


def split_docs(n: int, proxy_docs: int, max_docs: int) -> Split:
    order = np.random.default_rng(PROXY_SEED).permutation(n).tolist()
    proxy = order[: min(proxy_docs, max(0, n // 5))]  # a small corpus keeps most of its documents for training
    return Split(proxy, order[len(proxy) : len(proxy) + max_docs])


def crop(words: list[str], rng: random.Random, window: int) -> str:
    """A random crop of 10–50 % of the words of a random `window`-word span (at least MIN_CROP_WORDS)."""
    if len(words) > window:
        start = rng.randrange(len(words) - window + 1)
        words = words[start : start + window]
    n = len(words)
    size = min(n, max(MIN_CROP_WORDS, round(n * rng.uniform(*CROP_RATIO))))
    start = rng.randrange(n - size + 1)
    return " ".join(words[start : start + size])


def view_pair(doc: CorpusDoc, rng: random.Random, window: int) -> tuple[str, str]:
    """title → body where there is a title, else two independent crops."""
    if doc.title and doc.body and doc.body != doc.title:
        return doc.title, doc.body
    words = doc.text.split()
    return crop(words, rng, window), crop(words, rng, window)


def negative_view(doc: CorpusDoc, rng: random.Random, window: int) -> str:
    """What a mined neighbour contributes: shaped like the positive side (its body, or a crop)."""
    if doc.title and doc.body and doc.body != doc.title:
        return doc.body
    return crop(doc.text.split(), rng, window)


def words_window(max_length: int) -> int:
    return max(MIN_CROP_WORDS, int(max_length * 0.75))  # ~1.3 wordpieces per English word


# --- selection sets --------------------------------------------------------------------------------------------

@dataclass
class RetrievalDev:
    """nDCG@10 × 100 of exact search over dev documents, plus the crop proxy of the same call in `extras`."""

    doc_ids: list[str]
    doc_texts: list[str]
    query_ids: list[str]
    query_texts: list[str]
    qrels: list[dict[str, int]]
    proxy: CropProxy | None = None
    metric: str = "dev_ndcg10"
    extras: dict[str, float] = field(default_factory=dict)

    def score(self, encode: Callable[[list[str]], np.ndarray]) -> float:
        value = float(np.mean(self.per_item(encode)))
        self.extras = {"proxy_acc": round(self.proxy.score(encode), 4)} if self.proxy else {}
        return value

    def per_item(self, encode: Callable[[list[str]], np.ndarray]) -> np.ndarray:
        """nDCG@10 × 100 of each dev query (every one has a judged document in the corpus)."""
        from indexer.metrics import per_query

        docs, queries = encode(self.doc_texts), encode(self.query_texts)
        scores = queries @ docs.T
        # a document with the query's own id never counts (BEIR's ignore_identical_ids; Quora's queries are documents)
        scores[np.asarray(self.query_ids)[:, None] == np.asarray(self.doc_ids)[None, :]] = -np.inf
        top = np.argsort(-scores, axis=1, kind="stable")[:, :10]
        index = {d: i for i, d in enumerate(self.doc_ids)}
        qrels = [{index.get(d, -2 - j): g for j, (d, g) in enumerate(q.items())} for q in self.qrels]
        values = per_query(top, qrels)["ndcg_at_10"] * 100
        return values[~np.isnan(values)]


@dataclass
class CropProxy:
    """Held-out crop-pair retrieval: top-1 accuracy × 100 of each document's first view among the second views
    of all held-out documents (label-free)."""

    anchors: list[str]
    positives: list[str]
    metric: str = "proxy_acc"
    extras: dict[str, float] = field(default_factory=dict)

    def score(self, encode: Callable[[list[str]], np.ndarray]) -> float:
        return float(np.mean(self.per_item(encode)))

    def per_item(self, encode: Callable[[list[str]], np.ndarray]) -> np.ndarray:
        """100 where a document's first view retrieves its own second view first, else 0."""
        a, p = encode(self.anchors), encode(self.positives)
        return (np.argmax(a @ p.T, axis=1) == np.arange(len(a))).astype(np.float64) * 100


def crop_proxy(docs: list[CorpusDoc], split: Split, window: int) -> CropProxy | None:
    rng = random.Random(PROXY_SEED)
    pairs = [view_pair(docs[i], rng, window) for i in split.proxy]
    if len(pairs) < 2:
        return None
    return CropProxy([a for a, _ in pairs], [p for _, p in pairs])


@dataclass(frozen=True)
class DevQueries:
    """Where the dev queries are (`encoder adapt --queries/--qrels/--split`) and how many of them to take."""

    queries: Path  # a BEIR folder (its qrels/<split>.tsv) or a queries file with `qrels`
    qrels: Path | None = None
    split: str = "dev"
    query_ids: list[str] | None = None  # restrict the dev queries to these (a declared split of a test set)
    max_queries: int = 200
    max_docs: int = 2_000


def dev_set(corpus: Path, docs: list[CorpusDoc], proxy: CropProxy | None, dev: DevQueries) -> RetrievalDev:
    """The dev queries (at most `max_queries`, seeded) with a judged document in the `corpus`, over their judged
    documents plus random others (`max_docs` in all)."""
    from indexer.corpus import CorpusFormatError
    from indexer.eval_files import query_files, read_qrels, read_queries

    try:
        qpath, rpath = query_files(Path(dev.queries), dev.qrels, dev.split)
        texts, judged = read_queries(qpath).texts, read_qrels(rpath)
    except CorpusFormatError as exc:
        raise AdaptInputError(str(exc)) from exc
    position = {d.ext_id: i for i, d in enumerate(docs)}
    wanted = set(dev.query_ids) if dev.query_ids is not None else None
    qids = sorted(q for q, j in judged.items() if q in texts and (wanted is None or q in wanted)
                  and any(g > 0 and d in position for d, g in j.items()))
    if not qids:
        raise AdaptInputError(f"{rpath}: no query with a relevant document in {corpus} (and a text in {qpath})")
    rng = random.Random(PROXY_SEED)
    if len(qids) > dev.max_queries:
        qids = sorted(rng.sample(qids, dev.max_queries))
    chosen = {position[d] for q in qids for d in judged[q] if d in position}
    others = [i for i in np.random.default_rng(PROXY_SEED).permutation(len(docs)).tolist() if i not in chosen]
    chosen |= set(others[: max(0, dev.max_docs - len(chosen))])
    order = sorted(chosen)
    return RetrievalDev([docs[i].ext_id for i in order], [docs[i].text for i in order], qids,
                        [texts[q] for q in qids], [judged[q] for q in qids], proxy)


def read_mined_ids(path: Path) -> dict[int, int]:
    """anchor document index → its first mined negative's index, from `models.mine`'s TSV."""
    out: dict[int, int] = {}
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(reader)
        a, n = header.index("anchor_qid"), header.index("negative_qid")
        for row in reader:
            out.setdefault(int(row[a]), int(row[n]))
    return out


def training_views(recipe: str, docs: list[CorpusDoc], train: list[int], negatives: dict[int, int], seed: int,
                   window: int) -> list[list[str]]:
    rng = random.Random(seed)
    out: list[list[str]] = []
    for i in train:
        if recipe != "crops":  # simcse, sgopt: one text, its views made in the model (dropout; frozen layers)
            out.append([docs[i].text])
            continue
        if i not in negatives:
            continue
        anchor, positive = view_pair(docs[i], rng, window)
        out.append([anchor, positive, negative_view(docs[negatives[i]], rng, window)])
    rng.shuffle(out)
    return out


def selection_curve(log_path: Path) -> list[dict[str, float]]:
    """The selection score (and side figures) at every evaluated step, from the trainer's log (last per step)."""
    rows: dict[int, dict[str, float]] = {}
    if log_path.is_file():
        for line in log_path.read_text().splitlines():
            row = json.loads(line) if line.strip() else {}
            if "dev" in row and "step" in row:
                rows[int(row["step"])] = {k: v for k, v in row.items() if k not in ("time", "best_dev")}
    return [rows[s] for s in sorted(rows)]

