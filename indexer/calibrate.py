"""Every build of an approximate index (ivf, hnsw) chooses its search parameter (IVF's nprobe, HNSW's
ef_search) for the encoder and corpus it was built with: the smallest keeping `DEFAULT_TARGET_RECALL` (0.97) of
exact search's top 10 on query-like probes (`indexer.probes`); `--target-recall R` sets another share,
`--nprobe N` / `--ef-search N` or `--no-calibrate` keep a fixed value.

Why per encoder: how many lists a query must probe to find its exact neighbours depends on how the encoder
spreads its vectors, not only on the corpus, so a fixed nprobe would compare encoders at unequal ANN recall
(docs/decisions.md#search-parameters-calibrated-per-encoder).

The calibration is label-free: its queries are the build's probes (`indexer.probes`: held-apart queries, else
document spans; the evaluation queries' text only when asked, declared; never qrels), or with none given a
seeded sample of the version's own documents (each one's own id excluded from its results; `--add` and
compact). It finds the fewest lists whose top 10 holds at least a share R of exact search's top 10 (ties counted as
ann-benchmarks counts them, `tie_aware_recall`), galloping up from 1 (1, 2, 4…) and then bisecting: probing more lists
scans a superset of vectors, so that share only grows with nprobe, and the search costs a few times the answer's, not
the index's size. With `probes`, how many of them `indexer.probes.probe_count` bounds as N grows.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

import numpy as np

from indexer.runtime.ann import KIND_SPECS, AnnIndex
from indexer.runtime.faiss.files import Index
from indexer.runtime.faiss.kinds import open_index
from indexer.runtime.manifest import KnobCalibration, KnobRecall, NprobeCalibration, ProbeInfo, ProbeRecall

log = logging.getLogger(__name__)

DEFAULT_SAMPLE = 2000
DEFAULT_TARGET_RECALL = 0.97
K = 10


# Scores within this of the exact k-th score count as ties (float32 sums in another order, fp16 lists).
TIE_EPS = 1e-5


def without_self(scores: np.ndarray, ids: np.ndarray, query_ids: np.ndarray, k: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The first `k` results of each row that are not the query itself (nor FAISS's -1 padding)."""
    keep = (ids != query_ids[:, None]) & (ids >= 0)
    order = np.argsort(~keep, axis=1, kind="stable")[:, :k]  # kept results first, in rank order
    kept = np.take_along_axis(keep, order, axis=1)
    return (np.where(kept, np.take_along_axis(scores, order, axis=1), -np.inf),
            np.where(kept, np.take_along_axis(ids, order, axis=1), -1))


def tie_aware_recall(got_scores: np.ndarray, got_ids: np.ndarray, exact_scores: np.ndarray,
                     exact_ids: np.ndarray) -> float:
    """ANN recall@k as ann-benchmarks counts it: a returned neighbour is right when it scores at least the exact
    k-th neighbour's score (less `TIE_EPS`), so among equal scores any may be returned — corpora hold duplicate
    texts, whose identical vectors make the exact top k's ids arbitrary. Averaged over queries with any exact
    neighbour (1.0 when none has)."""
    n_exact = (exact_ids >= 0).sum(axis=1)
    rows = n_exact > 0
    if not rows.any():
        return 1.0
    kth = exact_scores[rows, n_exact[rows] - 1]
    hits = ((got_ids[rows] >= 0) & (got_scores[rows] >= kth[:, None] - TIE_EPS)).sum(axis=1)
    return float(np.mean(np.minimum(hits, n_exact[rows]) / n_exact[rows]))


def check_target(target_recall: float) -> float:
    if not 0.0 < target_recall <= 1.0:
        raise ValueError(f"--target-recall must be in (0, 1], not {target_recall}")
    return target_recall


def calibrate_opened(index: Index, target_recall: float, *, sample: int = DEFAULT_SAMPLE, seed: int = 0
                     ) -> NprobeCalibration | KnobCalibration:
    """`calibrate_index` of an opened FAISS index whose codes hold the vectors, as the kind that holds it
    (`faiss.kinds.open_index`), on `sample` of its own vectors as queries. Leaves the index's search parameter set
    to the choice."""
    return calibrate_index(open_index(index), target_recall, sample=sample, seed=seed)


def smallest_reaching(recall_at: Callable[[int], float], target: float, lowest: int, highest: int) -> int:
    """The smallest value in [lowest, highest] whose `recall_at` reaches `target` (`highest` when none does),
    for a recall that only grows with the value. Galloping (lowest, 2·lowest, 4·lowest…) until one reaches it,
    then bisection between the last miss and it: a search costs ∝ its value (IVF: nprobe lists scanned), so the
    whole costs a few times the answer's search, not the ~N/2 vectors that a bisection's first step over
    1..nlist scans (at 10M, nlist 16,384: 8,192 lists for each probe)."""
    lo, hi = lowest, lowest  # invariant: every value < lo misses the target; hi reaches it, or hi == highest
    while hi < highest and recall_at(hi) < target:
        lo, hi = hi + 1, min(highest, 2 * hi)
    while lo < hi:
        mid = (lo + hi) // 2
        if recall_at(mid) >= target:
            hi = mid
        else:
            lo = mid + 1
    return hi


def calibrate_index(ann: AnnIndex, target_recall: float, *, sample: int = DEFAULT_SAMPLE, seed: int = 0,
                    probes: tuple[np.ndarray, np.ndarray, ProbeInfo] | None = None
                    ) -> NprobeCalibration | KnobCalibration:
    """The smallest value of the index's speed/recall parameter (`AnnIndex.knob`: IVF's nprobe, HNSW's
    ef_search) reaching `target_recall` ANN recall@10 on `probes` (vectors, the id each must not return (-1:
    none), where they came from), else on `sample` of its own vectors as queries, by bisection (a larger value
    searches a superset, so recall only grows with it). Leaves it set as the index's default."""
    check_target(target_recall)
    knob = ann.knob()
    if knob is None:
        raise ValueError(f"a {ann.kind} index searches exactly: it has nothing to calibrate")
    name, lowest, highest = knob
    t0 = time.perf_counter()
    if probes is None:
        query_ids, queries = ann.sample_stored(sample, seed)
        probe_info = None
    else:
        queries, query_ids, probe_info = probes
    depth = K + 1  # one more than k: the query's own id is dropped from both rankings
    exact_scores, exact_ids = without_self(*ann.exact_search(queries, depth), query_ids, K)
    measured: dict[int, float] = {}

    def recall_at(value: int) -> float:
        if value not in measured:
            got_scores, got_ids = without_self(*ann.search(queries, depth, search_params={name: value}), query_ids, K)
            measured[value] = tie_aware_recall(got_scores, got_ids, exact_scores, exact_ids)
            log.info("calibrating %s: %d keeps %.4f of the exact top %d", name, value, measured[value], K)
        return measured[value]

    chosen = smallest_reaching(recall_at, target_recall, lowest, highest)
    achieved = recall_at(chosen)
    ann.set_default(name, chosen)
    reached = achieved >= target_recall
    if not reached:
        log.warning("%s %d (the most there is) keeps %.4f of the exact top %d, below the target %.4f: ties among "
                    "equal scores; using it", name, chosen, achieved, K, target_recall)
    seconds = round(time.perf_counter() - t0, 3)
    what = "sampled documents" if probe_info is None else probe_info.source.replace("_", " ")
    log.info("%s %d for ANN recall@%d >= %.3f (%.4f on %d %s, %.1fs)", name, chosen, K,
             target_recall, achieved, len(query_ids), what, seconds)
    if name == "nprobe":
        return NprobeCalibration(
            target_recall=target_recall, nprobe=chosen, recall_at_10=round(achieved, 6), reached=reached,
            sample_queries=len(query_ids), seed=seed,
            measured=[ProbeRecall(nprobe=p, recall_at_10=round(r, 6)) for p, r in sorted(measured.items())],
            seconds=seconds, probes=probe_info)
    return KnobCalibration(
        knob=name, target_recall=target_recall, value=chosen, recall_at_10=round(achieved, 6), reached=reached,
        sample_queries=len(query_ids), seed=seed,
        measured=[KnobRecall(value=p, recall_at_10=round(r, 6)) for p, r in sorted(measured.items())],
        seconds=seconds, probes=probe_info)


def calibration_target(kind: str, *, calibrate: bool, target_recall: float | None,
                       given: Mapping[str, int | None]) -> float | None:
    """The recall target a new build of `kind` calibrates to, or None for a fixed search parameter.

    What an ML engineer expects: an approximate index (one whose kind has a search knob: ivf, hnsw) is calibrated
    to `DEFAULT_TARGET_RECALL` unless told otherwise; `--target-recall R` picks another share; a value `given` for
    the kind's own knob (`--nprobe` for ivf, `--ef-search` for hnsw: `ann.KIND_SPECS`) is taken as asked, like
    `--no-calibrate` (which keeps the defaults, nprobe 20 / ef_search 64). A flat index is exact: nothing to
    calibrate."""
    knob = KIND_SPECS[kind].knob
    if knob is None or not calibrate:
        return None
    if target_recall is not None:
        return check_target(target_recall)
    if given.get(knob.name) is not None:
        return None
    return DEFAULT_TARGET_RECALL
