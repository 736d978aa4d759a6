"""`encoder adapt --data CORPUS` (models/corpus_adapt.py): both label-free recipes end to end on a tiny random BERT
and a tiny BEIR folder — real torch, ONNX Runtime, FAISS mining and `indexer build` — the dev gate (keeps stock
when dev drops), `unverified` marking without dev queries, resume after an interruption, and FILE:LINE errors."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from models.corpus_adapt import AdaptInputError, CorpusAdaptConfig, adapt_corpus
from tests.conftest import REPO, indexer_cli
from tests.models.fixtures import WORDS

N_DOCS = 96


def make_worded_bert(folder: Path, layers: int = 2, hidden: int = 32) -> Path:
    """A tiny random BERT whose tokenizer knows the test words. (`tests.models.fixtures.make_tiny_bert`'s
    `BertTokenizerFast(vocab_file=...)` maps every word to [UNK] under transformers 5, so all its texts of one
    length encode alike — useless for retrieval; the `tokenizers` WordPiece model built here reads the vocabulary.)"""
    import torch
    from tokenizers import BertWordPieceTokenizer
    from transformers import BertConfig, BertModel, BertTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, *"abcdefghijklmnopqrstuvwxyz0123456789.,?!'"]
    (folder / "vocab.txt").write_text("\n".join(dict.fromkeys(vocab)) + "\n")
    wordpiece = BertWordPieceTokenizer(str(folder / "vocab.txt"), lowercase=True)
    tokenizer = BertTokenizerFast(tokenizer_object=wordpiece._tokenizer, unk_token="[UNK]", pad_token="[PAD]",
                                  cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]", model_max_length=64,
                                  do_lower_case=True)
    assert tokenizer.unk_token_id not in tokenizer("how do i learn python")["input_ids"]
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=hidden, num_hidden_layers=layers,
                        num_attention_heads=2, intermediate_size=hidden * 2, max_position_embeddings=64)
    BertModel(config).eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_worded_bert(tmp_path_factory.mktemp("worded-bert"))


def beir_folder(path: Path, *, titles: bool = True, queries_are_documents: bool = False) -> Path:
    """N_DOCS documents (a 3-word title and an 8-word body of other words, or an 11-word text without titles);
    dev queries are the titles (or, `queries_are_documents`, each document's whole text, which the stock encoder
    finds), each relevant to its own document."""
    rng = random.Random(7)
    (path / "qrels").mkdir(parents=True, exist_ok=True)
    docs, queries, qrels = [], [], []
    for i in range(N_DOCS):
        words = rng.sample(WORDS, 11)
        title, body = " ".join(words[:3]), " ".join(words[3:])
        docs.append({"_id": f"d{i}", "title": title if titles else "", "text": body if titles else " ".join(words)})
        queries.append({"_id": f"q{i}", "text": " ".join(words) if queries_are_documents else title})
        qrels.append(f"q{i}\td{i}\t1")
    (path / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (path / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    (path / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\n" + "\n".join(qrels) + "\n")
    return path


def config(tmp_path: Path, tiny_bert: Path, data: Path, **over: object) -> CorpusAdaptConfig:
    settings: dict[str, object] = dict(
        out=tmp_path / "adapted", work=tmp_path / "work", data=data, checkpoint=tiny_bert, steps=8, batch_size=8,
        max_length=32, lr=1e-3, eval_every=4, proxy_docs=16, dev_docs=64, quantize="none", threads=1,
        progress=False)
    settings.update(over)
    return CorpusAdaptConfig(**settings)  # type: ignore[arg-type]


def encoder_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "models.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


def adaptation(out: Path) -> dict[str, object]:
    return json.loads((out / "encoder.json").read_text())["adaptation"]


@pytest.mark.parametrize("recipe", ["crops", "simcse", "sgopt"])
def test_each_recipe_exports_a_servable_folder_that_indexer_build_accepts(recipe: str, tiny_bert: Path,
                                                                          tmp_path: Path) -> None:
    data = beir_folder(tmp_path / "beir")
    out = tmp_path / "adapted"
    r = encoder_cli("adapt", "--data", str(data), "--out", str(out), "--recipe", recipe, "--checkpoint",
                    str(tiny_bert), "--queries", str(data), "--steps", "8", "--batch-size", "8", "--max-length", "32",
                    "--lr", "1e-3", "--eval-every", "4", "--quantize", "none", "--threads", "1", "--no-progress")
    assert r.returncode == 0, r.stderr[-2000:]
    meta = adaptation(out)
    assert meta["recipe"] == recipe and meta["selected_on"] == "dev nDCG@10"
    # the gate's word is in the manifest and in what the command printed
    assert ("adapted" in r.stdout) if meta["adapted"] else ("kept the stock encoder" in r.stdout)
    assert meta["verified"] == meta["adapted"]
    work = tmp_path / "adapted.work"
    status = json.loads((work / "status.json").read_text())
    assert status["stage"] == "done" and status["step"] == 8
    expected = ["base", "mine", "views", "train", "gate", "export"] if recipe == "crops" else [
        "base", "views", "train", "gate", "export"]
    assert status["stages_done"] == expected
    curve = json.loads((work / "adaptation.json").read_text())["curve"]
    assert [c["step"] for c in curve] == [0, 4, 8]  # step 0 (stock) competes
    assert all("proxy_acc" in c for c in curve)  # the proxy is measured beside dev, for the correlation
    if recipe == "crops":  # title → body pairs, each with a mined neighbour's body as the hard negative
        views = [json.loads(line) for line in (work / "views.jsonl").read_text().splitlines()]
        bodies = {" ".join(json.loads(line)["text"].split()) for line in (data / "corpus.jsonl").open()}
        assert views and all(len(v) == 3 and v[1] in bodies and v[2] in bodies and v[1] != v[2] for v in views)
    served = json.loads((out / "encoder.json").read_text())["pooling"]
    assert served == meta["served"] == ("cls" if recipe == "sgopt" and meta["adapted"] else "mean")
    root = tmp_path / "root"
    built = indexer_cli("build", "--data", str(data), "--model", str(out), "--root", str(root), "--threads", "1")
    assert built.returncode == 0, built.stderr[-2000:]
    assert (root / "current").exists()


def test_the_gate_keeps_stock_when_dev_drops(tiny_bert: Path, tmp_path: Path) -> None:
    """A learning rate that wrecks the encoder: every trained checkpoint is below step 0 on dev, so the stock
    encoder is written — the same vectors as exporting the checkpoint directly — and the manifest says why."""
    from indexer.runtime.encoder import OnnxEncoder
    from models.export import export_encoder

    data = beir_folder(tmp_path / "beir", queries_are_documents=True)
    cfg = config(tmp_path, tiny_bert, data, queries=data, lr=0.5, recipe="simcse")
    adapt_corpus(cfg)
    meta = adaptation(cfg.out)
    curve = json.loads((cfg.work / "adaptation.json").read_text())["curve"]
    assert max(c["dev"] for c in curve[1:]) < curve[0]["dev"]  # the constructed drop
    assert meta["adapted"] is False and meta["verified"] is False and meta["best_step"] == 0
    assert "stock encoder is exported" in str(meta["note"])
    stock = export_encoder(tiny_bert, tmp_path / "stock", pooling="mean")
    texts = ["how do i learn python quickly", "the dog runs on the grass"]
    got = OnnxEncoder(cfg.out).encode(texts)
    want = OnnxEncoder(tmp_path / "stock").encode(texts)
    assert stock.dim == got.shape[1] and np.allclose(got, want, atol=1e-6)


@pytest.mark.parametrize("lr", [1e-3, 0.5])
def test_sgopt_is_gated_against_what_stock_serves_its_token_mean(lr: float, tiny_bert: Path, tmp_path: Path) -> None:
    """SG-OPT trains and serves [CLS]; its step 0 is the stock [CLS], which the stock encoder does not serve. The
    gate's reference is the stock token mean scored on the same dev set: the adapted [CLS] is written only above
    it, else the stock encoder (token mean) is written. lr 0.5 wrecks the encoder, so that run must keep stock."""
    from indexer.runtime.encoder import OnnxEncoder
    from models.corpus_data import crop_proxy, dev_set, read_corpus, split_docs, words_window
    from models.export import export_encoder
    from models.sentence_model import SentenceModel

    data = beir_folder(tmp_path / "beir")
    cfg = config(tmp_path, tiny_bert, data, queries=data, recipe="sgopt", lr=lr)
    adapt_corpus(cfg)
    meta = adaptation(cfg.out)
    docs = read_corpus(cfg.data)
    proxy = crop_proxy(docs, split_docs(len(docs), cfg.proxy_docs, cfg.max_docs), words_window(cfg.max_length))
    dev = dev_set(cfg.data, docs, proxy, cfg.dev_files())
    stock = SentenceModel.from_checkpoint(str(tiny_bert), pooler="avg_last", max_length=cfg.max_length).eval()
    stock_mean = dev.score(lambda texts: stock.encode(texts, mode="mean"))
    assert meta["stock_score"] == pytest.approx(stock_mean, abs=1e-3)
    curve = json.loads((cfg.work / "adaptation.json").read_text())["curve"]
    best = max(curve, key=lambda c: c["dev"])
    assert meta["best_score"] == pytest.approx(best["dev"], abs=1e-3)
    gate = meta["gate"]
    assert gate["rule"] == "significant" and gate["items"] == len(dev.query_ids)
    assert meta["adapted"] is (meta["best_step"] > 0 and gate["ci"][0] > 0)
    if meta["best_step"] > 0:  # the gate's gain is the selected [CLS] against the stock token mean, query by query
        assert gate["delta"] == pytest.approx(meta["best_score"] - meta["stock_score"], abs=1e-3)
    if lr == 0.5:
        assert meta["adapted"] is False
    texts = ["how do i learn python quickly", "the dog runs on the grass"]
    got = OnnxEncoder(cfg.out).encode(texts)
    if meta["adapted"]:  # the best checkpoint's [CLS], its projection head left out
        best_ckpt = SentenceModel.from_checkpoint(str(cfg.work / "train" / "best"), max_length=64).eval()
        assert np.allclose(got, best_ckpt.encode(texts, mode="cls"), atol=1e-4)
    else:
        export_encoder(tiny_bert, tmp_path / "stock", pooling="mean")
        assert np.allclose(got, OnnxEncoder(tmp_path / "stock").encode(texts), atol=1e-6)
        assert "token mean" in str(meta["note"])


def test_the_significant_gate_needs_a_paired_interval_above_zero() -> None:
    """One query up by 10 points among 99 unchanged: a mean gain, but a bootstrap interval that touches 0 — the
    `better` rule adapts, `significant` does not; a broad gain of 1–3 points on every query passes both."""
    from models.corpus_adapt import decide

    stock = np.full(100, 50.0)
    lucky = stock.copy()
    lucky[7] += 10
    one = decide("significant", stock, lucky, 2000)
    assert one["delta"] == pytest.approx(0.1) and one["ci"][0] == 0 and one["adapted"] is False
    assert decide("better", stock, lucky, 2000)["adapted"] is True
    broad = stock + np.random.default_rng(0).uniform(1, 3, 100)
    assert decide("significant", stock, broad, 2000)["adapted"] is True
    assert decide("significant", stock, stock, 2000) == {**one, "adapted": False, "delta": 0.0, "ci": [0.0, 0.0]}
    assert decide("better", stock, stock - 1, 2000)["adapted"] is False
    with pytest.raises(AdaptInputError, match="unknown gate"):
        decide("lenient", stock, lucky, 2000)


def test_another_gate_rule_re_decides_without_training_again(tiny_bert: Path, tmp_path: Path) -> None:
    """The gate is the last stage before export: a second run over the same work folder with the other rule reuses
    the training (one `start` in the log) and decides from the same paired figures."""
    data = beir_folder(tmp_path / "beir")
    first = config(tmp_path, tiny_bert, data, queries=data, gate="better", lr=2e-3)
    adapt_corpus(first)
    before = adaptation(first.out)
    adapt_corpus(config(tmp_path, tiny_bert, data, queries=data, gate="significant", lr=2e-3))
    after = adaptation(first.out)
    log = [json.loads(line) for line in (first.work / "train" / "log.jsonl").read_text().splitlines()]
    assert sum(row.get("event") == "start" for row in log) == 1
    assert before["gate"]["rule"] == "better" and after["gate"]["rule"] == "significant"
    assert before["gate"]["delta"] == after["gate"]["delta"] and before["gate"]["ci"] == after["gate"]["ci"]
    assert before["adapted"] is (before["gate"]["delta"] > 0 and before["best_step"] > 0)
    assert after["adapted"] is (after["gate"]["ci"][0] > 0 and after["best_step"] > 0)


def test_without_dev_queries_the_proxy_selects_and_the_result_is_unverified(tiny_bert: Path, tmp_path: Path) -> None:
    data = beir_folder(tmp_path / "beir", titles=False)  # no titles: two independent crops per document
    cfg = config(tmp_path, tiny_bert, data)
    adapt_corpus(cfg)
    meta = adaptation(cfg.out)
    assert meta["verified"] is False and "proxy" in str(meta["selected_on"])
    if meta["adapted"]:
        assert "unverified" in str(meta["note"])
    curve = json.loads((cfg.work / "adaptation.json").read_text())["curve"]
    assert "proxy_acc" in curve[0] and "dev_ndcg10" not in curve[0]
    views = [json.loads(line) for line in (cfg.work / "views.jsonl").read_text().splitlines()]
    texts = {" ".join(json.loads(line)["text"].split()) for line in (data / "corpus.jsonl").open()}
    # crops: contiguous spans of 5+ words of one document, not whole documents
    assert all(5 <= len(v[0].split()) <= 10 and any(v[0] in t for t in texts) for v in views)


def test_ready_shows_an_unverified_adaptation(tiny_bert: Path, tmp_path: Path) -> None:
    """The service reads the mark from the served encoder's encoder.json (it imports nothing from models)."""
    import httpx

    from tests.conftest import start_server, stop_server

    data = beir_folder(tmp_path / "beir")
    cfg = config(tmp_path, tiny_bert, data, steps=4, eval_every=2)
    adapt_corpus(cfg)
    root = tmp_path / "root"
    assert indexer_cli("build", "--data", str(data), "--model", str(cfg.out), "--root", str(root),
                       "--threads", "1").returncode == 0
    server = start_server(tmp_path, {"STRATA_INDEX_ROOT": str(root)})
    try:
        body = httpx.get(f"{server.url}/ready", timeout=30).json()
    finally:
        stop_server(server)
    assert body["ready"] and body["adaptation"]["verified"] is False
    assert body["adaptation"]["recipe"] == "crops" and "proxy" in body["adaptation"]["selected_on"]
    gate = adaptation(cfg.out)["gate"]  # the gate's rule, gain and interval, flattened
    assert body["adaptation"]["gate"] == gate["rule"] == "significant"
    assert body["adaptation"]["gain"] == gate["delta"] and body["adaptation"]["gain_ci"] == gate["ci"]
    assert body["adaptation"]["served"] == "mean"


def test_an_interrupted_run_resumes_from_its_checkpoint(tiny_bert: Path, tmp_path: Path) -> None:
    data = beir_folder(tmp_path / "beir")
    out, work = tmp_path / "adapted", tmp_path / "work"
    args = ("adapt", "--data", str(data), "--out", str(out), "--work", str(work), "--checkpoint", str(tiny_bert),
            "--steps", "400", "--batch-size", "8", "--max-length", "32", "--eval-every", "20", "--quantize", "none",
            "--threads", "1", "--no-progress")
    child_log = tmp_path / "interrupted.stderr"
    with open(child_log, "wb") as err:
        # SIGINT's default action restored in the child, as a shell starts it: a pytest-xdist worker ignores
        # SIGINT, and an ignored SIGINT is inherited (the child's Python then installs no KeyboardInterrupt)
        proc = subprocess.Popen([sys.executable, "-m", "models.cli", *args], cwd=REPO, stdout=subprocess.DEVNULL,
                                stderr=err, env=os.environ | {"PYTHONPATH": str(REPO)},
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    state = work / "train" / "last" / "trainer_state.pt"
    t0 = time.monotonic()
    while not state.is_file() and proc.poll() is None and time.monotonic() < t0 + 240:
        time.sleep(0.05)
    seen = (f"checkpoint seen after {time.monotonic() - t0:.1f} s" if state.is_file()
            else f"no checkpoint seen in {time.monotonic() - t0:.1f} s")
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    assert proc.returncode != 0 and not out.exists(), \
        f"the run was not interrupted ({seen}, exit {proc.returncode}):\n{child_log.read_text()[-3000:]}"
    status = json.loads((work / "status.json").read_text())
    assert status["stage"] == "failed"
    import torch

    stopped_at = torch.load(state, weights_only=False)["step"]
    assert 0 < stopped_at < 400
    r = encoder_cli(*args)
    assert r.returncode == 0, r.stderr[-2000:]
    log = [json.loads(line) for line in (work / "train" / "log.jsonl").read_text().splitlines()]
    assert sum(row.get("event") == "start" for row in log) == 1  # not restarted from step 0
    assert f"resumed from {work / 'train' / 'last'} at step {stopped_at}" in r.stderr
    assert json.loads((work / "status.json").read_text())["stage"] == "done" and (out / "encoder.json").is_file()


def encoder_in_process(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """`models.cli.main(argv)` here: its exit status and stderr. The command configures the root logger on the
    stream capsys hands it: restored after, or later logs would hit a closed stream."""
    import logging

    from models.cli import main

    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    capsys.readouterr()
    try:
        rc = main(argv)
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    return rc, capsys.readouterr().err


def test_bad_input_names_the_file_and_line(tiny_bert: Path, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    data = beir_folder(tmp_path / "beir")
    lines = (data / "corpus.jsonl").read_text().splitlines()
    lines[4] = '{"_id": "d4", "text": '  # a broken JSON line
    (data / "corpus.jsonl").write_text("\n".join(lines) + "\n")
    # the command as a user runs it (a process of its own: exit status, stderr)
    r = encoder_cli("adapt", "--data", str(data), "--out", str(tmp_path / "o"), "--checkpoint", str(tiny_bert),
                    "--no-progress")
    assert r.returncode != 0 and f"{data / 'corpus.jsonl'}:5" in r.stderr and "Traceback" not in r.stderr

    # the other bad inputs through the same entry point in this process (torch is loaded already: seconds less
    # each); an exception escaping the command would fail the test here
    good = beir_folder(tmp_path / "beir2")
    with open(good / "qrels" / "dev.tsv", "a") as f:
        f.write("q1\td1\tvery\n")
    rc, err = encoder_in_process(["adapt", "--data", str(good), "--out", str(tmp_path / "o"), "--checkpoint",
                                  str(tiny_bert), "--queries", str(good), "--max-length", "32", "--no-progress"],
                                 capsys)
    assert rc != 0 and f"{good / 'qrels' / 'dev.tsv'}:{N_DOCS + 2}" in err
    assert "Traceback" not in err

    with pytest.raises(AdaptInputError, match="no query with a relevant document"):
        (good / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\nq1\tnot-a-doc\t1\n")
        adapt_corpus(config(tmp_path / "x", tiny_bert, good, queries=good))
    rc, err = encoder_in_process(["adapt", "--recipe", "crops", "--out", str(tmp_path / "o")], capsys)
    assert rc != 0 and "needs --data CORPUS" in err and "Traceback" not in err
