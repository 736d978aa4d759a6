"""`encoder adapt --data CORPUS`: label-free adaptation of the encoder to a user's own corpus, gated.

Three recipes; each serves the vector it trained (`RECIPE_TRAINING`):

- `crops` (Contriever-style positives from the documents themselves): a document with a title gives the pair
  title → body; one without gives two independent random crops (10–50 % of its words, each at least
  `MIN_CROP_WORDS`). Negatives: the rest of the batch plus one hard negative per pair mined from the user's own
  index with `models.mine` (the base encoder's nearest other documents, skipping the first `skip`, where
  near-duplicates — false negatives — sit), trained with the supervised hard-negative SimCSE loss.
- `simcse`: unsupervised SimCSE on the documents (two dropout views of the same text), in-batch negatives.
- `sgopt`: SG-OPT (`models.objectives.sgopt`) on the documents: the tuned copy's last-layer [CLS] against a frozen
  copy's hidden layers through the projection head, which is detached; it trains and serves [CLS]. Its step 0 is the
  stock [CLS], not what the stock encoder serves, so its gate compares with the stock token mean scored on the
  same dev set (or proxy).

Stages (each written into `work/`, stamped with its inputs and skipped when done, as `models.adapt`'s):
base export (fp32, mean, length capped: what mines) → mine (crops only) → views (the training examples,
`views.jsonl`) → train (resumable from `train/last`) → export. `work/status.json` says the stage, step and ETA.

Selection and gating. With dev queries and qrels (`queries`), each checkpoint — step 0, the stock encoder,
included — is scored on dev nDCG@10 (exact search over the dev queries' judged documents plus random others of
the corpus, `dev_docs` in all) and the best is kept; the adapted weights are exported only when they beat stock
on it, else the stock encoder is exported and the manifest says so. Without queries the proxy selects:
held-out crop-pair retrieval accuracy (top-1 of one crop among the other crops of `proxy_docs` documents never
trained on), and the manifest's `adaptation.verified` is false (the service's `/ready` shows it).

Training documents are a seeded sample of at most `max_docs`; proxy documents are drawn first with a fixed seed
(the same for every run over a corpus), so seeds differ only in training.
"""

from __future__ import annotations

import csv
import hashlib
import json
import logging
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np

from indexer.runtime.atomic import write_json_atomic
from models.adapt import (
    AdaptStatus,
    StatusWriter,
    _stamp_ok,
    export_once,
    quantize_choice,
    start_training,
    train_watched,
)

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
CORPUS_STAGES = ("base", "mine", "views", "train", "gate", "export")
MIN_CROP_WORDS = 5
CROP_RATIO = (0.1, 0.5)  # Contriever's independent cropping
PROXY_SEED = 0  # proxy and dev documents: the same for every seed of a corpus


class AdaptInputError(ValueError):
    """A corpus, queries or qrels file unfit for adaptation; the message names the file (and line)."""


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

    def effective_temperature(self) -> float:
        from models.objectives import REGISTRY

        objective = REGISTRY[RECIPE_TRAINING[self.recipe].objective]
        return objective.default_temperature if self.temperature is None else self.temperature


# --- the corpus ------------------------------------------------------------------------------------------------

@dataclass
class CorpusDoc:
    ext_id: str
    title: str
    body: str

    @property
    def text(self) -> str:
        return (self.title + " " + self.body).strip() if self.title else self.body


def read_corpus(cfg: CorpusAdaptConfig) -> list[CorpusDoc]:
    """Every non-empty document of `cfg.data` (the formats `indexer build --data` reads), title kept apart."""
    from indexer.corpus import open_corpus

    src = open_corpus(Path(cfg.data), id_field=cfg.id_field, text_field=cfg.text_field, title_field=cfg.title_field)
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
        raise AdaptInputError(f"{cfg.data}: no documents with text")
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


def dev_set(cfg: CorpusAdaptConfig, docs: list[CorpusDoc], proxy: CropProxy | None) -> RetrievalDev:
    """The dev queries (at most `dev_queries`, seeded) with a judged document in the corpus, over their judged
    documents plus random others (`dev_docs` in all)."""
    from indexer.corpus import CorpusFormatError
    from indexer.eval_files import query_files, read_qrels, read_queries

    try:
        qpath, rpath = query_files(Path(cfg.queries), cfg.qrels, cfg.split)  # type: ignore[arg-type]
        texts, judged = read_queries(qpath).texts, read_qrels(rpath)
    except CorpusFormatError as exc:
        raise AdaptInputError(str(exc)) from exc
    position = {d.ext_id: i for i, d in enumerate(docs)}
    wanted = set(cfg.dev_query_ids) if cfg.dev_query_ids is not None else None
    qids = sorted(q for q, j in judged.items() if q in texts and (wanted is None or q in wanted)
                  and any(g > 0 and d in position for d, g in j.items()))
    if not qids:
        raise AdaptInputError(f"{rpath}: no query with a relevant document in {cfg.data} (and a text in {qpath})")
    rng = random.Random(PROXY_SEED)
    if len(qids) > cfg.dev_queries:
        qids = sorted(rng.sample(qids, cfg.dev_queries))
    chosen = {position[d] for q in qids for d in judged[q] if d in position}
    others = [i for i in np.random.default_rng(PROXY_SEED).permutation(len(docs)).tolist() if i not in chosen]
    chosen |= set(others[: max(0, cfg.dev_docs - len(chosen))])
    order = sorted(chosen)
    return RetrievalDev([docs[i].ext_id for i in order], [docs[i].text for i in order], qids,
                        [texts[q] for q in qids], [judged[q] for q in qids], proxy)


# --- the run ---------------------------------------------------------------------------------------------------

def _digest(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def _file_fingerprint(path: Path) -> dict[str, object]:
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    return {str(p): [p.stat().st_size, int(p.stat().st_mtime)] for p in files}


def adapt_corpus(cfg: CorpusAdaptConfig, on_status: Callable[[AdaptStatus], None] | None = None) -> Path:
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
    work = Path(cfg.work)
    work.mkdir(parents=True, exist_ok=True)
    status = StatusWriter(work, on_status)
    return status.run(lambda: _run(cfg, work, status))


def _views(cfg: CorpusAdaptConfig, docs: list[Any], train: list[int], negatives: dict[int, int], window: int,
           views: Path, views_stamp: dict[str, Any], work: Path) -> list[tuple[Any, ...]]:
    """Stage 3: the training views (seeded; title → body or two crops, plus the mined neighbour's view), written
    once per stamp; new views make an older training not resumable."""
    if not (_stamp_ok(work / "views.json", views_stamp) and views.is_file()):
        examples = training_views(cfg.recipe, docs, train, negatives, cfg.seed, window)
        tmp = views.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(ex) + "\n" for ex in examples))
        tmp.replace(views)
        write_json_atomic(work / "views.json", views_stamp)
        (work / "train.json").unlink(missing_ok=True)
    return [tuple(json.loads(line)) for line in views.read_text().splitlines() if line.strip()]


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


def _base_and_mined(cfg: CorpusAdaptConfig, checkpoint: Path, cache: Path, docs: list[Any], train: list[int],
                    corpus_key: dict[str, Any], stage: Callable[[str, str], None], done: Callable[[str], None]
                    ) -> tuple[dict[str, Any], dict[int, int]]:
    """Stages 1-2, kept in the cache (the same for every seed): the base encoder exported (what mines), and for
    crops the hard negatives mined with the user's own index. Their stamp, and each document's negative."""
    from indexer.runtime.encoder import EncoderMeta
    from models.data import TrainingQuestions
    from models.export import export_encoder
    from models.mine import mine

    # 1. the base encoder, exported fp32 with mean pooling at the length cap: what mines the negatives
    base = cache / "base"
    base_stamp = {"checkpoint": str(checkpoint.resolve()), "max_length": cfg.max_length}
    stage("base", f"export {checkpoint} (fp32, mean, {cfg.max_length} tokens) to {base}")
    if not (_stamp_ok(cache / "base.json", base_stamp) and (base / "encoder.json").is_file()):
        export_encoder(checkpoint, base, pooling="mean", max_length=cfg.max_length, force=True)
        write_json_atomic(cache / "base.json", base_stamp)
    base_sha = EncoderMeta.model_validate_json((base / "encoder.json").read_text()).onnx_sha256
    done("base")

    # 2. hard negatives from the user's own index (crops only): the same for every seed, so kept in the cache
    mined = cache / "mined.tsv"
    mine_stamp = {"base_sha256": base_sha, **corpus_key, "skip": cfg.skip, "take": cfg.take}
    negatives: dict[int, int] = {}
    if cfg.recipe == "crops":
        stage("mine", f"hard negatives over {len(train):,} documents (skip {cfg.skip}, take {cfg.take})")
        if not (_stamp_ok(cache / "mine.json", mine_stamp) and mined.is_file()):
            texts = {i: docs[i].text for i in train}
            mine(TrainingQuestions(texts, [(i, i) for i in train]), base, mined, skip=cfg.skip,
                 take=cfg.take, threads=cfg.threads, seed=cfg.seed, progress=cfg.progress)
            write_json_atomic(cache / "mine.json", mine_stamp)
        negatives = read_mined_ids(mined)
        done("mine")

    return mine_stamp, negatives


def _export(cfg: CorpusAdaptConfig, checkpoint: Path, work: Path, source_ckpt: Path, train_stamp: dict[str, Any],
            adaptation: dict[str, Any]) -> None:
    """Stage 6: the selected checkpoint (or stock, when the gate kept it) exported with its served vector."""
    from models.export import export_encoder

    adapted = adaptation["adapted"]
    quantize = quantize_choice(cfg.quantize)
    export_stamp = {"train": train_stamp, "quantize": quantize, "out": str(Path(cfg.out).resolve()),
                    "adaptation": adaptation}
    what = f"{cfg.recipe}, {cfg.steps} steps, seed {cfg.seed}"
    export_once(work, Path(cfg.out), export_stamp, lambda: export_encoder(
        source_ckpt, cfg.out, pooling=adaptation["served"], force=True, quantize=quantize, adaptation=adaptation,
        source=(f"encoder adapt --data {cfg.data} of {checkpoint} ({what})" if adapted else
                f"{checkpoint} (encoder adapt --data {cfg.data} kept stock: {what})")))


def _train(cfg: CorpusAdaptConfig, checkpoint: Path, train_dir: Path, examples: list[tuple[Any, ...]],
           dev: RetrievalDev | CropProxy, status: StatusWriter) -> None:
    """Stage 4: the recipe's training, every checkpoint (step 0 = stock included) scored on `dev`."""
    from models.train_config import TrainConfig
    from models.trainer import Trainer

    recipe = RECIPE_TRAINING[cfg.recipe]
    tcfg = TrainConfig(
        out=train_dir, model=str(checkpoint), pooler=recipe.pooler, objective=recipe.objective, data="corpus",
        batch_size=cfg.batch_size, max_length=cfg.max_length, lr=cfg.lr, temperature=cfg.effective_temperature(),
        max_steps=cfg.steps, warmup_ratio=cfg.warmup_ratio, eval_every=cfg.eval_every, eval_mode=recipe.served,
        eval_at_start=True, seed=cfg.seed, resume=True, device="cpu", threads=cfg.threads, progress=cfg.progress)
    train_watched(lambda: Trainer(tcfg, examples=examples, dev=dev).train(), train_dir, cfg.steps, status,
                  best_dev=False)


def _run(cfg: CorpusAdaptConfig, work: Path, status: StatusWriter) -> Path:
    from indexer.corpus import CorpusFormatError
    from models.checkpoint import default_checkpoint

    checkpoint = Path(cfg.checkpoint) if cfg.checkpoint else Path(default_checkpoint())
    recipe = RECIPE_TRAINING[cfg.recipe]
    cache = Path(cfg.cache) if cfg.cache else work
    cache.mkdir(parents=True, exist_ok=True)

    def stage(name: str, message: str) -> None:
        status.update(stage=name, message=message,
                      stage_started_at={**status.status.stage_started_at, name: time.time()})
        log.info("adapt [%d/%d] %s: %s", CORPUS_STAGES.index(name) + 1, len(CORPUS_STAGES), name, message)

    def done(name: str) -> None:
        status.update(stages_done=[*status.status.stages_done, name])

    try:
        docs = read_corpus(cfg)
    except CorpusFormatError as exc:
        raise AdaptInputError(str(exc)) from exc
    split = split_docs(len(docs), cfg.proxy_docs, cfg.max_docs)
    if len(split.train) < cfg.batch_size:
        raise AdaptInputError(f"{cfg.data}: {len(split.train)} training documents < batch size {cfg.batch_size}")
    window = words_window(cfg.max_length)
    corpus_key = {"data": str(Path(cfg.data).resolve()), "files": _digest(_file_fingerprint(Path(cfg.data))),
                  "docs": len(docs), "max_docs": cfg.max_docs, "proxy_docs": cfg.proxy_docs}

    mine_stamp, negatives = _base_and_mined(cfg, checkpoint, cache, docs, split.train, corpus_key, stage, done)

    # 3. the training views (seeded; title → body or two crops, plus the mined neighbour's view)
    views = work / "views.jsonl"
    views_stamp = {**corpus_key, "recipe": cfg.recipe, "seed": cfg.seed, "max_length": cfg.max_length,
                   "mine": mine_stamp if cfg.recipe == "crops" else None}
    stage("views", f"{cfg.recipe} training views of {len(split.train):,} documents")
    examples = _views(cfg, docs, split.train, negatives, window, views, views_stamp, work)
    done("views")

    # 4. training, every checkpoint (step 0 = stock included) scored on dev nDCG@10 or the label-free proxy
    proxy = crop_proxy(docs, split, window)
    dev: RetrievalDev | CropProxy | None = dev_set(cfg, docs, proxy) if cfg.queries else proxy
    if dev is None:
        raise AdaptInputError(f"{cfg.data}: too few documents for a held-out proxy; give dev queries (--queries)")
    selected_on = ("dev nDCG@10" if cfg.queries else "label-free proxy: held-out crop-pair top-1 accuracy")
    train_dir = work / "train"
    train_stamp = {"checkpoint": str(checkpoint.resolve()), "views": views_stamp, "selected_on": selected_on,
                   "dev": _digest(asdict(dev) if cfg.queries else {"proxy": len(split.proxy)}),
                   **cfg.train_settings()}
    stage("train", f"{cfg.recipe}: {cfg.steps} steps, batch {cfg.batch_size}, {cfg.max_length} tokens, selected on "
          f"{selected_on} every {cfg.eval_every}")
    if start_training(work, train_stamp):
        _train(cfg, checkpoint, train_dir, examples, dev, status)
        write_json_atomic(work / "train.json", {**train_stamp, "finished": True})
    done("train")

    # 5. the gate, then export: the adapted weights only when a trained checkpoint beat the stock encoder as it
    # serves (step 0 when the recipe serves what stock serves; else stock's token mean scored on the same set)
    curve = selection_curve(train_dir / "log.jsonl")
    best = json.loads((train_dir / "best" / "train.json").read_text())
    stage("gate", f"{cfg.gate} gain over the stock encoder on {selected_on}")
    decision = gate_decision(cfg, checkpoint, train_dir / "best", int(best["step"]), dev, work / "gate.json",
                             train_stamp)
    adapted = decision["adapted"]
    adaptation = _adaptation(cfg, recipe.served, selected_on, best, decision)
    done("gate")
    source_ckpt = train_dir / "best" if adapted else checkpoint
    stage("export", f"{'adapted' if adapted else 'stock (gate)'} encoder ({adaptation['served']}, quantize "
          f"{cfg.quantize}) to {cfg.out}")
    _export(cfg, checkpoint, work, source_ckpt, train_stamp, adaptation)
    done("export")
    verdict = ("adapted" if adapted else "kept stock") + ("" if cfg.queries or not adapted else " (unverified)")
    status.update(stage="done", message=f"{verdict}: exported {cfg.out}", eta_s=0.0)
    write_json_atomic(work / "adaptation.json", {**adaptation, "curve": curve})
    return Path(cfg.out)


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

