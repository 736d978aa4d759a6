"""`indexer compare RUN_A RUN_B --qrels Q`: two TREC runs on the same judged queries, per measure the mean of
each, the difference B − A, its paired bootstrap 95 % confidence interval and a paired permutation p-value.

The measures are trec_eval's, computed by ir_measures (pytrec_eval underneath): nDCG@10 (`ndcg_cut_10`, grades
as linear gains), MRR@10 (RR@10) and R@100; `tests/indexer/test_runs.py` checks them against `indexer.metrics`
once on a real index. The queries are those of the qrels with a relevant document (grade > 0), as
`indexer.metrics` averages them; a judged query that a run has no line for scores 0 in that run (it retrieved
nothing), and queries a run holds that the qrels do not judge are ignored. Both tests resample the queries: the
bootstrap draws them with replacement (percentile interval of the mean difference), the permutation test swaps
each query's two scores at random (two-sided, `scipy.stats`); both are seeded, so a rerun prints the same."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

import numpy as np

# (key as in the manifest's EvalFigures, label printed, ir_measures name)
MEASURES = (("ndcg_at_10", "nDCG@10", "nDCG@10"), ("mrr_at_10", "MRR@10", "RR@10"),
            ("recall_at_100", "R@100", "R@100"))
DEFAULT_RESAMPLES = 10_000
CONFIDENCE = 0.95
BATCH = 1000  # resamples drawn at once: memory is BATCH × queries floats, whatever --resamples is


class CompareError(ValueError):
    """The runs and qrels cannot be compared (nothing judged in common, a library missing)."""


@dataclass
class MeasureDelta:
    a: float
    b: float
    delta: float  # b − a
    ci95: tuple[float, float]  # paired bootstrap percentile interval of the delta
    p: float  # paired permutation test, two-sided


@dataclass
class Comparison:
    queries: int  # judged queries (with a relevant document) compared
    missing: dict[str, int]  # per run ("a", "b"): judged queries it has no line for (scored 0)
    unjudged: dict[str, int]  # per run: its queries that the qrels do not judge (ignored)
    measures: dict[str, MeasureDelta]
    resamples: int
    seed: int
    per_query: dict[str, dict[str, np.ndarray]] = field(default_factory=dict, repr=False)  # run → measure → scores

    def as_dict(self) -> dict[str, object]:
        out = asdict(self)
        out.pop("per_query")
        out["measures"] = {k: asdict(v) | {"ci95": list(v.ci95)} for k, v in self.measures.items()}
        return out


def judged_queries(qrels: Mapping[str, Mapping[str, int]]) -> list[str]:
    """The qrels' queries with at least one relevant document (grade > 0), in qrels order."""
    return [q for q, judged in qrels.items() if any(g > 0 for g in judged.values())]


def per_query_scores(run: Mapping[str, Mapping[str, float]], qrels: Mapping[str, Mapping[str, int]],
                     queries: list[str]) -> dict[str, np.ndarray]:
    """Each measure of `MEASURES` for each of `queries` (0 for a query the run has no line for)."""
    try:
        import ir_measures
    except ImportError as exc:
        raise CompareError("indexer compare needs ir-measures: pip install 'strata[eval]'") from exc
    measures = {ir_measures.parse_measure(name): key for key, _, name in MEASURES}
    position = {q: i for i, q in enumerate(queries)}
    out = {key: np.zeros(len(queries)) for key, _, _ in MEASURES}
    wanted = set(queries)
    judged = {q: dict(qrels[q]) for q in queries}
    ranked = {q: dict(docs) for q, docs in run.items() if q in wanted}
    if ranked:
        for m in ir_measures.iter_calc(list(measures), judged, ranked):
            if m.query_id in ranked:
                out[measures[m.measure]][position[m.query_id]] = m.value
    return out


def paired_bootstrap_ci(deltas: np.ndarray, resamples: int, seed: int) -> tuple[float, float]:
    """Percentile interval (95 %) of the mean of per-query differences, queries resampled with replacement."""
    from scipy.stats import bootstrap

    if np.all(deltas == deltas[0]):  # every resample has the same mean (identical runs): the interval is a point
        return float(deltas[0]), float(deltas[0])
    res = bootstrap((deltas,), np.mean, n_resamples=resamples, batch=BATCH, confidence_level=CONFIDENCE,
                    method="percentile", rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def paired_permutation_p(a: np.ndarray, b: np.ndarray, resamples: int, seed: int) -> float:
    """Two-sided p of the mean difference under random swaps of each query's pair of scores."""
    from scipy.stats import permutation_test

    if np.array_equal(a, b):
        return 1.0
    res = permutation_test((b, a), lambda x, y, axis: np.mean(x - y, axis=axis), permutation_type="samples",
                           vectorized=True, n_resamples=resamples, batch=BATCH, alternative="two-sided",
                           rng=np.random.default_rng(seed))
    return float(res.pvalue)


def compare_runs(run_a: Mapping[str, Mapping[str, float]], run_b: Mapping[str, Mapping[str, float]],
                 qrels: Mapping[str, Mapping[str, int]], *, resamples: int = DEFAULT_RESAMPLES, seed: int = 0
                 ) -> Comparison:
    queries = judged_queries(qrels)
    if not queries:
        raise CompareError("the qrels judge no document relevant (grade > 0): nothing to compare")
    wanted = set(queries)
    for name, run in (("RUN_A", run_a), ("RUN_B", run_b)):
        if not wanted & set(run):
            raise CompareError(f"{name}: none of its {len(run)} queries is a judged query of the qrels "
                               f"(e.g. {next(iter(run))!r} vs {queries[0]!r}): are they the same query set?")
    scores = {"a": per_query_scores(run_a, qrels, queries), "b": per_query_scores(run_b, qrels, queries)}
    measures = {}
    for key, _, _ in MEASURES:
        a, b = scores["a"][key], scores["b"][key]
        measures[key] = MeasureDelta(float(a.mean()), float(b.mean()), float((b - a).mean()),
                                     paired_bootstrap_ci(b - a, resamples, seed),
                                     paired_permutation_p(a, b, resamples, seed))
    return Comparison(
        queries=len(queries),
        missing={n: len(wanted - set(r)) for n, r in (("a", run_a), ("b", run_b))},
        unjudged={n: len(set(r) - wanted) for n, r in (("a", run_a), ("b", run_b))},
        measures=measures, resamples=resamples, seed=seed, per_query=scores)


def format_comparison(c: Comparison, name_a: str, name_b: str) -> str:
    """The table `indexer compare` prints (figures × 100)."""
    lines = [f"A: {name_a}", f"B: {name_b}",
             f"{c.queries} judged queries; paired bootstrap ({c.resamples} resamples) and permutation test, "
             f"seed {c.seed}"]
    for run, label in (("a", "A"), ("b", "B")):
        if c.missing[run]:
            lines.append(f"run {label} has no results for {c.missing[run]} judged queries: they score 0")
        if c.unjudged[run]:
            lines.append(f"run {label}: {c.unjudged[run]} queries the qrels do not judge are ignored")
    rows = [("measure", "A", "B", "B − A", "95% CI", "p")]
    for key, label, _ in MEASURES:
        m = c.measures[key]
        rows.append((label, f"{m.a * 100:.2f}", f"{m.b * 100:.2f}", f"{m.delta * 100:+.2f}",
                     f"[{m.ci95[0] * 100:+.2f}, {m.ci95[1] * 100:+.2f}]", f"{m.p:.4f}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines += ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(r, widths,
                                                                                                      strict=True)))
              for r in rows]
    return "\n".join(lines)
