"""Hard-negative mining with Strata's own index (`encoder mine`): encode the Quora training split's questions
with a served encoder (ONNX folder), build the IVF index the indexer builds, and for every training duplicate
pair (anchor = `question1`, positive = `question2`) take the anchor's nearest questions that are *not* labelled
duplicates of it — after skipping the first `skip` such candidates, where unlabelled duplicates sit — as hard
negatives. Labelled duplicates are whole clusters: the connected components of the training split's duplicate
pairs, so a duplicate of a duplicate is never a negative.

The training split is `models.data.quora_training_questions` (rows 100,000–295,999 without qids of the
evaluation or dev rows); rows ≥ 300,000 are never read. `--review` writes a seeded sample of anchors with their
top candidates, rank by rank, for a hand check of how many candidates are in fact duplicates (false negatives).
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from models.data import MINED_HEADER, TrainingQuestions

if TYPE_CHECKING:
    from indexer.runtime.encoder import OnnxEncoder

log = logging.getLogger(__name__)

SEARCH_CHUNK = 2048  # anchors per FAISS search call: progress between calls, throughput unchanged


@dataclass
class MineReport:
    anchors: int
    with_negative: int
    negatives: int
    skip: int
    take: int
    questions_indexed: int
    nlist: int
    nprobe: int


def duplicate_clusters(pairs: list[tuple[int, int]]) -> dict[int, int]:
    """qid → cluster representative over the duplicate graph (union-find with path halving)."""
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in pairs:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return {q: find(q) for q in parent}


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def _clean(text: str) -> str:
    return " ".join(text.split())  # one line, no tabs: the file is a plain TSV


def candidates_for(anchor: int, positive: int, hits: np.ndarray, texts: dict[int, str],
                   cluster: dict[int, int]) -> list[int]:
    """The anchor's hits in rank order minus itself, its labelled duplicate cluster, and questions whose text
    equals the anchor's or the positive's."""
    own = cluster.get(anchor, anchor)
    same = {_norm(texts[anchor]), _norm(texts[positive])}
    out = []
    for qid in hits:
        qid = int(qid)
        if qid < 0 or qid == anchor or cluster.get(qid, qid) == own or _norm(texts[qid]) in same:
            continue
        out.append(qid)
    return out


def _encoded(encoder: OnnxEncoder, texts: list[str], out: Path, progress: bool) -> np.ndarray:
    """The questions' vectors. The encoding is most of the cost: kept beside the output, keyed by the model and
    the questions, so that another --skip/--take or a failed write does not encode again."""
    out.parent.mkdir(parents=True, exist_ok=True)
    cache = out.with_name(out.name + f".{encoder.meta.onnx_sha256[:12]}-{len(texts)}.vectors.npy")
    if cache.is_file():
        log.info("reusing the vectors in %s", cache)
        return np.load(cache)
    log.info("encoding %d training questions with %s", len(texts), encoder.model_dir)
    # progress: bars on a terminal; log lines (and $STRATA_PROGRESS_FILE) in any case
    vectors = encoder.encode(texts, progress=True, bar=progress, desc="mine: encoding")
    np.save(cache.with_suffix(".tmp.npy"), vectors)
    cache.with_suffix(".tmp.npy").replace(cache)
    return vectors


def _write_review(path: Path, questions: TrainingQuestions, hits: np.ndarray, cluster: dict[int, int],
                  rng: random.Random, anchors: int, ranks: int) -> None:
    """A sample of anchors with their top candidates, for a hand check of the mined negatives."""
    picked = rng.sample(range(len(questions.pairs)), min(anchors, len(questions.pairs)))
    with open(path, "w", encoding="utf-8") as f:
        f.write("# hand check: for each anchor, is the candidate at rank r a duplicate (same intent)?\n")
        for i in picked:
            anchor, positive = questions.pairs[i]
            cands = candidates_for(anchor, positive, hits[i], questions.texts, cluster)[:ranks]
            f.write(f"\nA {anchor}: {questions.texts[anchor]}\n  positive: {questions.texts[positive]}\n")
            for r, c in enumerate(cands, 1):
                f.write(f"  {r}. [{c}] {questions.texts[c]}\n")


def mine(
    questions: TrainingQuestions,
    model_dir: Path,
    out: Path,
    *,
    skip: int = 2,
    take: int = 1,
    depth: int = 32,
    nlist: int = 1024,
    nprobe: int = 32,
    threads: int | None = None,
    review: Path | None = None,
    review_anchors: int = 40,
    review_ranks: int = 5,
    seed: int = 0,
    progress: bool = True,
) -> MineReport:
    from indexer.runtime.encoder import OnnxEncoder
    from indexer.runtime.faiss.training import build_ivf, effective_nlist

    if skip < 0 or take < 1 or depth < skip + take:
        raise ValueError(f"need skip >= 0, take >= 1 and depth >= skip + take (got {skip}, {take}, {depth})")
    encoder = OnnxEncoder(model_dir, threads=threads)
    qids = np.fromiter(questions.texts, dtype=np.int64, count=len(questions.texts))
    texts = list(questions.texts.values())
    vectors = _encoded(encoder, texts, out, progress)
    fitted = effective_nlist(len(texts), nlist)
    index, _, _ = build_ivf(vectors, qids, fitted, nprobe)
    position = {int(q): i for i, q in enumerate(qids)}
    anchors = np.asarray([position[a] for a, _ in questions.pairs], dtype=np.int64)
    log.info("searching %d anchors (depth %d, nprobe %d)", len(anchors), depth, nprobe)
    hits = _search_anchors(index, vectors, anchors, depth, progress)
    cluster = duplicate_clusters(questions.pairs)
    with_negative, negatives = _write_triplets(out, questions, hits, cluster, skip, take)
    if review is not None:
        _write_review(review, questions, hits, cluster, random.Random(seed), review_anchors, review_ranks)
    return MineReport(len(questions.pairs), with_negative, negatives, skip, take, len(texts), fitted, nprobe)


def _search_anchors(index: Any, vectors: np.ndarray, anchors: np.ndarray, depth: int, progress: bool) -> np.ndarray:
    """Each anchor's top `depth` + 8 ids (the margin: labelled duplicates and the anchor itself are dropped before
    skipping), searched in chunks so that the search reports its progress too."""
    from indexer.runtime.faiss.search import search
    from indexer.runtime.progress import Progress

    chunks = []
    with Progress(len(anchors), "mine: searching", unit="anchors", bar=progress, logger=log) as shown:
        for start in range(0, len(anchors), SEARCH_CHUNK):
            chunk = anchors[start : start + SEARCH_CHUNK]
            chunks.append(search(index, vectors[chunk], depth + 8)[1])
            shown.update(len(chunk))
    return np.concatenate(chunks) if chunks else np.zeros((0, depth + 8), dtype=np.int64)


def _write_triplets(out: Path, questions: TrainingQuestions, hits: np.ndarray, cluster: dict[int, int], skip: int,
                    take: int
                    ) -> tuple[int, int]:
    """The mined (anchor, positive, negative) rows written to `out` (whole or not at all); returns (anchors with a
    negative, negatives)."""
    tmp = out.with_name(out.name + ".tmp")
    with_negative = negatives = 0
    with open(tmp, "w", encoding="utf-8", newline="") as f:
        # Plain tab-joined lines (texts hold no tabs or newlines after _clean): quotes stay literal, which is how
        # `read_mined` reads them back (csv.QUOTE_NONE).
        def writerow(fields: list[object]) -> None:
            f.write("\t".join(map(str, fields)) + "\n")

        writerow([*MINED_HEADER, "anchor_qid", "positive_qid", "negative_qid", "candidate_rank"])
        for (anchor, positive), row in zip(questions.pairs, hits, strict=True):
            cands = candidates_for(anchor, positive, row, questions.texts, cluster)[skip : skip + take]
            if cands:
                with_negative += 1
            for rank, neg in enumerate(cands, skip + 1):
                negatives += 1
                writerow([_clean(questions.texts[anchor]), _clean(questions.texts[positive]),
                          _clean(questions.texts[neg]), anchor, positive, neg, rank])
    tmp.replace(out)
    return with_negative, negatives
