"""Static int8 (the export default): a text's vector and its hits do not depend on the batch it is encoded in —
alone, in mixed-length padded batches, through parallel row-sliced runs, and under concurrent `/search` load. The
same checks run on the dynamic int8 graph (the former default) and must catch it: they can fail."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import httpx
import numpy as np
import pytest

pytest.importorskip("onnxruntime.quantization")

from indexer.runtime.atomic import sha256_file, write_json_atomic  # noqa: E402
from indexer.runtime.encoder import ENCODER_META, ENCODER_ONNX, EncoderMeta, OnnxEncoder  # noqa: E402
from models.quantize import (  # noqa: E402
    DETERMINISM_TOL,
    QUANTIZATION,
    batch_invariance,
    calibration_texts,
    quantize_dynamic_onnx,
    quantize_static_onnx,
)
from tests.conftest import start_server, stop_server  # noqa: E402

# Short and long, so that every batch pads someone; the last is truncated at max_length (256 tokens).
TEXTS = [
    "hi",
    "How can I be a good geologist?",
    "What is the step by step guide to invest in share market in india?",
    "Why is the sky blue?",
    "How do I learn Python quickly, and which book or course would you recommend to a complete beginner who "
    "already knows some JavaScript and wants to build web applications and data pipelines?",
    "What is love?",
    "Which is the best smartphone under 15000 rupees with a good camera and a long battery life?",
    "How can I lose weight fast without going to the gym?",
    "What are the most interesting facts about the history of the Roman empire that few people know?",
    "Is it safe to eat raw eggs?",
    "What is the meaning of life",
    " ".join(["Why do cats purr when they are happy and also when they are hurt or frightened?"] * 20),
]


def _quantized(fp32: Path, dst: Path, how: str) -> Path:
    shutil.copytree(fp32, dst, ignore=shutil.ignore_patterns(ENCODER_ONNX))
    if how == "static":
        quantize_static_onnx(fp32, dst / ENCODER_ONNX, calibration_texts(128))
        label = QUANTIZATION
    else:
        quantize_dynamic_onnx(fp32 / ENCODER_ONNX, dst / ENCODER_ONNX)
        label = "int8-dynamic-per-channel"
    meta = EncoderMeta.model_validate_json((fp32 / ENCODER_META).read_text())
    meta = meta.model_copy(update={"onnx_sha256": sha256_file(dst / ENCODER_ONNX), "quantization": label})
    write_json_atomic(dst / ENCODER_META, meta.model_dump(mode="json"))
    return dst


@pytest.fixture(scope="module")
def int8_models(minilm_mean: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """all-MiniLM-L6-v2 (mean) quantized both ways from the same fp32 export."""
    base = tmp_path_factory.mktemp("int8")
    return {how: _quantized(minilm_mean, base / how, how) for how in ("static", "dynamic")}


def test_bias_fusion_changes_the_graph_not_the_vectors(minilm_mean: Path, int8_models: dict[str, Path],
                                                       tmp_path: Path) -> None:
    """The exported graph writes each quantized MatMul and its bias Add as one MatMulIntegerToFloat; the plain
    QDQ graph `quantize_static` writes (which ONNX Runtime fuses without the bias) gives the same vectors."""
    import onnx

    from models.quantize import StaticScheme

    plain = tmp_path / "plain"
    shutil.copytree(int8_models["static"], plain)
    quantize_static_onnx(minilm_mean, plain / ENCODER_ONNX, calibration_texts(128), StaticScheme(fuse_bias=False))
    ops = [n.op_type for n in onnx.load(str(int8_models["static"] / ENCODER_ONNX)).graph.node]
    plain_ops = [n.op_type for n in onnx.load(str(plain / ENCODER_ONNX)).graph.node]
    assert ops.count("MatMulIntegerToFloat") == 36 and "DequantizeLinear" not in ops and ops.count("MatMul") == 12
    assert plain_ops.count("DequantizeLinear") == 60 and "MatMulIntegerToFloat" not in plain_ops
    assert plain_ops.count("Add") - ops.count("Add") == 36  # every bias went into its MatMul
    fused = OnnxEncoder(int8_models["static"], threads=1).encode_with_flags(TEXTS)[0]
    unfused = OnnxEncoder(plain, threads=1).encode_with_flags(TEXTS)[0]
    assert float(np.abs(fused - unfused).max()) <= DETERMINISM_TOL


def _alone(enc: OnnxEncoder, texts: list[str]) -> np.ndarray:
    return np.concatenate([enc.encode_with_flags([t])[0] for t in texts])


def _batched_variants(enc: OnnxEncoder, texts: list[str]) -> dict[str, np.ndarray]:
    """The same texts through every path that puts them in a batch, each back in input order."""
    rng = np.random.default_rng(0)
    out = {}
    for size in (2, 5, len(texts)):
        perm = rng.permutation(len(texts))
        got, _ = enc.encode_with_flags([texts[i] for i in perm], batch_size=size, group_by_length=False)
        back = np.empty_like(got)
        back[perm] = got
        out[f"padded batches of {size}"] = back
    out["length-grouped micro-batch"] = enc.encode_with_flags(texts, batch_size=len(texts))[0]
    out["corpus path (pool)"] = enc.encode(texts, batch_size=4)
    twice = enc.encode_with_flags(texts + texts[::-1], batch_size=64, group_by_length=False)[0]
    out["each text twice in one batch"] = twice[: len(texts)]
    return out


def test_static_int8_vectors_do_not_depend_on_the_batch(int8_models: dict[str, Path]) -> None:
    enc = OnnxEncoder(int8_models["static"], threads=2)  # 2 threads: row slices run in parallel 1-thread runs
    assert enc.parallel
    alone = _alone(enc, TEXTS)
    for name, got in _batched_variants(enc, TEXTS).items():
        diff = float(np.abs(got - alone).max())
        assert diff <= DETERMINISM_TOL, f"{name}: a vector moved by {diff:.3g}"
    one_thread = OnnxEncoder(int8_models["static"], threads=1)  # no pool: one run on the calling thread
    assert float(np.abs(one_thread.encode_with_flags(TEXTS, group_by_length=False)[0] - alone).max()) <= DETERMINISM_TOL
    enc.close()


def test_the_same_check_catches_dynamic_int8(int8_models: dict[str, Path]) -> None:
    enc = OnnxEncoder(int8_models["dynamic"], threads=2)
    alone = _alone(enc, TEXTS)
    worst = max(float(np.abs(got - alone).max()) for got in _batched_variants(enc, TEXTS).values())
    assert worst > 1e-3, "dynamic int8 should move with its batch; if it does not, the check proves nothing"
    enc.close()


@pytest.mark.parametrize("how", ["static", "dynamic"])
def test_padding_positions_are_masked_out(how: str, int8_models: dict[str, Path]) -> None:
    """Padding a text by hand up to max_length (attention mask 0) leaves its static-int8 vector unchanged: padded
    positions reach no calibrated scale that could move the real ones. Dynamic int8 takes its scales from the
    padded tensor too, and moves."""
    enc = OnnxEncoder(int8_models[how], threads=1)
    worst = 0.0
    for text in TEXTS[:4]:
        batch = enc.tokenize([text])
        n, width = batch.input_ids.shape[1], enc.meta.max_length
        ids = np.full((1, width), enc.pad_id, dtype=np.int64)
        mask = np.zeros((1, width), dtype=np.int64)
        ids[0, :n], mask[0, :n] = batch.input_ids[0], 1
        padded = enc.session.run(None, {"input_ids": ids, "attention_mask": mask})[0]
        unpadded = enc.session.run(None, {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask})[0]
        worst = max(worst, float(np.abs(padded - unpadded).max()))
    if how == "static":
        assert worst <= DETERMINISM_TOL
    else:
        assert worst > 1e-3


def test_batch_invariance_figure_separates_the_two(int8_models: dict[str, Path]) -> None:
    """The figure `encoder export` records (and refuses on) is small for static int8 and large for dynamic."""
    static = batch_invariance(int8_models["static"], TEXTS, threads=2)
    dynamic = batch_invariance(int8_models["dynamic"], TEXTS, threads=2)
    assert static["texts"] == len(TEXTS) and static["max_abs_diff"] <= DETERMINISM_TOL
    assert static["min_cosine"] > 0.999999
    assert dynamic["max_abs_diff"] > 1e-3 and dynamic["min_cosine"] < 0.9999


@pytest.fixture(scope="module")
def int8_roots(int8_models: dict[str, Path], quora_file: Path, tmp_path_factory: pytest.TempPathFactory
               ) -> dict[str, Path]:
    """A 1,000-row Quora index built with each int8 model (the service serves an index with its own encoder)."""
    from indexer.build import BuildConfig, build

    roots = {}
    for how, model in int8_models.items():
        root = tmp_path_factory.mktemp(f"int8-index-{how}")
        build(BuildConfig(model_dir=model, data=str(quora_file), root=root, rows=1000, threads=2,
                          default_mode="dense"))  # the encoder's determinism, seen in cosine scores
        roots[how] = root
    return roots


async def _load(url: str, texts: list[str], repeats: int) -> tuple[list[httpx.Response], list[httpx.Response]]:
    """Every text `repeats` times as /search and as /encode, all at once, in a shuffled order."""
    rng = np.random.default_rng(1)
    order = rng.permutation(len(texts) * repeats) % len(texts)
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        searches = asyncio.gather(*(client.post("/search", json={"query": texts[i], "top_k": 10}) for i in order))
        encodes = asyncio.gather(*(client.post("/encode", json={"texts": [texts[i]]}) for i in order))
        s, e = await asyncio.gather(searches, encodes)
    return [s[j] for j in np.argsort(order, kind="stable")], [e[j] for j in np.argsort(order, kind="stable")]


def _batch_runs(metrics: str) -> tuple[float, float]:
    values = {line.split()[0]: float(line.split()[1]) for line in metrics.splitlines()
              if line.startswith(("strata_batch_texts_count", "strata_batch_texts_sum"))}
    return values["strata_batch_texts_count"], values["strata_batch_texts_sum"]


@pytest.mark.parametrize("how", ["static", "dynamic"])
def test_hits_and_vectors_under_concurrent_load(how: str, int8_roots: dict[str, Path], tmp_path: Path) -> None:
    """Each query alone, then all of them at once (micro-batched with each other): static int8 answers with the
    same hits, scores and vectors; dynamic int8, served the same way, does not — the test can tell them apart."""
    srv = start_server(tmp_path, {"STRATA_INDEX_ROOT": str(int8_roots[how]), "STRATA_WORKERS": "2",
                                  "STRATA_THREADS": "1", "STRATA_MAX_IN_FLIGHT": "1024"})
    repeats = 3
    try:
        with srv.client() as c:
            assert c.get("/ready").json()["ready"]
            alone_hits = [c.post("/search", json={"query": t, "top_k": 10}).json()["hits"] for t in TEXTS]
            alone_vecs = np.array([c.post("/encode", json={"texts": [t]}).json()["vectors"][0] for t in TEXTS])
            before = _batch_runs(c.get("/metrics").text)
            searches, encodes = asyncio.run(_load(srv.url, TEXTS, repeats))
            after = _batch_runs(c.get("/metrics").text)
    finally:
        stop_server(srv)
    runs, texts = after[0] - before[0], after[1] - before[1]
    assert texts == 2 * repeats * len(TEXTS)
    assert runs < texts / 2, f"{int(texts)} concurrent texts took {int(runs)} ONNX runs: hardly batched"
    assert all(r.status_code == 200 for r in searches + encodes)
    loaded_vecs = np.array([r.json()["vectors"][0] for r in encodes])
    vec_diff = float(np.abs(loaded_vecs - np.repeat(alone_vecs, repeats, axis=0)).max())
    same_ids = [[h["id"] for h in r.json()["hits"]] == [h["id"] for h in alone_hits[i // repeats]]
                for i, r in enumerate(searches)]
    score_diff = max(abs(a["score"] - b["score"]) for i, r in enumerate(searches)
                     for a, b in zip(r.json()["hits"], alone_hits[i // repeats], strict=False))
    if how == "static":
        assert vec_diff <= DETERMINISM_TOL, f"a vector moved by {vec_diff:.3g} under load"
        assert all(same_ids), f"{same_ids.count(False)} of {len(same_ids)} result lists changed under load"
        assert score_diff <= DETERMINISM_TOL
    else:
        assert vec_diff > 1e-3, json.dumps({"vec_diff": vec_diff, "score_diff": score_diff})
