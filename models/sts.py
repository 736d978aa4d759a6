"""STS evaluation as SimCSE reports it: cosine similarity of sentence vectors vs gold scores, Spearman × 100.
STS12–16 use SentEval's "all" setting (every subset's pairs concatenated, one Spearman); STS-B test and SICK-R
test are scored without any trained regressor.

Inputs are SentEval's processed files (tokenised, lower-cased); sentences are the whitespace tokens re-joined,
as SimCSE's batcher does. STS13's SMT gold file has no input file and is skipped; STS15/16 gold files have
blank lines for unscored pairs, which are dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from models.data import DataError, data_dir

Encoder = Callable[[Sequence[str]], np.ndarray]

STS_YEARS = {
    "STS12": ["MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"],
    "STS13": ["FNWN", "headlines", "OnWN"],
    "STS14": ["deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news"],
    "STS15": ["answers-forums", "answers-students", "belief", "headlines", "images"],
    "STS16": ["answer-answer", "headlines", "plagiarism", "postediting", "question-question"],
}
TASKS = [*STS_YEARS, "STSB", "SICKR"]
TABLE_NAMES = {
    "STS12": "STS12",
    "STS13": "STS13",
    "STS14": "STS14",
    "STS15": "STS15",
    "STS16": "STS16",
    "STSB": "STS-B",
    "SICKR": "SICK-R",
}


@dataclass
class StsSet:
    name: str
    s1: list[str] = field(default_factory=list)
    s2: list[str] = field(default_factory=list)
    gold: list[float] = field(default_factory=list)

    def add(self, a: str, b: str, score: float) -> None:
        self.s1.append(" ".join(a.split()))
        self.s2.append(" ".join(b.split()))
        self.gold.append(score)

    def head(self, n: int | None) -> StsSet:
        """The first n pairs (quick runs); the whole set when n is None."""
        if n is None or n >= len(self.gold):
            return self
        return StsSet(self.name, self.s1[:n], self.s2[:n], self.gold[:n])

    def __len__(self) -> int:
        return len(self.gold)


def _read_lines(path: Path) -> list[str]:
    if not path.is_file():
        raise DataError(f"{path} not found (set STRATA_DATA_DIR to the shared data folder)")
    return path.read_text(encoding="utf-8").splitlines()


def load_sts_year(year: str, root: Path, per_subset: int | None = None) -> StsSet:
    folder = root / "sts" / f"{year}-en-test"
    out = StsSet(year)
    for subset in STS_YEARS[year]:
        inputs = _read_lines(folder / f"STS.input.{subset}.txt")
        gold = _read_lines(folder / f"STS.gs.{subset}.txt")
        if len(inputs) != len(gold):
            raise DataError(f"{folder}: {subset} has {len(inputs)} inputs but {len(gold)} gold lines")
        kept = 0
        for line, score in zip(inputs, gold, strict=True):
            if not score.strip():  # unscored pair (STS15/16)
                continue
            a, b = line.split("\t")[:2]
            out.add(a, b, float(score))
            kept += 1
            if per_subset and kept >= per_subset:
                break
    return out


def load_stsb(split: str, root: Path) -> StsSet:
    out = StsSet("STSB" if split == "test" else f"STSB-{split}")
    for line in _read_lines(root / "sts" / "STSBenchmark" / f"sts-{split}.csv"):
        cols = line.split("\t")
        out.add(cols[5], cols[6], float(cols[4]))
    return out


def load_sickr(root: Path) -> StsSet:
    out = StsSet("SICKR")
    for line in _read_lines(root / "sts" / "SICK" / "SICK_test_annotated.txt")[1:]:
        cols = line.split("\t")
        out.add(cols[1], cols[2], float(cols[3]))
    return out


def load_task(task: str, root: Path | None = None, max_pairs: int | None = None) -> StsSet:
    """One of TASKS (or STSB-dev). `max_pairs` caps pairs (per subset for STS12–16, so every subset is kept)."""
    root = root or data_dir()
    if task in STS_YEARS:
        per = None if max_pairs is None else max(1, max_pairs // len(STS_YEARS[task]))
        return load_sts_year(task, root, per)
    if task == "STSB":
        return load_stsb("test", root).head(max_pairs)
    if task == "STSB-dev":
        return load_stsb("dev", root).head(max_pairs)
    if task == "SICKR":
        return load_sickr(root).head(max_pairs)
    raise DataError(f"unknown STS task {task!r}; known: {', '.join(TASKS)}, STSB-dev")


def spearman_x100(sts: StsSet, vectors1: np.ndarray, vectors2: np.ndarray) -> float:
    from scipy.stats import spearmanr

    v1 = vectors1 / np.linalg.norm(vectors1, axis=1, keepdims=True).clip(min=1e-12)
    v2 = vectors2 / np.linalg.norm(vectors2, axis=1, keepdims=True).clip(min=1e-12)
    return float(spearmanr((v1 * v2).sum(1), sts.gold).statistic) * 100


def evaluate(encode: Encoder, sets: Sequence[StsSet]) -> dict[str, float]:
    """Spearman × 100 per set, plus "avg" over them. Each unique sentence is encoded once."""
    unique = sorted({s for st in sets for s in (*st.s1, *st.s2)})
    vectors = encode(unique)
    row = {s: i for i, s in enumerate(unique)}
    scores = {}
    for st in sets:
        scores[st.name] = spearman_x100(st, vectors[[row[s] for s in st.s1]], vectors[[row[s] for s in st.s2]])
    scores["avg"] = float(np.mean([scores[st.name] for st in sets]))
    return scores


def evaluate_tasks(
    encode: Encoder, tasks: Sequence[str] = TASKS, root: Path | None = None, max_pairs: int | None = None
) -> dict[str, float]:
    return evaluate(encode, [load_task(t, root, max_pairs) for t in tasks])


def format_table(rows: dict[str, dict[str, float]], tasks: Sequence[str] = TASKS) -> str:
    """A Table-1-like text table: one row per model, STS12 … SICK-R, Avg."""
    names = [TABLE_NAMES.get(t, t) for t in tasks] + ["Avg."]
    width = max([len("Model"), *(len(r) for r in rows)])
    lines = [" | ".join([f"{'Model':<{width}}", *(f"{n:>6}" for n in names)])]
    lines.append("-" * len(lines[0]))
    for model, scores in rows.items():
        cells = [f"{scores[t]:6.2f}" if t in scores else f"{'–':>6}" for t in tasks] + [f"{scores['avg']:6.2f}"]
        lines.append(" | ".join([f"{model:<{width}}", *cells]))
    return "\n".join(lines)
