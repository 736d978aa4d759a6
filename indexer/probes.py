"""Query-like probes for the build's calibration (`indexer.calibrate`): the texts whose exact top 10 the index
must keep, and where they came from (recorded in the manifest as `ProbeInfo`).

Why not the documents themselves (what `--target-recall` first used): a document searched against its own corpus
sits close to its neighbours, while a short query sits far from everything, so its exact top 10 is spread over
more IVF lists. On SciFact (300 short claims vs 5,183 abstracts) document probes put nprobe at a setting that
keeps far less of exact search's top 10 for the real queries; probes must look like what will be searched.

In order of preference (`make_probes`):
1. **held-apart queries**: the dataset's own queries that its evaluation does not judge (a BEIR `queries.jsonl`
   also holds the train/dev queries; Quora's `question1`s without a duplicate). Calibration reads only their
   text, never qrels.
2. **document spans** (`--probes auto` when there are no held-apart queries, `--probes spans` always): a seeded
   5-15 word window of sampled documents (of their passages, in a version of passages). The evaluation queries
   are never searched by default, so the figures a build reports are measured on queries it did not tune on.
3. **the evaluation queries' text**, only when asked (`--probes queries` without held-apart queries), declared
   (`sees_eval_queries`): calibration is label-free and its target is exact search, not relevance, but choosing
   nprobe on the very queries later reported is still tuning on them, so the manifest and the build's output
   say so.

Imports: numpy, `indexer.eval_files`/`indexer.quora` (to read queries) and `indexer.runtime`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from indexer.eval_files import read_qrels, read_queries
from indexer.quora import QuoraSplit
from indexer.runtime.encoder import OnnxEncoder
from indexer.runtime.manifest import ProbeInfo
from indexer.runtime.store import GradedEvalSet, Store

log = logging.getLogger(__name__)

PROBE_SAMPLE = 1000  # probes encoded and searched: recall@10 to about ±0.005, a few seconds on 2 cores
# The calibration's exact search scores every probe against every document: at most this many (probe, document)
# pairs, so that its cost stops growing with N (1,000 probes up to 3M documents, 300 at 10M: recall@10 of 3,000
# neighbours, to about ±0.006), but never fewer than MIN_PROBES probes.
CALIBRATION_PAIRS = 3_000_000_000
MIN_PROBES = 300
SPAN_WORDS = (5, 15)
ProbeMode = Literal["auto", "queries", "spans"]
PROBE_MODES: tuple[str, ...] = ("auto", "queries", "spans")


@dataclass
class ProbeCandidates:
    """What a build knows of its queries before the index exists: held-apart query texts (with the FAISS id of
    the document each one also is, -1 if none: Quora's full protocol) and the evaluation queries' texts."""

    held_apart: list[str] = field(default_factory=list)
    held_apart_self_ids: list[int] | None = None
    held_apart_from: str = ""  # where they were found, for the manifest
    eval_texts: list[str] = field(default_factory=list)
    eval_self_ids: list[int] | None = None
    eval_from: str = ""
    mode: ProbeMode = "auto"
    sample: int = PROBE_SAMPLE
    seed: int = 0


@dataclass
class Probes:
    vectors: np.ndarray
    self_ids: np.ndarray  # per probe: the FAISS id to drop from its results (-1: none)
    info: ProbeInfo
    texts: list[str]  # kept in `PROBES_FILE` so that anyone can see (and re-encode) what was searched


def _pick(n: int, sample: int, seed: int) -> np.ndarray:
    if n <= sample:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, size=sample, replace=False))


def document_spans(texts: Sequence[str], seed: int, words: tuple[int, int] = SPAN_WORDS) -> list[str]:
    """A seeded window of `words` (uniform in the range) consecutive words of each text (the whole text when
    shorter): what someone who half remembers a document would type."""
    rng = np.random.default_rng(seed)
    out = []
    for text in texts:
        toks = text.split()
        length = int(rng.integers(words[0], words[1] + 1))
        start = int(rng.integers(0, max(1, len(toks) - length + 1)))
        out.append(" ".join(toks[start : start + length]))
    return out


def probe_count(n_docs: int, sample: int = PROBE_SAMPLE) -> int:
    """How many probes a calibration over `n_docs` documents searches: `sample`, fewer past
    `CALIBRATION_PAIRS` / `sample` documents (bounded exact-search work), never fewer than `MIN_PROBES`."""
    return max(min(sample, MIN_PROBES), min(sample, CALIBRATION_PAIRS // max(n_docs, 1)))


def make_probes(candidates: ProbeCandidates, encoder: OnnxEncoder, store: Store, doc_ids: np.ndarray,
                batch_size: int | None = None) -> Probes:
    """Choose and encode at most `candidates.sample` probes (see the module docstring for the order), fewer for
    a large corpus (`probe_count`)."""
    c = candidates
    sample = probe_count(len(doc_ids), c.sample)
    if sample < c.sample:
        log.info("calibration probes: %d, not %d, over %d documents (exact search bounded to %.1e pairs)",
                 sample, c.sample, len(doc_ids), CALIBRATION_PAIRS)
    if c.mode not in PROBE_MODES:
        raise ValueError(f"--probes must be one of {', '.join(PROBE_MODES)}; not {c.mode!r}")
    if c.mode != "spans" and c.held_apart:
        pick = _pick(len(c.held_apart), sample, c.seed)
        texts = [c.held_apart[i] for i in pick]
        self_ids = [c.held_apart_self_ids[i] for i in pick] if c.held_apart_self_ids else [-1] * len(pick)
        info = ProbeInfo(source="held_apart_queries", detail=c.held_apart_from, n_probes=len(pick),
                         n_available=len(c.held_apart), seed=c.seed, sees_eval_queries=False)
    elif c.mode == "queries" and c.eval_texts:
        pick = _pick(len(c.eval_texts), sample, c.seed)
        texts = [c.eval_texts[i] for i in pick]
        self_ids = [c.eval_self_ids[i] for i in pick] if c.eval_self_ids else [-1] * len(pick)
        info = ProbeInfo(source="eval_queries_text", detail=c.eval_from, n_probes=len(pick),
                         n_available=len(c.eval_texts), seed=c.seed, sees_eval_queries=True)
        log.warning("calibrating on the text of %d evaluation queries (%s; no qrels read): the nDCG/MRR reported "
                    "for them is then measured at a search setting chosen on them. --probes auto avoids it",
                    len(pick), c.eval_from)
    else:
        if c.mode == "queries":
            raise ValueError("--probes queries: this build has no queries (give --queries, or use auto/spans)")
        pick = _pick(len(doc_ids), sample, c.seed)
        chosen = doc_ids[pick]
        by_id = store.texts(chosen.tolist())
        texts = document_spans([by_id[int(i)] for i in chosen], c.seed)
        self_ids = [-1] * len(texts)  # a span's own document is a right answer, not the query itself
        info = ProbeInfo(source="document_spans", detail=f"a {SPAN_WORDS[0]}-{SPAN_WORDS[1]} word window of "
                         f"sampled documents", n_probes=len(texts), n_available=len(doc_ids), seed=c.seed,
                         sees_eval_queries=False)
    log.info("calibration probes: %d %s (%s)", info.n_probes, info.source.replace("_", " "), info.detail)
    vectors = encoder.encode(texts, batch_size, progress=True, desc="calibration probes")
    return Probes(vectors, np.asarray(self_ids, dtype=np.int64), info, texts)


def quora_probe_candidates(split: QuoraSplit, mode: str = "auto") -> ProbeCandidates:
    """A Quora build's probes: the `question1`s that its evaluation does not judge (no duplicate among the rows
    read), each also a document in the full/heldout protocols (its own id then dropped from its results)."""
    ev = split.evalset
    every_question = split.protocol in ("full", "heldout")
    return ProbeCandidates(
        held_apart=list(split.unjudged_queries.values()),
        held_apart_self_ids=list(split.unjudged_queries) if every_question else None,
        held_apart_from=f"{split.protocol} protocol: question1s without a duplicate, not evaluated",
        eval_texts=list(ev.query_texts), eval_self_ids=[int(q) for q in ev.query_ids] if every_question else None,
        eval_from=f"{split.protocol} protocol evaluation queries", mode=mode)  # type: ignore[arg-type]


def corpus_probe_candidates(queries: Path | None, qrels: Path | None, evalset: GradedEvalSet | None,
                            eval_from: str, resolve: Callable[[Iterable[str]], dict[str, int]],
                            mode: str = "auto") -> ProbeCandidates:
    """A corpus build's probes: the queries of its queries file that its qrels do not name (BEIR's
    `queries.jsonl` holds the train/dev queries beside the test ones; a queries file without qrels is all
    held apart), then the evaluation queries' text. A query whose id is also a document's (BEIR's Quora) does
    not count that document among its results, as in BEIR's evaluation; `resolve` maps ids to FAISS ids."""
    held: list[str] = []
    held_ids: list[int] | None = None
    held_from = ""
    if queries is not None:
        texts = read_queries(queries).texts
        judged = set(read_qrels(qrels)) if qrels is not None else set()
        kept = [q for q in texts if q not in judged]
        held = [texts[q] for q in kept]
        found = resolve(kept)
        held_ids = [found.get(q, -1) for q in kept]
        held_from = (f"{queries.name}: {len(held)} of {len(texts)} queries not named by {qrels.name}"
                     if qrels is not None else f"{queries.name} (no qrels)")
    return ProbeCandidates(held_apart=held, held_apart_self_ids=held_ids, held_apart_from=held_from,
                           eval_texts=evalset.query_texts if evalset else [],
                           eval_self_ids=list(evalset.self_docs) if evalset else None, eval_from=eval_from,
                           mode=mode)  # type: ignore[arg-type]


PROBES_FILE = "calibration_probes.npz"  # in the version folder: `--add` and compact calibrate on the same probes


def save_probes(folder: Path, probes: Probes) -> None:
    np.savez(folder / PROBES_FILE, vectors=probes.vectors, self_ids=probes.self_ids,
             texts=np.asarray(probes.texts, dtype=np.str_))


def load_probes(folder: Path, info: ProbeInfo | None) -> Probes | None:
    """The probes a version was calibrated on (copied into a version grown from it), or None."""
    path = folder / PROBES_FILE
    if info is None or not path.is_file():
        return None
    with np.load(path) as z:
        return Probes(z["vectors"], z["self_ids"], info, z["texts"].tolist())
