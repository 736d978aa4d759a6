"""Label-free corpus adaptation (`encoder adapt --data CORPUS`) on held-out BEIR test sets: does it help?

    nohup nice -n 15 python bench/adapt_beir.py --datasets scifact,nfcorpus,quora-heldout &   # resumable
    python bench/adapt_beir.py --render /tmp/adaptbench/results.json                          # the table again

For each dataset the split is declared first and written to `WORK/<dataset>/split.json` (and into the results):
its own `qrels/dev.tsv` selects when it has one and the test qrels evaluate; without a dev split, the test
queries are ordered by sha256 of their id, the first third (at most `--dev-cap`) selects and the rest
(at most `--eval-cap`) evaluates — never the same query in both. A corpus larger than `--eval-docs` is evaluated
on a declared fixed subset: every judged document of the split's queries, plus seeded random others up to
`--eval-docs`. The materialised folder (`WORK/<dataset>/data`: corpus, queries, qrels/dev.tsv = selection,
qrels/test.tsv = evaluation) is what every arm adapts to and is evaluated on.

Arms: `stock` (the bundled all-MiniLM-L6-v2, token mean) and `RECIPE:SEED` (`crops`, `simcse`), each run through
`models.corpus_adapt.adapt_corpus` — the code behind `encoder adapt --data` — with the dev split as `--queries`, so
each arm's result is what the product would write: the adapted encoder when it beat stock on dev nDCG@10, else
stock (the gate). Every arm's exported ONNX graph (fp32, the serving length 256) encodes the evaluation corpus and
queries; dense = exact inner-product top 100; hybrid = Strata's default convex combination, alpha 0.5 with BM25
(bm25s, `bench/beir.py`'s machinery). nDCG@10 with paired per-query bootstrap 95 % CIs against stock; training
seconds per 1,000 steps; the load average; and, across every evaluated checkpoint, the Spearman correlation of the
label-free proxy (held-out crop-pair accuracy) with dev nDCG@10 (how far selection without labels can be trusted).

Each arm's outputs live in `WORK/<dataset>/<arm>/` and are skipped when done; results are rewritten after every
arm (`--out`/adapt-beir-<stamp>.{md,json}, the stamp kept in WORK so a resumed run writes the same file).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shlex
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from bench.beir import (  # noqa: E402
    DEPTH,
    EvalData,
    Run,
    bm25s_run,
    convex,
    drop_identical,
    load_dataset,
    load_run,
    mean_pct,
    paired_ci,
    per_query_metrics,
    save_run,
)

ALPHA = 0.5  # Strata's default hybrid weight


def say(msg: str) -> None:
    print(f"adapt-beir {datetime.now(timezone.utc):%H:%M:%S}: {msg}", file=sys.stderr, flush=True)


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.1f}/{five:.1f}"


# ---------------------------------------------------------------- the declared split


def _order(qid: str) -> str:
    return hashlib.sha256(qid.encode()).hexdigest()


def read_qrels_file(path: Path) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            parts = line.rstrip("\r\n").split("\t")
            if len(parts) != 3 or not parts[2].lstrip("-").isdigit():
                continue
            out.setdefault(parts[0], {})[parts[1]] = int(parts[2])
    return out


def prepare(src: Path, dest: Path, dev_cap: int, eval_cap: int, eval_docs: int) -> dict[str, object]:
    """Write the split (once) and the materialised BEIR folder; return the split's description."""
    split_path = dest / "split.json"
    if split_path.is_file() and (dest / "data" / "qrels" / "test.tsv").is_file():
        return json.loads(split_path.read_text())
    test = {q: j for q, j in read_qrels_file(src / "qrels" / "test.tsv").items() if any(g > 0 for g in j.values())}
    if (src / "qrels" / "dev.tsv").is_file():
        dev = {q: j for q, j in read_qrels_file(src / "qrels" / "dev.tsv").items() if any(g > 0 for g in j.values())}
        ev_ids = sorted(test, key=_order)[:eval_cap]
        how = f"the dataset's own qrels/dev.tsv selects; test qrels evaluate ({len(ev_ids)} of {len(test)} queries)"
        dev_ids = sorted(dev)
    else:
        ordered = sorted(test, key=_order)
        n_dev = min(dev_cap, len(ordered) // 3)
        dev_ids, ev_ids = ordered[:n_dev], ordered[n_dev : n_dev + eval_cap]
        dev = test
        how = (f"no dev split: test queries ordered by sha256(query id); the first {n_dev} select (dev), the next "
               f"{len(ev_ids)} evaluate; the two never share a query")
    with open(src / "corpus.jsonl", encoding="utf-8") as fh:
        lines = fh.readlines()
    ids = [json.loads(line)["_id"] for line in lines]
    if len(lines) > eval_docs:
        keep = {d for q in [*dev_ids, *ev_ids] for d in (dev.get(q) or test.get(q) or {})} | set(dev_ids) | set(ev_ids)
        pos = {d: i for i, d in enumerate(ids)}
        chosen = {pos[d] for d in keep if d in pos}
        for i in np.random.default_rng(0).permutation(len(lines)).tolist():
            if len(chosen) >= eval_docs:
                break
            chosen.add(i)
        rows = sorted(chosen)
        corpus_how = (f"fixed subset of {len(rows):,} of {len(lines):,} documents: every judged document of the "
                      f"split's queries and the query documents, plus seeded random others (numpy seed 0)")
    else:
        rows = list(range(len(lines)))
        corpus_how = f"full corpus ({len(lines):,} documents)"
    data = dest / "data"
    (data / "qrels").mkdir(parents=True, exist_ok=True)
    (data / "corpus.jsonl").write_text("".join(lines[i] for i in rows))
    (data / "queries.jsonl").write_text((src / "queries.jsonl").read_text())
    for name, qids, judged in (("dev", dev_ids, dev), ("test", ev_ids, test)):
        body = "".join(f"{q}\t{d}\t{g}\n" for q in qids for d, g in judged[q].items())
        (data / "qrels" / f"{name}.tsv").write_text("query-id\tcorpus-id\tscore\n" + body)
    split = {"dataset": src.name, "selection": how, "corpus": corpus_how, "dev_queries": len(dev_ids),
             "eval_queries": len(ev_ids), "eval_docs": len(rows),
             "dev_ids_sha256": hashlib.sha256("\n".join(dev_ids).encode()).hexdigest()[:16],
             "eval_ids_sha256": hashlib.sha256("\n".join(ev_ids).encode()).hexdigest()[:16]}
    split_path.write_text(json.dumps(split, indent=1))
    return split


# ---------------------------------------------------------------- arms


def stock_model(work: Path) -> Path:
    from models.checkpoint import default_checkpoint
    from models.export import export_encoder

    out = work / "stock-fp32-mean"
    if not (out / "encoder.json").is_file():
        say(f"exporting the stock encoder (fp32, mean) to {out}")
        export_encoder(default_checkpoint(), out, pooling="mean", force=True)
    return out


def run_arm(arm: str, data: Path, dest: Path, args: argparse.Namespace) -> dict[str, object]:
    """Adapt (the product's code path, gated on the dev split); returns what happened and the model folder."""
    from models.corpus_adapt import CorpusAdaptConfig, adapt_corpus

    recipe, seed = arm.split(":")
    done = dest / "adapt.json"
    earlier = json.loads(done.read_text()) if done.is_file() else None
    if earlier and (earlier["adaptation"].get("gate") or {}).get("rule") == args.gate:
        return earlier
    cfg = CorpusAdaptConfig(out=dest / "model", work=dest / "work", data=data, recipe=recipe,  # type: ignore[arg-type]
                            queries=data, split="dev", max_docs=args.max_docs, steps=args.steps,
                            batch_size=args.batch_size, max_length=args.max_length, lr=args.lr,
                            eval_every=args.eval_every, seed=int(seed), dev_queries=args.dev_cap,
                            dev_docs=args.dev_docs, gate=args.gate, quantize="none", threads=args.threads,
                            progress=False,
                            cache=dest.parent / "cache")
    say(f"{data.parent.name} {arm}: {'re-deciding with the ' + args.gate + ' gate' if earlier else 'adapting'} "
        f"({args.steps} steps, batch {args.batch_size}, {args.max_length} tokens; load {load()}); status: "
        f"{cfg.work / 'status.json'}")
    t0, load0 = time.perf_counter(), os.getloadavg()[0]
    adapt_corpus(cfg)
    wall = time.perf_counter() - t0
    meta = json.loads((cfg.out / "encoder.json").read_text())["adaptation"]
    train_log = [json.loads(line) for line in (cfg.work / "train" / "log.jsonl").read_text().splitlines()]
    end = [r for r in train_log if r.get("event") == "end"]
    record = {"arm": arm, "model": str(cfg.out), "adaptation": meta,
              "curve": json.loads((cfg.work / "adaptation.json").read_text())["curve"],
              "seconds_per_1k_steps": end[-1]["seconds_per_1k_steps"] if end else None,
              "train_seconds_total": end[-1]["seconds"] if end else None, "adapt_wall_s": round(wall, 1),
              "load_start": round(load0, 1), "load_end": round(os.getloadavg()[0], 1)}
    if earlier:  # only the gate ran again (the training is reused): the cost figures are the training run's
        record.update({k: earlier[k] for k in ("adapt_wall_s", "load_start", "load_end") if k in earlier})
        record["earlier_gates"] = [*earlier.get("earlier_gates", []), earlier["adaptation"]]
    done.write_text(json.dumps(record, indent=1))
    return record


def dense_run(ds: EvalData, model: Path, cache: Path, threads: int) -> tuple[Run, float]:
    path, tpath = cache / "dense.json", cache / "dense-timing.json"
    run = load_run(path)
    if run is not None and tpath.is_file():
        return run, json.loads(tpath.read_text())["encode_s"]
    from indexer.runtime.encoder import OnnxEncoder

    enc = OnnxEncoder(model, threads=threads)
    t0 = time.perf_counter()
    docs = enc.encode(ds.doc_texts, progress=True, bar=False, desc=f"{ds.name} corpus")
    queries = enc.encode(ds.query_texts, progress=True, bar=False, desc=f"{ds.name} queries")
    encode_s = time.perf_counter() - t0
    run = []
    for start in range(0, len(queries), 256):
        scores = queries[start : start + 256] @ docs.T
        top = np.argsort(-scores, axis=1, kind="stable")[:, : DEPTH + 1]
        run += [[(ds.doc_ids[j], float(s[j])) for j in row] for row, s in zip(top, scores, strict=True)]
    run = drop_identical(run, ds.query_ids)
    save_run(path, run)
    tpath.write_text(json.dumps({"encode_s": round(encode_s, 1)}))
    return run, encode_s


def evaluate(name: str, arm: str, rec: dict[str, object], model: Path, ds: EvalData, bm25: Run,
             res: dict[str, object], base: dict[str, np.ndarray], dest: Path, args: argparse.Namespace) -> None:
    """Dense and hybrid runs of `model` on the evaluation split, with paired CIs against stock (`base`)."""
    t0 = time.perf_counter()
    dense, encode_s = dense_run(ds, model, dest / "runs" / model_key(model), args.threads)
    hybrid = convex(dense, bm25, ALPHA)
    dpq, hpq = per_query_metrics(dense, ds), per_query_metrics(hybrid, ds)
    entry = {**rec, "dense": mean_pct(dpq), "hybrid": mean_pct(hpq), "eval_encode_s": encode_s}
    if arm == "stock":
        base.update(dense=dpq["ndcg_at_10"], hybrid=hpq["ndcg_at_10"])
    elif base:
        entry["ci_dense"] = list(paired_ci(dpq["ndcg_at_10"], base["dense"], args.bootstrap))
        entry["ci_hybrid"] = list(paired_ci(hpq["ndcg_at_10"], base["hybrid"], args.bootstrap))
    res["arms"].append(entry)
    say(f"{name} {arm}: dense {entry['dense']['ndcg_at_10']} hybrid {entry['hybrid']['ndcg_at_10']} "
        f"(eval {time.perf_counter() - t0:.0f}s, load {load()})")


def ungated_model(arm_dir: Path, recipe: str, best_step: int, steps: int) -> tuple[Path, str]:
    """What the gate kept out, exported as the recipe serves it (fp32), for the record: the selected checkpoint
    when a trained one was selected, else (step 0, stock, was the best) the last."""
    from models.corpus_adapt import RECIPE_TRAINING
    from models.export import export_encoder

    source, label = (("best", f"best, step {best_step}") if best_step > 0 else ("last", f"last, step {steps}"))
    out = arm_dir / f"ungated-{source}-model"
    if not (out / "encoder.json").is_file():
        export_encoder(arm_dir / "work" / "train" / source, out, pooling=RECIPE_TRAINING[recipe].served, force=True)
    return out, label


def model_key(model: Path) -> str:
    """Runs are cached by the ONNX graph's hash: an arm whose gate kept stock costs no second encoding."""
    return json.loads((model / "encoder.json").read_text())["onnx_sha256"][:16]


def spearman(xs: list[float], ys: list[float]) -> float | None:
    from scipy.stats import spearmanr

    if len(xs) < 3 or len(set(xs)) < 2 or len(set(ys)) < 2:
        return None
    return round(float(spearmanr(xs, ys).statistic), 3)


# ---------------------------------------------------------------- report


def render(report: dict[str, object]) -> str:
    out = [f"# Label-free corpus adaptation on BEIR — {report['stamp']}", "",
           f"Command: `{report['command']}`", "",
           f"Machine: {report['machine']}. Settings: {report['settings']}.", "",
           "Each adapted arm is what `encoder adapt --data CORPUS --queries DEV` writes: checkpoints (step 0 = stock "
           "included) are selected on dev nDCG@10 and the adapted encoder is kept only when it beats stock there (the"
           " gate; `significant`: the paired 95 % bootstrap interval of its dev gain over stock's token mean, the "
           "`dev Δ` column, is above 0; `better`: the gain is above 0), else stock is written. Evaluation: the "
           "exported ONNX graph (fp32, 256 tokens; token mean, or [CLS] for an adapted sgopt arm) over the evaluation"
           " corpus, exact top 100; hybrid = convex 0.5·dense + 0.5·BM25 (bm25s, min-max over each top 100). Δ = arm "
           "− stock, nDCG@10 points, paired bootstrap 95 % CI over the evaluation queries "
           f"({report['bootstrap']} resamples).", ""]
    for res in report["datasets"]:
        sp = res["split"]
        out += [f"## {res['dataset']}", "", f"- Split (declared before any run): {sp['selection']}.",
                f"- Evaluation corpus: {sp['corpus']}; {sp['eval_queries']} evaluation queries, {sp['dev_queries']} "
                "dev queries.", f"- BM25 nDCG@10: {res.get('bm25', {}).get('ndcg_at_10', '—')}", "",
                "| arm | gate | dev nDCG@10 stock → best (step) | dev Δ [95 % CI] | dense nDCG@10 | Δ dense [95 % CI] "
                "| hybrid nDCG@10 | Δ hybrid [95 % CI] | R@100 dense | train s / 1k steps | adapt wall s | load |",
                "|---|---|---|---|---:|---|---:|---|---:|---:|---:|---|"]
        for arm in res["arms"]:
            a = arm.get("adaptation") or {}
            gate = ("—" if arm["arm"] == "stock" else "refused by the gate" if "ungated" in arm["arm"]
                    else "adapted" if a.get("adapted") else "kept stock")
            rule = (a.get("gate") or {}).get("rule")
            if rule and "ungated" not in arm["arm"]:
                other = "better" if rule == "significant" else "significant"
                gate += f" (`{other}`: {'adapt' if would_adapt(a, other) else 'stock'})"
            devs = (f"{a.get('stock_score')} → {a.get('best_score')} ({a.get('best_step')})" if a else "—")
            g = a.get("gate") or {}
            dev_delta = _ci([g["delta"], *g["ci"]]) if g.get("ci") else ""
            d, h = arm.get("dense", {}), arm.get("hybrid", {})
            out.append(f"| {arm['arm']} | {gate} | {devs} | {dev_delta} | {d.get('ndcg_at_10', '—')} "
                       f"| {_ci(arm.get('ci_dense'))} "
                       f"| {h.get('ndcg_at_10', '—')} | {_ci(arm.get('ci_hybrid'))} | {d.get('recall_at_100', '—')} "
                       f"| {arm.get('seconds_per_1k_steps') or '—'} | {arm.get('adapt_wall_s') or '—'} | "
                       f"{arm.get('load_start', '—')}→{arm.get('load_end', '—')} |")
        curves = [(arm["arm"], arm.get("curve") or []) for arm in res["arms"] if arm.get("curve")]
        if curves:
            out += ["", "Selection curves (step: dev nDCG@10 / proxy crop-pair top-1 %):", ""]
            for name, curve in curves:
                pts = ", ".join(f"{c['step']}: {c.get('dev')} / {c.get('proxy_acc')}" for c in curve)
                out.append(f"- {name}: {pts}")
        if res.get("proxy_spearman") is not None or res.get("proxy_spearman_per_arm"):
            out += ["", f"Proxy vs dev nDCG@10, Spearman over every evaluated checkpoint of this dataset: "
                    f"{res.get('proxy_spearman')}; per arm: {res.get('proxy_spearman_per_arm')}."]
        out.append("")
    if report.get("datasets"):  # recomputed, so that --render of an older JSON says what today's rule says
        out += ["## Verdict (the issue's rule: beats stock on every dataset in every seed, dense, hybrid not worse)",
                "", verdict(report), ""]
    return "\n".join(out) + "\n"


def _ci(v: list[float] | None) -> str:
    return "" if not v else f"{v[0]:+.2f} [{v[1]:+.2f}, {v[2]:+.2f}]"


def would_adapt(adaptation: dict[str, object], rule: str) -> bool:
    """What the gate `rule` decides from an arm's recorded gain (the `gate` record holds both rules' inputs)."""
    from models.corpus_adapt import gate_passes

    g = adaptation.get("gate") or {}
    if not g or int(adaptation.get("best_step") or 0) == 0:  # type: ignore[call-overload]
        return False
    return gate_passes(rule, g["delta"], g["ci"][0])  # type: ignore[index]


def written_by(res: dict[str, object], entry: dict[str, object], rule: str) -> dict[str, object] | None:
    """The evaluated row of what `rule` would have written for a gated arm: the arm itself when it adapted under
    its own rule, the refused selected checkpoint (`ungated (best …)`) when only `rule` adapts; None = stock."""
    a = entry.get("adaptation") or {}
    if not would_adapt(a, rule):  # type: ignore[arg-type]
        return None
    if a.get("adapted"):  # type: ignore[union-attr]
        return entry
    return next((u for u in res["arms"] if u["arm"].startswith(f"{entry['arm']} ungated (best")), None)  # type: ignore[attr-defined]


def verdict(report: dict[str, object]) -> str:
    lines = []
    recipes = sorted({a["arm"].split(":")[0] for r in report["datasets"] for a in r["arms"] if a["arm"] != "stock"})
    lines.append("Over the gated arms (what `encoder adapt --data --queries` writes); `ungated` rows are not counted.")
    for recipe in recipes:
        arms = [(r["dataset"], a) for r in report["datasets"] for a in r["arms"] if a["arm"].startswith(recipe + ":")
                and a.get("ci_dense") and "ungated" not in a["arm"]]
        if not arms:
            continue
        wins = all(a["ci_dense"][1] > 0 and (a.get("ci_hybrid") or [0, 0, 0])[0] >= 0 for _, a in arms)
        kept = sum(bool((a.get("adaptation") or {}).get("adapted")) for _, a in arms)
        lines.append(f"- `{recipe}`: {len(arms)} evaluated runs over {len({d for d, _ in arms})} dataset(s); the gate "
                     f"kept the adapted encoder in {kept}; "
                     + ("beats stock in every run (dense CI above 0, hybrid not worse): recommended"
                        if wins else "does not beat stock in every run: not recommended"))
    lines.append("")
    lines.append("What each gate rule writes, from the recorded dev gains (a refused selected checkpoint is the "
                 "`ungated (best …)` row; Δ dense on test, * = CI excludes 0):")
    for recipe in recipes:
        for rule in ("significant", "better"):
            runs = [(r, a) for r in report["datasets"] for a in r["arms"] if a["arm"].startswith(recipe + ":")
                    and "ungated" not in a["arm"] and (a.get("adaptation") or {}).get("gate")]
            if not runs:
                continue
            written = [(r["dataset"], a["arm"], written_by(r, a, rule)) for r, a in runs]
            adapted = [(d, arm, w) for d, arm, w in written if w is not None]
            shown = ", ".join(f"{d} {arm.split(':')[1]}: " + (f"{w['ci_dense'][0]:+.2f}" + (
                "*" if w["ci_dense"][1] > 0 or w["ci_dense"][2] < 0 else "") if w.get("ci_dense") else "not evaluated")
                for d, arm, w in adapted)
            lines.append(f"- `{recipe}`, gate `{rule}`: adapts in {len(adapted)} of {len(runs)} runs"
                         + (f" ({shown})" if adapted else "") + "; stock elsewhere.")
    return "\n".join(lines)


# ---------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=Path(os.environ.get("STRATA_DATA_DIR", "/work/shared/data")) / "beir")
    p.add_argument("--datasets", default="scifact,nfcorpus,quora-heldout")
    p.add_argument("--arms", default="stock,crops:1,simcse:1,crops:2,crops:3",
                   help="stock and RECIPE:SEED, run in this order (default: %(default)s)")
    p.add_argument("--work", type=Path, default=Path("/tmp/adaptbench"))
    p.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "results")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--max-length", type=int, default=64, help="training/selection length cap (tokens)")
    p.add_argument("--lr", type=float, default=2e-5)
    p.add_argument("--eval-every", type=int, default=25)
    p.add_argument("--max-docs", type=int, default=20_000, help="documents sampled for adaptation")
    p.add_argument("--dev-cap", type=int, default=100, help="dev queries at most (also the selection cap)")
    p.add_argument("--dev-docs", type=int, default=300, help="documents in the dev selection corpus")
    p.add_argument("--eval-cap", type=int, default=500, help="evaluation queries at most")
    p.add_argument("--eval-docs", type=int, default=2_500, help="evaluation corpus size above which a declared "
                   "fixed subset is used")
    p.add_argument("--order", choices=["dataset", "arm"], default="dataset",
                   help="dataset: every arm of a dataset before the next dataset (default); arm: each arm on every "
                   "dataset before the next arm")
    p.add_argument("--gate", choices=["significant", "better"], default="significant",
                   help="the product's gate rule (`encoder adapt --gate`); arms already adapted under another rule "
                   "are re-decided without training again")
    p.add_argument("--ungated", action="store_true",
                   help="also evaluate, for each arm whose gate kept stock, its last trained checkpoint (the "
                   "rows marked `ungated`: what the gate kept out)")
    p.add_argument("--suffix", default="", help="appended to the results file names (a second process over the same "
                   "work folder)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--bootstrap", type=int, default=2000)
    p.add_argument("--render", type=Path, help="print the Markdown of a results JSON and exit")
    p.add_argument("--merge", type=Path, nargs="+", metavar="JSON",
                   help="merge results JSONs (datasets run by parallel processes) into adapt-beir-<first stamp>-merged"
                   ".{md,json} under --out and exit")
    args = p.parse_args(argv)
    if args.render:
        print(render(json.loads(args.render.read_text())), end="")
        return 0
    if args.merge:
        parts = [json.loads(f.read_text()) for f in args.merge]
        by_name: dict[str, dict[str, object]] = {}
        for d in (d for r in parts for d in r["datasets"] if d["arms"]):  # one section per dataset, arms once
            if d["dataset"] not in by_name:
                by_name[d["dataset"]] = {**d, "arms": list(d["arms"])}
            else:
                seen = {a["arm"] for a in by_name[d["dataset"]]["arms"]}
                by_name[d["dataset"]]["arms"] += [a for a in d["arms"] if a["arm"] not in seen]
        merged = {**parts[0], "datasets": list(by_name.values()),
                  "command": " ; ".join(r["command"] for r in parts),
                  "machine": " ; ".join(dict.fromkeys(r["machine"] for r in parts)),
                  "merged_from": [str(f) for f in args.merge]}
        merged["verdict"] = verdict(merged)
        stem = args.out / f"adapt-beir-{parts[0]['stamp']}-merged"
        stem.with_suffix(".json").write_text(json.dumps(merged, indent=1) + "\n")
        stem.with_suffix(".md").write_text(render(merged))
        print(render(merged), end="")
        return 0
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")  # training/encoding progress
    args.work.mkdir(parents=True, exist_ok=True)
    stamp_file = args.work / "stamp.txt"
    if not stamp_file.is_file():
        stamp_file.write_text(datetime.now(timezone.utc).strftime("%Y%m%dT%H%MZ"))
    stamp = stamp_file.read_text().strip()
    arms = args.arms.split(",")
    report: dict[str, object] = {
        "stamp": stamp, "command": "python bench/adapt_beir.py " + shlex.join(sys.argv[1:] if argv is None else argv),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores shared with other agents, load {load()} at start",
        "settings": f"steps {args.steps}, batch {args.batch_size}, max length {args.max_length}, lr {args.lr}, "
                    f"selection every {args.eval_every} steps on ≤ {args.dev_cap} dev queries over {args.dev_docs} "
                    f"documents, ≤ {args.max_docs} training documents, torch/ORT threads {args.threads}, gate "
                    f"{args.gate}",
        "bootstrap": args.bootstrap, "datasets": []}
    stamp += args.suffix
    results_json = args.work / f"results{args.suffix}.json"

    def write() -> None:
        report["verdict"] = verdict(report)
        results_json.write_text(json.dumps(report, indent=1))
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"adapt-beir-{stamp}.json").write_text(json.dumps(report, indent=1) + "\n")
        (args.out / f"adapt-beir-{stamp}.md").write_text(render(report))

    names = [n for n in args.datasets.split(",") if n]
    # every split is declared (written) before any arm runs
    splits = {n: prepare(args.data / n, args.work / n, args.dev_cap, args.eval_cap, args.eval_docs) for n in names
              if (args.data / n / "corpus.jsonl").is_file()}
    for n in names:
        if n not in splits:
            say(f"{n}: not prepared under {args.data}; skipped")
    stock = stock_model(args.work)
    state: dict[str, dict[str, object]] = {}
    for name, split in splits.items():
        dest = args.work / name
        ds = load_dataset(dest / "data")
        say(f"{name}: {split['selection']}; {split['corpus']}")
        res: dict[str, object] = {"dataset": name, "split": split, "arms": []}
        report["datasets"].append(res)
        bm25, _ = bm25s_run(ds, dest / "runs")
        res["bm25"] = mean_pct(per_query_metrics(bm25, ds))
        state[name] = {"ds": ds, "bm25": bm25, "res": res, "base": {}}
    # dataset-major (default: a whole dataset's table first) or arm-major (each arm on every dataset first)
    order = ([(arm, name) for name in splits for arm in arms] if args.order == "dataset"
             else [(arm, name) for arm in arms for name in splits])
    for arm, name in order:
        st = state[name]
        ds, bm25, res, base = st["ds"], st["bm25"], st["res"], st["base"]
        dest = args.work / name
        rec = {"arm": "stock", "model": str(stock)} if arm == "stock" else run_arm(
            arm, dest / "data", dest / arm.replace(":", "-s"), args)
        kept_stock = arm != "stock" and not (rec.get("adaptation") or {}).get("adapted")
        model = stock if kept_stock else Path(rec["model"])  # the gate wrote the stock encoder: the same vectors
        evaluate(name, arm, rec, model, ds, bm25, res, base, dest, args)
        if kept_stock and args.ungated:  # what the gate refused, on the test set
            best_step = int((rec.get("adaptation") or {}).get("best_step") or 0)
            refused, label = ungated_model(dest / arm.replace(":", "-s"), arm.split(":")[0], best_step, args.steps)
            evaluate(name, f"{arm} ungated", {"arm": f"{arm} ungated ({label})", "model": str(refused)}, refused,
                     ds, bm25, res, base, dest, args)
        pts = [(c["dev"], c["proxy_acc"]) for a in res["arms"] for c in (a.get("curve") or [])
               if c.get("proxy_acc") is not None]
        res["proxy_spearman"] = spearman([d for d, _ in pts], [x for _, x in pts])
        res["proxy_spearman_per_arm"] = {
            a["arm"]: spearman([c["dev"] for c in a["curve"]], [c["proxy_acc"] for c in a["curve"]])
            for a in res["arms"] if a.get("curve")}
        write()
    write()
    print(render(report), end="")
    say(f"wrote {args.out}/adapt-beir-{stamp}.{{md,json}}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
