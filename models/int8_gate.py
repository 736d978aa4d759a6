"""The int8 quality gate: int8 against fp32 on STS-B dev (Spearman × 100) and Quora MRR@10 (paper protocol, exact
search, so only the encoder differs); refused when either drops more than `max_drop` points.

Staged, so that a clear case costs a small sample and only a close one pays the full gate:

1. **screen**: a seeded 500-pair sample of STS-B dev and the first 2,000 Quora rows. Each drop gets a paired
   bootstrap interval (`CONFIDENCE`, over pairs and queries). Both upper bounds within `max_drop`: passed; either
   lower bound beyond it: refused (with `rows` at or below 2,000, a small demo's, the screen takes those rows:
   only STS-B is sampled, and the MRR drop is the full gate's own figure); else
2. **full**: all 1,500 STS-B dev pairs and `rows` (default 20,000) Quora rows, point
   estimates against `max_drop`.

The screen decides as the full gate does on the recorded schemes and on deliberately damaged quantizations (the
comparison is in docs/decisions.md). The fp32 side of each sample (per-pair
cosines, per-query reciprocal ranks: a few kB) is cached under `$STRATA_HOME/cache/int8-gate`, keyed by the fp32
graph's sha256, its max length and the sample's content (its texts, ids and gold labels, hashed): a second
export of the same checkpoint and pooling encodes only the int8 side. The package ships the screen's reference
of `encoder export`'s default graph (all-MiniLM-L6-v2, mean) and of the demo's (`layers:0,6`) under the same key
(`models/gate_refs/`, see its README): the exporter writes the same graph bit for bit from the same checkpoint
with the pinned torch, so the first export on a new machine finds it; any other graph, max length or data misses
the key and is measured.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from indexer.evaluate import per_query_ranks
from indexer.quora import load_split, resolve_source
from indexer.runtime.encoder import ENCODER_META, OnnxEncoder
from indexer.runtime.faiss.search import brute_force_search
from indexer.runtime.paths import default_quora_source, strata_home

log = logging.getLogger(__name__)

SCREEN_PAIRS = 500
SCREEN_ROWS = 2_000
CONFIDENCE = 0.99  # each bound is one-sided at this level
BOOTSTRAP = 1_000
SEED = 0
Stage = Literal["screen", "full"]
PACKAGED = Path(__file__).resolve().parent / "gate_refs"  # shipped references (package data)
CACHE_VERSION = 2
# Texts per run of the gate's one encoding pass (runs cut by token count)
GATE_BATCH = 32


@dataclass
class GateReport:
    stsb_dev_fp32: float
    stsb_dev_int8: float
    quora_mrr_fp32: float
    quora_mrr_int8: float
    quora_rows: int
    max_drop: float
    stage: Stage = "full"
    stsb_pairs: int = 0
    # screen only: the bootstrap interval of each drop, in points ([lower, upper] at CONFIDENCE each side)
    stsb_drop_bounds: tuple[float, float] | None = None
    mrr_drop_bounds: tuple[float, float] | None = None

    @property
    def stsb_drop(self) -> float:
        return self.stsb_dev_fp32 - self.stsb_dev_int8

    @property
    def mrr_drop(self) -> float:
        return (self.quora_mrr_fp32 - self.quora_mrr_int8) * 100

    def _bounds(self) -> list[tuple[float, float]]:
        """Each drop's [lower, upper]: its bootstrap bounds on a screen, else (a full gate, or a screen measure whose
        sample is the full gate's: a small `rows`) its point estimate, which is the full gate's figure."""
        sts = self.stsb_drop_bounds if self.stage == "screen" and self.stsb_drop_bounds else None
        mrr = self.mrr_drop_bounds if self.stage == "screen" and self.mrr_drop_bounds else None
        return [sts or (self.stsb_drop, self.stsb_drop), mrr or (self.mrr_drop, self.mrr_drop)]

    @property
    def passed(self) -> bool:
        return all(hi <= self.max_drop for _, hi in self._bounds())

    @property
    def clear(self) -> bool:
        """The screen's decision stands: both drops clearly within `max_drop`, or one clearly beyond it."""
        return self.stage == "full" or self.passed or any(lo > self.max_drop for lo, _ in self._bounds())

    def summary(self) -> str:
        def bounds(b: tuple[float, float] | None) -> str:
            return f", {CONFIDENCE:.0%} bounds [{-b[1]:+.2f}, {-b[0]:+.2f}]" if b else ""

        where = (f"screen: {self.stsb_pairs} pairs / {self.quora_rows} rows" if self.stage == "screen"
                 else f"{self.stsb_pairs} pairs / {self.quora_rows} rows")
        return (f"STS-B dev {self.stsb_dev_fp32:.2f} → {self.stsb_dev_int8:.2f} ({-self.stsb_drop:+.2f}"
                f"{bounds(self.stsb_drop_bounds)}); Quora MRR@10 ({self.quora_rows} rows, exact search) "
                f"{self.quora_mrr_fp32 * 100:.2f} → {self.quora_mrr_int8 * 100:.2f} ({-self.mrr_drop:+.2f}"
                f"{bounds(self.mrr_drop_bounds)}); allowed drop {self.max_drop} points ({where})")

    def as_dict(self) -> dict[str, object]:
        """JSON's own types (bounds as lists), so that encoder.json read back equals what the export returned."""
        bounds = {k: list(v) for k in ("stsb_drop_bounds", "mrr_drop_bounds") if (v := getattr(self, k)) is not None}
        return asdict(self) | bounds | {"stsb_drop": round(self.stsb_drop, 4), "mrr_drop": round(self.mrr_drop, 4)}


@dataclass
class Items:
    """One graph's per-item figures on one sample: STS pair cosines (with the gold scores) and per-query
    reciprocal ranks @10."""

    cosines: np.ndarray
    gold: np.ndarray
    rr: np.ndarray


def rankdata(x: np.ndarray) -> np.ndarray:
    """Ranks (1-based, float64) along the last axis, ties given their average rank: `scipy.stats.rankdata(x,
    axis=-1)`'s figures exactly, without importing scipy.stats (an import the export's gate would pay:
    docs/decisions.md)."""
    x = np.asarray(x, dtype=np.float64)
    n = x.shape[-1]
    flat = x.reshape(-1, n)
    order = np.argsort(flat, axis=1, kind="mergesort")
    s = np.take_along_axis(flat, order, 1)
    pos = np.broadcast_to(np.arange(n), s.shape)
    first = np.ones(s.shape, dtype=bool)
    first[:, 1:] = s[:, 1:] != s[:, :-1]  # where a run of equal values starts
    last = np.ones(s.shape, dtype=bool)
    last[:, :-1] = first[:, 1:]
    start = np.maximum.accumulate(np.where(first, pos, 0), axis=1)  # the run's first position
    end = np.minimum.accumulate(np.where(last, pos + 1, n)[:, ::-1], axis=1)[:, ::-1]  # one past its last
    ranks = np.empty_like(s)
    np.put_along_axis(ranks, order, 0.5 * (start + end + 1), 1)
    return ranks.reshape(x.shape)


def _spearman(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman's rho of each row of x against y (rows: bootstrap resamples), ties averaged."""
    rx, ry = rankdata(x), rankdata(y)
    rx = rx - rx.mean(-1, keepdims=True)
    ry = ry - ry.mean(-1, keepdims=True)
    return (rx * ry).sum(-1) / np.sqrt((rx * rx).sum(-1) * (ry * ry).sum(-1))


def stsb_x100(items: Items) -> float:
    return float(_spearman(items.cosines, items.gold)) * 100


def drop_bounds(fp32: Items, int8: Items, *, seed: int = SEED) -> tuple[tuple[float, float], tuple[float, float]]:
    """Paired bootstrap `CONFIDENCE` bounds of the STS-B and the MRR@10 drop (fp32 − int8, points)."""
    rng = np.random.default_rng(seed)
    lo, hi = (1 - CONFIDENCE) * 100, CONFIDENCE * 100
    idx = rng.integers(0, len(fp32.gold), (BOOTSTRAP, len(fp32.gold)))
    gold = fp32.gold[idx]
    sts = (_spearman(fp32.cosines[idx], gold) - _spearman(int8.cosines[idx], gold)) * 100
    q = rng.integers(0, len(fp32.rr), (BOOTSTRAP, len(fp32.rr)))
    mrr = (fp32.rr[q].mean(1) - int8.rr[q].mean(1)) * 100
    return ((float(np.percentile(sts, lo)), float(np.percentile(sts, hi))),
            (float(np.percentile(mrr, lo)), float(np.percentile(mrr, hi))))


def stsb_sample(pairs: int | None, data: Path | None = None):  # -> StsSet
    """All of STS-B dev (`pairs` None or >= its size) or a seeded sample of `pairs` of them (the dev file is
    ordered by genre: its head would be one genre)."""
    from models.sts import StsSet, load_task

    full = load_task("STSB-dev", data)
    if pairs is None or pairs >= len(full):
        return full
    keep = np.sort(np.random.default_rng(SEED).permutation(len(full))[:pairs])
    return StsSet(full.name, [full.s1[i] for i in keep], [full.s2[i] for i in keep], [full.gold[i] for i in keep])


def _quora_split(rows: int, quora: str | None):  # -> QuoraSplit
    return load_split(resolve_source(quora or default_quora_source(), strata_home() / "downloads"), "paper", rows)


def sample_digest(pairs: int | None, rows: int, quora: str | None = None) -> str:
    """sha256 of what the sample holds: the STS-B pairs and scores, the Quora corpus (ids, texts), the queries and
    their gold ids. Two machines with the same data agree on it whatever the files' paths and times."""
    h = hashlib.sha256()
    sts = stsb_sample(pairs)
    h.update(json.dumps([sts.s1, sts.s2, [float(g) for g in sts.gold]]).encode())
    split = _quora_split(rows, quora)
    h.update(np.ascontiguousarray(split.corpus.ids, dtype=np.int64).tobytes())
    h.update(json.dumps([list(split.corpus.texts), list(split.evalset.query_texts),
                         [sorted(int(i) for i in g) for g in split.evalset.gold]]).encode())
    return h.hexdigest()


def measure(enc: OnnxEncoder, label: str, pairs: int | None, rows: int, quora: str | None = None) -> Items:
    """`enc`'s per-item figures on the sample; its progress line is labelled `label`. Every distinct text of the
    sample (STS-B sentences, Quora documents and queries) is encoded once, in one pass cut into runs by token
    count (`OnnxEncoder.encode(by_tokens=True)`): little padding, and a text's vector does not depend on its run
    (the batch-invariance check)."""
    sts = stsb_sample(pairs)
    split = _quora_split(rows, quora)
    texts = list(dict.fromkeys([*sts.s1, *sts.s2, *split.corpus.texts, *split.evalset.query_texts]))
    row = {s: i for i, s in enumerate(texts)}
    vecs = enc.encode(texts, GATE_BATCH, progress=True, by_tokens=True,
                      desc=f"int8 gate, {label}: {len(sts.s1)} STS-B dev pairs + {rows:,} Quora rows")

    def rows_of(xs: list[str]) -> np.ndarray:
        return vecs[[row[s] for s in xs]]

    v1, v2 = rows_of(sts.s1), rows_of(sts.s2)
    cosines = (v1 * v2).sum(1) / (np.linalg.norm(v1, axis=1) * np.linalg.norm(v2, axis=1)).clip(min=1e-12)
    docs, queries = rows_of(list(split.corpus.texts)), rows_of(list(split.evalset.query_texts))
    ranked = split.corpus.ids[brute_force_search(docs, queries, 10)[1]]
    rr, _ = per_query_ranks(ranked, split.evalset.gold, 10)
    return Items(cosines.astype(np.float64), np.asarray(sts.gold, dtype=np.float64), rr)


def cache_key(fp32_dir: Path, pairs: int | None, rows: int, quora: str | None = None) -> str:
    meta = json.loads((fp32_dir / ENCODER_META).read_text())
    spec = {"onnx": meta.get("onnx_sha256"), "max_length": meta.get("max_length"), "pairs": pairs, "rows": rows,
            "seed": SEED, "sample": sample_digest(pairs, rows, quora), "v": CACHE_VERSION}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:32]


def _read(path: Path) -> Items | None:
    try:
        with np.load(path) as z:
            return Items(z["cosines"], z["gold"], z["rr"])
    except (OSError, KeyError, ValueError):
        return None


def fp32_reference(fp32_dir: Path, pairs: int | None, rows: int, quora: str | None = None) -> Items:
    """The fp32 graph's figures on the sample: from the user's cache or the package's when this graph has a
    reference for this sample, else measured (and cached)."""
    key = cache_key(fp32_dir, pairs, rows, quora)
    path = strata_home() / "cache" / "int8-gate" / f"{key}.npz"
    for where in (path, PACKAGED / f"{key}.npz"):
        items = _read(where)
        if items is not None:
            log.info("int8 gate: fp32 reference of %s (%s pairs, %d rows) read from %s", fp32_dir,
                     pairs or "all", rows, where)
            return items
    enc = OnnxEncoder(fp32_dir)
    try:
        items = measure(enc, "fp32 reference", pairs, rows, quora)
    finally:
        enc.close()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp.npz")
        np.savez(tmp, cosines=items.cosines, gold=items.gold, rr=items.rr)
        tmp.replace(path)
    except OSError as exc:  # a cache that cannot be written costs time next run, never the export
        log.warning("int8 gate: cannot cache the fp32 reference in %s: %s", path, exc)
    return items


def compare(fp32_dir: Path, int8_dir: Path, *, pairs: int | None, rows: int, max_drop: float, stage: Stage,
            quora: str | None = None, rows_are_full: bool = False, int8: OnnxEncoder | None = None) -> GateReport:
    """Both graphs on the sample; a screen gets bootstrap bounds of each drop, but not of the MRR drop when its
    rows are the full gate's (`rows_are_full`: the figure is the full gate's own). `int8`: an open session of
    `int8_dir`'s graph to use (the exporter's, shared with its batch-invariance check), else one is made."""
    ref = fp32_reference(fp32_dir, pairs, rows, quora)
    enc = int8 or OnnxEncoder(int8_dir)
    try:
        got = measure(enc, "int8", pairs, rows, quora)
    finally:
        if enc is not int8:
            enc.close()
    report = GateReport(round(stsb_x100(ref), 4), round(stsb_x100(got), 4), round(float(ref.rr.mean()), 6),
                        round(float(got.rr.mean()), 6), rows, max_drop, stage, len(ref.gold))
    if stage == "screen":
        sts_b, mrr_b = drop_bounds(ref, got)
        report.stsb_drop_bounds = (round(sts_b[0], 4), round(sts_b[1], 4))
        report.mrr_drop_bounds = None if rows_are_full else (round(mrr_b[0], 4), round(mrr_b[1], 4))
    return report


def quality_gate(fp32_dir: Path, int8_dir: Path, *, rows: int = 20_000, max_drop: float = 0.5,
                 data: str | None = None, screen_rows: int = SCREEN_ROWS,
                 screen_pairs: int = SCREEN_PAIRS, int8: OnnxEncoder | None = None) -> GateReport:
    """The screen, then the full gate only when the screen cannot decide (`screen_rows` 0: the full gate alone).
    With `rows` ≤ `screen_rows` (a small demo's gate) the screen takes the full gate's rows, so only its STS-B
    sample is smaller, and its MRR drop is decided on the full gate's figure. `int8`: an open session of
    `int8_dir`'s graph (see `compare`)."""
    if screen_rows > 0:
        report = compare(fp32_dir, int8_dir, pairs=screen_pairs, rows=min(screen_rows, rows), max_drop=max_drop,
                         stage="screen", quora=data, rows_are_full=screen_rows >= rows, int8=int8)
        log.info("int8 quality gate, screen: %s", report.summary())
        if report.clear:
            return report
        log.info("int8 quality gate: the screen cannot decide; measuring the full gate (%d rows)", rows)
    report = compare(fp32_dir, int8_dir, pairs=None, rows=rows, max_drop=max_drop, stage="full", quora=data,
                     int8=int8)
    log.info("int8 quality gate: %s", report.summary())
    return report


def quora_mrr(encoders: list[OnnxEncoder], rows: int, data: str | None = None) -> list[float]:
    """MRR@10 of each encoder on the first `rows` Quora rows, paper protocol, exact inner-product search."""
    split = load_split(resolve_source(data or default_quora_source(), strata_home() / "downloads"), "paper", rows)
    out = []
    for k, enc in enumerate(encoders):
        docs = enc.encode(split.corpus.texts, progress=True, desc=f"gate [{k + 1}/{len(encoders)}]: documents")
        queries = enc.encode(split.evalset.query_texts, progress=True,
                             desc=f"gate [{k + 1}/{len(encoders)}]: queries")
        ranked = split.corpus.ids[brute_force_search(docs, queries, 10)[1]]
        out.append(float(per_query_ranks(ranked, split.evalset.gold, 10)[0].mean()))
    return out
