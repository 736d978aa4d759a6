"""`encoder adapt --data CORPUS`: label-free adaptation of the encoder to a user's own corpus, gated.

Three recipes; each serves the vector it trained (`RECIPE_TRAINING`):

- `crops` (Contriever-style positives from the documents themselves): title → body pairs, or two independent
  random crops (`models.corpus_data`). Negatives: the rest of the batch plus one hard negative per pair mined from
  the user's own index with `models.mine` (the base encoder's nearest other documents, skipping the first `skip`,
  where near-duplicates — false negatives — sit), trained with the supervised hard-negative SimCSE loss.
- `simcse`: unsupervised SimCSE on the documents (two dropout views of the same text), in-batch negatives.
- `sgopt`: SG-OPT (`models.objectives.sgopt`) on the documents: the tuned copy's last-layer [CLS] against a frozen
  copy's hidden layers through the projection head, which is detached; it trains and serves [CLS]. Its step 0 is the
  stock [CLS], not what the stock encoder serves, so its gate compares with the stock token mean scored on the
  same dev set (or proxy).

The recipe is `CORPUS_RECIPE`, stages of `models.pipeline` (each written into `work/`, stamped with its inputs and
skipped when done; `work/status.json` says the stage, step and ETA): base export (fp32, mean, length capped: what
mines) → mine (crops only) → views (`views.jsonl`) → train (resumable from `train/last`) → gate → export.

Selection and gating. With dev queries and qrels (`queries`), each checkpoint — step 0, the stock encoder,
included — is scored on dev nDCG@10 and the best is kept; the adapted weights are exported only when they beat
stock on it (`--gate`), else the stock encoder is exported and the manifest says so. Without queries the
label-free proxy selects, and the manifest's `adaptation.verified` is false (the service's `/ready` shows it).

It imports `models.pipeline` and `models.corpus_data`, and inside its stages `models.mine`, `models.trainer`,
`models.sentence_model` and `models.export`.
"""
from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np

from indexer.runtime.atomic import write_json_atomic
from models import pipeline
from models.corpus_data import (
    AdaptInputError,
    CorpusDoc,
    CropProxy,
    DevQueries,
    RetrievalDev,
    Split,
    crop_proxy,
    dev_set,
    read_corpus,
    read_mined_ids,
    selection_curve,
    split_docs,
    training_views,
    words_window,
)
from models.pipeline import Stage, StatusWriter

log = logging.getLogger(__name__)

Recipe = Literal["crops", "simcse", "sgopt"]
# significant: the best checkpoint's paired gain over stock on the selection set has a 95 % bootstrap interval above
# 0 (the default: on NFCorpus a dev gain of +0.02 and +0.24 came with a test loss); better: any gain
Gate = Literal["significant", "better"]
GATES: tuple[str, ...] = get_args(Gate)


@dataclass(frozen=True)
class RecipeTraining:
    pooler: str  # the training pooler (`models.poolers`); the served vector never uses it
    objective: str  # `models.objectives`
    served: Literal["mean", "cls"]  # what is selected on, gated and exported: the vector the objective trains


RECIPE_TRAINING: dict[str, RecipeTraining] = {
    "crops": RecipeTraining("avg_last", "sup_hardneg", "mean"),
    "simcse": RecipeTraining("avg_last", "unsup", "mean"),
    "sgopt": RecipeTraining("sgopt_head", "sgopt", "cls"),
}
RECIPES: tuple[str, ...] = tuple(RECIPE_TRAINING)
STOCK_SERVED = "mean"  # what the stock all-MiniLM-L6-v2 serves: the gate's reference


@dataclass
class CorpusAdaptConfig:
    out: Path
    work: Path
    data: Path
    recipe: Recipe = "crops"
    checkpoint: Path | None = None
    queries: Path | None = None  # dev queries: a BEIR folder (its qrels/<split>.tsv) or a queries file + qrels
    qrels: Path | None = None
    split: str = "dev"
    dev_query_ids: list[str] | None = None  # restrict the dev queries to these (a declared split of a test set)
    max_docs: int = 20_000
    steps: int = 200
    batch_size: int = 32
    max_length: int = 128  # document length cap in tokens, training, mining and selection alike
    lr: float = 2e-5
    temperature: float | None = None  # None: the objective's paper value (SimCSE 0.05, SG-OPT 0.01)
    warmup_ratio: float = 0.1
    eval_every: int = 50
    seed: int = 1
    skip: int = 2
    take: int = 1
    dev_queries: int = 200
    dev_docs: int = 2_000
    proxy_docs: int = 500
    gate: Gate = "significant"
    gate_resamples: int = 2000
    quantize: Literal["int8", "none", "auto"] = "auto"
    threads: int | None = None
    progress: bool = True
    cache: Path | None = None  # where the base export and mined negatives live (shared by seeds); default: work
    id_field: str | None = None
    text_field: str | None = None
    title_field: str | None = None

    def train_settings(self) -> dict[str, object]:
        keys = ("recipe", "steps", "batch_size", "max_length", "lr", "warmup_ratio", "eval_every", "seed")
        return {**{k: getattr(self, k) for k in keys}, "temperature": self.effective_temperature()}

    def dev_files(self) -> DevQueries | None:
        """The dev queries selection and the gate use; None without `queries` (the proxy selects)."""
        return None if self.queries is None else DevQueries(self.queries, self.qrels, self.split, self.dev_query_ids,
                                                            self.dev_queries, self.dev_docs)

    def effective_temperature(self) -> float:
        from models.objectives import REGISTRY

        objective = REGISTRY[RECIPE_TRAINING[self.recipe].objective]
        return objective.default_temperature if self.temperature is None else self.temperature


# --- the run ---------------------------------------------------------------------------------------------------

def _digest(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def _file_fingerprint(path: Path) -> dict[str, object]:
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    return {str(p): [p.stat().st_size, int(p.stat().st_mtime)] for p in files}


@dataclass
class CorpusRun:
    """One run of a label-free recipe: its settings and corpus, and what each stage hands the next."""

    cfg: CorpusAdaptConfig
    work: Path
    cache: Path  # base/ and mined.tsv: the same for every seed
    status: StatusWriter
    checkpoint: Path
    docs: list[CorpusDoc]
    split: Split
    window: int
    corpus_key: dict[str, Any]
    dev: RetrievalDev | CropProxy
    selected_on: str
    stamps: dict[str, Any] = field(default_factory=dict)  # base_sha256, mine, views, train
    negatives: dict[int, int] = field(default_factory=dict)
    examples: list[tuple[Any, ...]] = field(default_factory=list)
    adaptation: dict[str, Any] = field(default_factory=dict)


def adapt_corpus(cfg: CorpusAdaptConfig, on_status: Callable[[pipeline.AdaptStatus], None] | None = None) -> Path:
    """Run (or continue) a label-free recipe; returns `cfg.out` (adapted, or stock when the gate kept stock)."""
    if cfg.recipe not in RECIPES:
        raise AdaptInputError(f"unknown recipe {cfg.recipe!r}; known: {', '.join(RECIPES)}")
    if cfg.checkpoint is not None and not Path(cfg.checkpoint).is_dir():
        raise FileNotFoundError(f"checkpoint folder {cfg.checkpoint} not found")
    if not Path(cfg.data).exists():
        raise FileNotFoundError(f"{cfg.data} does not exist")
    for name in ("steps", "batch_size", "eval_every", "max_docs", "dev_queries", "dev_docs"):
        if getattr(cfg, name) < 1:
            raise AdaptInputError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(cfg, name)}")
    if cfg.max_length < 8:
        raise AdaptInputError(f"--max-length must be at least 8 tokens, got {cfg.max_length}")
    pipeline.run_recipe(Path(cfg.work), CORPUS_RECIPE, lambda status: _start(cfg, status), _finish, on_status, log)
    return Path(cfg.out)


def _start(cfg: CorpusAdaptConfig, status: StatusWriter) -> CorpusRun:
    """The corpus read, split and checked, and the selection set (dev queries, or the proxy) built: every input
    error before any work."""
    from models.checkpoint import default_checkpoint

    checkpoint = Path(cfg.checkpoint) if cfg.checkpoint else Path(default_checkpoint())
    cache = Path(cfg.cache) if cfg.cache else Path(cfg.work)
    cache.mkdir(parents=True, exist_ok=True)
    docs = read_corpus(cfg.data, id_field=cfg.id_field, text_field=cfg.text_field, title_field=cfg.title_field)
    split = split_docs(len(docs), cfg.proxy_docs, cfg.max_docs)
    if len(split.train) < cfg.batch_size:
        raise AdaptInputError(f"{cfg.data}: {len(split.train)} training documents < batch size {cfg.batch_size}")
    window = words_window(cfg.max_length)
    corpus_key = {"data": str(Path(cfg.data).resolve()), "files": _digest(_file_fingerprint(Path(cfg.data))),
                  "docs": len(docs), "max_docs": cfg.max_docs, "proxy_docs": cfg.proxy_docs}
    proxy = crop_proxy(docs, split, window)
    files = cfg.dev_files()
    dev: RetrievalDev | CropProxy | None = dev_set(cfg.data, docs, proxy, files) if files else proxy
    if dev is None:
        raise AdaptInputError(f"{cfg.data}: too few documents for a held-out proxy; give dev queries (--queries)")
    selected_on = ("dev nDCG@10" if cfg.queries else "label-free proxy: held-out crop-pair top-1 accuracy")
    return CorpusRun(cfg, Path(cfg.work), cache, status, checkpoint, docs, split, window, corpus_key, dev,
                     selected_on)


def _base(run: CorpusRun) -> None:
    """1. the base encoder, exported fp32 with mean pooling at the length cap (what mines), kept in the cache."""
    run.stamps["base_sha256"] = pipeline.export_base(run.cache, run.checkpoint, run.cfg.max_length)


def _mine(run: CorpusRun) -> None:
    """2. (crops) hard negatives from the user's own index: the same for every seed, so kept in the cache."""
    from models.data import TrainingQuestions
    from models.mine import mine

    cfg, mined, train = run.cfg, run.cache / "mined.tsv", run.split.train
    stamp = {"base_sha256": run.stamps["base_sha256"], **run.corpus_key, "skip": cfg.skip, "take": cfg.take}
    run.stamps["mine"] = stamp

    def make() -> None:
        texts = {i: run.docs[i].text for i in train}
        mine(TrainingQuestions(texts, [(i, i) for i in train]), run.cache / "base", mined, skip=cfg.skip,
             take=cfg.take, threads=cfg.threads, seed=cfg.seed, progress=cfg.progress)

    pipeline.stamped_output(run.cache / "mine.json", stamp, mined, make)
    run.negatives = read_mined_ids(mined)


def _views(run: CorpusRun) -> None:
    """3. the training views (seeded; title → body or two crops, plus the mined neighbour's view), written once per
    stamp; new views make an older training not resumable."""
    cfg, views = run.cfg, run.work / "views.jsonl"
    stamp = {**run.corpus_key, "recipe": cfg.recipe, "seed": cfg.seed, "max_length": cfg.max_length,
             "mine": run.stamps.get("mine") if cfg.recipe == "crops" else None}
    run.stamps["views"] = stamp

    def make() -> None:
        examples = training_views(cfg.recipe, run.docs, run.split.train, run.negatives, cfg.seed, run.window)
        tmp = views.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(ex) + "\n" for ex in examples))
        tmp.replace(views)

    pipeline.stamped_output(run.work / "views.json", stamp, views, make, invalidates=[run.work / "train.json"])
    run.examples = [tuple(json.loads(line)) for line in views.read_text().splitlines() if line.strip()]


def _train(run: CorpusRun) -> None:
    """4. the recipe's training, every checkpoint (step 0 = stock included) scored on dev nDCG@10 or the proxy."""
    from models.train_config import TrainConfig
    from models.trainer import Trainer

    cfg, recipe = run.cfg, RECIPE_TRAINING[run.cfg.recipe]
    stamp = {"checkpoint": str(run.checkpoint.resolve()), "views": run.stamps["views"],
             "selected_on": run.selected_on,
             "dev": _digest(asdict(run.dev) if cfg.queries else {"proxy": len(run.split.proxy)}),
             **cfg.train_settings()}
    run.stamps["train"] = stamp
    tcfg = TrainConfig(
        out=run.work / "train", model=str(run.checkpoint), pooler=recipe.pooler, objective=recipe.objective,
        data="corpus", batch_size=cfg.batch_size, max_length=cfg.max_length, lr=cfg.lr,
        temperature=cfg.effective_temperature(), max_steps=cfg.steps, warmup_ratio=cfg.warmup_ratio,
        eval_every=cfg.eval_every, eval_mode=recipe.served, eval_at_start=True, seed=cfg.seed, resume=True,
        device="cpu", threads=cfg.threads, progress=cfg.progress)
    pipeline.train_stage(run.work, stamp, lambda: Trainer(tcfg, examples=run.examples, dev=run.dev).train(),
                         cfg.steps, run.status, follow_best_dev=False)


def _gate(run: CorpusRun) -> None:
    """5. the gate: the adapted weights only when a trained checkpoint beat the stock encoder as it serves (step 0
    when the recipe serves what stock serves; else stock's token mean scored on the same set)."""
    best_dir = run.work / "train" / "best"
    best = json.loads((best_dir / "train.json").read_text())
    decision = gate_decision(run.cfg, run.checkpoint, best_dir, int(best["step"]), run.dev,
                             run.work / "gate.json", run.stamps["train"])
    run.adaptation = _adaptation(run.cfg, RECIPE_TRAINING[run.cfg.recipe].served, run.selected_on, best, decision)


def _export(run: CorpusRun) -> None:
    """6. the selected checkpoint (or stock, when the gate kept it) exported with its served vector."""
    from models.export import export_encoder

    cfg, adaptation = run.cfg, run.adaptation
    adapted = adaptation["adapted"]
    what = f"{cfg.recipe}, {cfg.steps} steps, seed {cfg.seed}"
    pipeline.export_stage(run.work, Path(cfg.out), run.stamps["train"], cfg.quantize, lambda quantize: export_encoder(
        run.work / "train" / "best" if adapted else run.checkpoint, cfg.out, pooling=adaptation["served"],
        force=True, quantize=quantize, adaptation=adaptation,
        source=(f"encoder adapt --data {cfg.data} of {run.checkpoint} ({what})" if adapted else
                f"{run.checkpoint} (encoder adapt --data {cfg.data} kept stock: {what})")), adaptation=adaptation)


def _finish(run: CorpusRun) -> str:
    """`work/adaptation.json` (the record with the selection curve); the final status message."""
    curve = selection_curve(run.work / "train" / "log.jsonl")
    write_json_atomic(run.work / "adaptation.json", {**run.adaptation, "curve": curve})
    adapted = run.adaptation["adapted"]
    verdict = ("adapted" if adapted else "kept stock") + ("" if run.cfg.queries or not adapted else " (unverified)")
    return f"{verdict}: exported {run.cfg.out}"


def _export_message(run: CorpusRun) -> str:
    a = run.adaptation
    return (f"{'adapted' if a['adapted'] else 'stock (gate)'} encoder ({a['served']}, quantize {run.cfg.quantize}) "
            f"to {run.cfg.out}")


CORPUS_RECIPE: tuple[Stage[CorpusRun], ...] = (
    Stage("base", lambda r: f"export {r.checkpoint} (fp32, mean, {r.cfg.max_length} tokens) to {r.cache / 'base'}",
          _base),
    Stage("mine", lambda r: f"hard negatives over {len(r.split.train):,} documents (skip {r.cfg.skip}, take "
          f"{r.cfg.take})", _mine, when=lambda r: r.cfg.recipe == "crops"),
    Stage("views", lambda r: f"{r.cfg.recipe} training views of {len(r.split.train):,} documents", _views),
    Stage("train", lambda r: f"{r.cfg.recipe}: {r.cfg.steps} steps, batch {r.cfg.batch_size}, {r.cfg.max_length} "
          f"tokens, selected on {r.selected_on} every {r.cfg.eval_every}", _train),
    Stage("gate", lambda r: f"{r.cfg.gate} gain over the stock encoder on {r.selected_on}", _gate),
    Stage("export", _export_message, _export),
)
CORPUS_STAGES = tuple(s.name for s in CORPUS_RECIPE)


def _adaptation(cfg: CorpusAdaptConfig, served: str, selected_on: str, best: dict[str, Any],
                decision: dict[str, Any]) -> dict[str, Any]:
    """The record `encoder.json` keeps of the adaptation (`/ready` shows it): what was selected, the gate's
    decision, and a note when the stock encoder was kept or the choice is unverified."""
    adapted = decision["adapted"]
    adaptation: dict[str, Any] = {
        "recipe": cfg.recipe, "adapted": adapted, "verified": bool(cfg.queries) and adapted,
        "selected_on": selected_on, "best_step": int(best["step"]), "best_score": round(float(best["dev"]), 4),
        "stock_score": decision["stock_score"], "gate": {k: v for k, v in decision.items() if k != "stock_score"},
        "steps": cfg.steps, "seed": cfg.seed, "corpus": str(cfg.data), "max_length_trained": cfg.max_length,
        "served": served if adapted else STOCK_SERVED,
    }
    if not adapted:
        why = ("no trained checkpoint beat the stock encoder" if int(best["step"]) == 0 or decision["delta"] <= 0
               else f"the gain over the stock encoder, {decision['delta']:+.2f} [95 % CI {decision['ci'][0]:+.2f}, "
                    f"{decision['ci'][1]:+.2f}], is not significant")
        adaptation["note"] = f"{why} (its token mean, on {selected_on}): the stock encoder is exported"
    elif not cfg.queries:
        adaptation["note"] = ("unverified: selected on a label-free proxy only; give dev queries (--queries) to "
                              "verify that retrieval does not drop")
    return adaptation


def gate_decision(cfg: CorpusAdaptConfig, checkpoint: Path, best_dir: Path, best_step: int,
                  dev: RetrievalDev | CropProxy, path: Path, stamp: dict[str, Any]) -> dict[str, Any]:
    """The stock encoder as it serves (token mean) against the selected checkpoint as its recipe serves, item by
    item on the set the checkpoints were selected on; adapted per `cfg.gate` (`decide`). Kept in `path`, stamped
    with the training, the rule and the selected step, so a rerun with another rule only re-decides."""
    want = {"train": stamp, "gate": cfg.gate, "resamples": cfg.gate_resamples, "best_step": best_step}
    try:
        kept = json.loads(path.read_text())
        if kept.get("stamp") == json.loads(json.dumps(want)):
            return dict(kept["decision"])
    except (OSError, ValueError):
        pass
    from models.sentence_model import SentenceModel

    stock = SentenceModel.from_checkpoint(str(checkpoint), pooler="avg_last", max_length=cfg.max_length).eval()
    stock_items = dev.per_item(lambda texts: stock.encode(texts, mode=STOCK_SERVED))
    if best_step > 0:
        served = RECIPE_TRAINING[cfg.recipe].served
        model = SentenceModel.from_checkpoint(str(best_dir), max_length=cfg.max_length).eval()
        best_items = dev.per_item(lambda texts: model.encode(texts, mode=served))
    else:
        best_items = stock_items
    decision = {"stock_score": round(float(np.mean(stock_items)), 4),
                **decide(cfg.gate, stock_items, best_items, cfg.gate_resamples)}
    write_json_atomic(path, {"stamp": want, "decision": decision})
    return decision


def gate_passes(rule: str, delta: float, ci_low: float) -> bool:
    """The gate's rule on a paired gain: `significant` needs its interval's low end above 0, `better` the mean."""
    return bool(ci_low > 0) if rule == "significant" else bool(delta > 0)


def decide(rule: str, stock: np.ndarray, best: np.ndarray, resamples: int, seed: int = 0) -> dict[str, Any]:
    """`significant`: adapted when the 95 % paired bootstrap interval of the mean per-item gain is above 0;
    `better`: when the mean gain is above 0."""
    from indexer.compare import paired_bootstrap_ci

    if rule not in GATES:
        raise AdaptInputError(f"unknown gate {rule!r}; known: {', '.join(GATES)}")
    deltas = np.asarray(best, dtype=np.float64) - np.asarray(stock, dtype=np.float64)
    delta = float(deltas.mean())
    lo, hi = paired_bootstrap_ci(deltas, resamples, seed)
    return {"rule": rule, "adapted": gate_passes(rule, delta, lo), "delta": round(delta, 4),
            "ci": [round(lo, 4), round(hi, 4)], "items": int(len(deltas)), "resamples": resamples}
