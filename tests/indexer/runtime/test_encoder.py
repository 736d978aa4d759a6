"""The ONNX encoder runtime: length-grouped runs, row slices under the token cap, parallel 1-thread runs — each
giving the vectors of one plain padded run."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from indexer.runtime.encoder import OnnxEncoder
from indexer.runtime.layout import IndexRoot
from indexer.runtime.manifest import Manifest

QUERIES = ["How can I be a good geologist?", "What is the step by step guide to invest in share market?",
           "How do I learn Python?", "Why is the sky blue?", "What is the best smartphone under 15000?",
           "How can I lose weight fast?", "What is love?", "How do I get a job at Google?"]


def test_length_groups_cut_runs_that_would_pad_too_much() -> None:
    from indexer.runtime.encoder import length_groups

    lengths = [5, 60, 12, 14, 13, 15, 16, 58, 11]
    groups = length_groups(lengths, 64, slack=1.1, overhead=32)
    flat = np.concatenate(groups)
    assert sorted(flat.tolist()) == list(range(len(lengths)))  # every text exactly once
    assert [sorted(lengths[i] for i in g) for g in groups] == [[5, 11, 12, 13, 14, 15, 16], [58, 60]]
    assert [len(g) for g in length_groups([10] * 130, 64)] == [64, 64, 2]  # batch_size still caps a run
    assert len(length_groups([3, 80], 64, slack=100.0, overhead=0)) == 1  # generous slack: one run


def test_grouped_encoding_equals_one_padded_run(quora_root: Path) -> None:
    """Cutting a micro-batch by length changes the runs, never the vectors or the truncation flags."""

    enc = OnnxEncoder(Manifest.load(IndexRoot(quora_root).current_dir()).model.dir)  # what the service serves
    texts = [*QUERIES, " ".join(["a very long question about geology"] * 80), "hi"]
    grouped, flags_g = enc.encode_with_flags(texts, batch_size=len(texts))
    one, flags_1 = enc.encode_with_flags(texts, batch_size=len(texts), group_by_length=False)
    np.testing.assert_allclose(grouped, one, atol=2e-5)
    assert flags_g == flags_1 and flags_g[-2] and not any(flags_g[:-2])
    # one text (a served query) takes the single-row path: the same vector, flag and token count as its row of
    # a padded run
    long_text = texts[-2]
    for i, text in enumerate(texts):
        alone = enc.encode_counted([text])
        np.testing.assert_allclose(alone.vectors[0], one[i], atol=2e-5)
        assert alone.truncated == [flags_1[i]] and alone.tokens == [len(enc.tokenizer.encode(text).ids)]
    assert enc.encode_counted([long_text]).tokens == [enc.meta.max_length]
    enc.close()


def test_long_batches_run_in_slices_with_the_same_vectors(minilm_mean: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import indexer.runtime.encoder as onnx_encoder

    enc = OnnxEncoder(minilm_mean, threads=1)
    texts = [("word " * n).strip() for n in (3, 40, 90, 120, 7, 60)]
    whole, _ = enc.encode_with_flags(texts, batch_size=6, group_by_length=False)
    calls: list[tuple[int, ...]] = []
    run = enc.session.run
    monkeypatch.setattr(onnx_encoder, "MAX_RUN_TOKENS", 250)  # ~122 tokens × 2 rows per run
    monkeypatch.setattr(enc, "session", type("S", (), {"run": lambda self, o, feeds: calls.append(
        feeds["input_ids"].shape) or run(o, feeds)})())
    sliced, _ = enc.encode_with_flags(texts, batch_size=6, group_by_length=False)
    assert len(calls) == 3 and all(rows * length <= 250 for rows, length in calls)
    assert np.allclose(sliced, whole, atol=1e-5)


def test_runs_cut_by_token_count_pad_less_and_give_the_same_vectors(minilm_mean: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """`encode(by_tokens=True)` (the int8 gate's pass) tokenises once and cuts runs by token count: the same
    vectors in input order, fewer padded tokens than character-sorted runs when characters mislead (digits and
    rare words are many tokens in few characters), and the runs still spread over both run threads."""
    enc = OnnxEncoder(minilm_mean, threads=2)
    texts = [f"{q} ({i})" for i, q in enumerate(QUERIES)] + ["1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20",
                                                          "x y z w v u t s r q p o n m l k j", "hello there",
                                                          "Supercalifragilistic antidisestablishmentarianism"] * 3
    runs: list[tuple[str, tuple[int, int]]] = []
    run = enc.session.run
    monkeypatch.setattr(enc, "session", type("S", (), {"run": lambda self, o, feeds: runs.append(
        (threading.current_thread().name, feeds["input_ids"].shape)) or run(o, feeds)})())
    by_chars = enc.encode(texts, batch_size=4)
    padded_chars = sum(r * n for _, (r, n) in runs)
    runs.clear()
    by_tokens = enc.encode(texts, batch_size=4, by_tokens=True)
    padded_tokens = sum(r * n for _, (r, n) in runs)
    assert sum(r for _, (r, _n) in runs) == len(texts) and all(r <= 4 for _, (r, _n) in runs)
    real = sum(enc.token_counts(texts))
    assert real <= padded_tokens < padded_chars, (real, padded_tokens, padded_chars)
    assert {name for name, _ in runs} == {"onnx-run_0", "onnx-run_1"}
    np.testing.assert_allclose(by_tokens, by_chars, atol=1e-5)
    enc.close()


def test_parallel_runs_use_every_thread_and_give_the_same_vectors(minilm_mean: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """With threads=2 the cores go to two 1-thread runs at once (row slices, or whole corpus batches), not to
    one run's operators; the vectors are those of one run over two intra-op threads."""
    import threading

    from indexer.runtime.onnx_session import SessionSettings

    par = OnnxEncoder(minilm_mean, threads=2)
    one = OnnxEncoder(minilm_mean, session=SessionSettings(threads=2, parallel_runs=False))
    assert par.parallel and not one.parallel
    assert par.session_settings.to_ort().intra_op_num_threads == 1
    assert one.session_settings.to_ort().intra_op_num_threads == 2
    texts = [f"{q} ({i})" for i, q in enumerate(QUERIES * 12)]

    seen: list[tuple[str, int]] = []
    run = par.session.run
    monkeypatch.setattr(par, "session", type("S", (), {"run": lambda self, o, feeds: seen.append(
        (threading.current_thread().name, len(feeds["input_ids"]))) or run(o, feeds)})())
    corpus = par.encode(texts, batch_size=16)
    assert {name for name, _ in seen} == {"onnx-run_0", "onnx-run_1"} and sum(n for _, n in seen) == len(texts)
    np.testing.assert_allclose(corpus, one.encode(texts, batch_size=16), atol=1e-5)

    seen.clear()
    # one padded run of 10 rows -> two slices of 5 at once
    batch, _ = par.encode_with_flags(texts[:10], batch_size=10, group_by_length=False)
    assert sorted(n for _, n in seen) == [5, 5] and all(name.startswith("onnx-run") for name, _ in seen)
    want, _ = one.encode_with_flags(texts[:10], batch_size=10, group_by_length=False)
    np.testing.assert_allclose(batch, want, atol=1e-5)

    seen.clear()
    par.encode_with_flags(texts[:1])  # a single query runs on the caller's thread: no hop to the pool
    assert seen == [(threading.current_thread().name, 1)]
    par.close()

    # GPU first: one run at a time over the intra-op threads, and the recorded settings are the session's
    with pytest.warns(UserWarning, match="CUDAExecutionProvider"):  # not installed here: ORT falls back to CPU
        gpu = OnnxEncoder(minilm_mean, threads=2, providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    assert not gpu.parallel and not gpu.session_settings.parallel_runs
    assert gpu.session_settings.to_ort().intra_op_num_threads == 2


@pytest.mark.parametrize("edit", ["max_length=0", "max_length=-1", "dim=0", "tokenizer"])
def test_a_broken_model_folder_is_an_encoder_load_error(tiny_exported: Path, tmp_path: Path, edit: str) -> None:
    """An encoder.json with a max_length below 2 loaded and then failed on the first long text (0 turned
    truncation off, -1 overflowed in the tokenizer), and an unparsable tokenizer.json raised the tokenizers
    library's bare Exception: the CLIs and the swap catch `EncoderLoadError`, which names the file."""
    import json
    import shutil

    from indexer.runtime.encoder import EncoderLoadError

    folder = tmp_path / "model"
    shutil.copytree(tiny_exported, folder)
    if edit == "tokenizer":
        (folder / "tokenizer.json").write_text("{}")
        expected = "tokenizer.json is not a readable tokenizer.json"
    else:
        key, value = edit.split("=")
        meta = json.loads((folder / "encoder.json").read_text())
        (folder / "encoder.json").write_text(json.dumps({**meta, key: int(value)}))
        expected = f"(?s)encoder.json is not a valid encoder.json.*{key}"
    with pytest.raises(EncoderLoadError, match=expected):
        OnnxEncoder(folder)
