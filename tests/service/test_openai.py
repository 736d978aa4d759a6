"""The OpenAI-compatible routes with OpenAI's own Python client, against a real uvicorn server on 127.0.0.1 (the
real encoder and FAISS index): the vectors are `/encode`'s, errors are the client's typed exceptions, and the
keys, body cap, in-flight cap and metrics are the rest of the API's."""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from tokenizers import Tokenizer

from service.schemas.common import MAX_TEXTS
from tests.conftest import Server, start_server, stop_server

openai = pytest.importorskip("openai")

KEY = "openai-user-key-0123456789"
ALIAS = "text-embedding-3-small"
TEXTS = ["How can I be a good geologist?", "hello world", "What is the step by step guide to invest in share market?"]
HEAVY = ["z " * 900] * 2  # ~256 tokens each: keeps a worker busy long enough for a second request to find it full


@pytest.fixture(scope="module")
def v1(tmp_path_factory: pytest.TempPathFactory, quora_root: Path) -> Iterator[Server]:
    srv = start_server(tmp_path_factory.mktemp("openai"),
                       {"STRATA_INDEX_ROOT": str(quora_root), "STRATA_API_KEYS": KEY,
                        "STRATA_MODEL_ALIASES": f'["{ALIAS}"]', "STRATA_MAX_BODY_BYTES": "16384",
                        "STRATA_MAX_IN_FLIGHT": "1", "STRATA_WORKERS": "1"},
                       wait_ready=False)  # /ready needs a key here
    yield srv
    stop_server(srv)


@pytest.fixture(scope="module")
def model(minilm_mean: Path) -> str:
    return minilm_mean.name  # the encoder folder's name: an alias of the served id, and the answers' `model`


SERVED_ID = "strata-384"  # STRATA_MODEL_NAME's default: strata-<dim>


def client(server: Server, key: str = KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=key, max_retries=0, timeout=30)


def http(server: Server) -> httpx.Client:
    return httpx.Client(base_url=server.url, timeout=30, headers={"Authorization": f"Bearer {KEY}"})


def encode(server: Server, texts: list[str]) -> np.ndarray:
    with http(server) as c:
        r = c.post("/encode", json={"texts": texts})
    assert r.status_code == 200, r.text
    return np.asarray(r.json()["vectors"], dtype=np.float32)


def test_float_and_base64_vectors_are_the_encode_vectors(v1: Server, model: str) -> None:
    want = encode(v1, TEXTS)
    oa = client(v1)
    floats = oa.embeddings.create(input=TEXTS, model=model, encoding_format="float")
    default = oa.embeddings.create(input=TEXTS, model=model)  # the client asks for base64 and decodes it
    b64 = oa.embeddings.create(input=TEXTS, model=model, encoding_format="base64")  # handed over as strings
    for answer in (floats, default, b64):
        assert answer.object == "list" and answer.model == model
        assert [d.index for d in answer.data] == [0, 1, 2] and {d.object for d in answer.data} == {"embedding"}
    for answer in (floats, default):
        got = np.asarray([d.embedding for d in answer.data], dtype=np.float32)
        np.testing.assert_array_equal(got, want)  # bit for bit: float32 through JSON and through base64
    # what is on the wire: each vector's little-endian float32 bytes, base64-encoded
    wire = np.stack([np.frombuffer(base64.b64decode(d.embedding), dtype="<f4") for d in b64.data])
    np.testing.assert_array_equal(wire, want)


def test_a_string_input_and_the_order_of_a_list(v1: Server, model: str) -> None:
    oa = client(v1)
    one = oa.embeddings.create(input=TEXTS[1], model=model, encoding_format="float")
    assert len(one.data) == 1 and len(one.data[0].embedding) == 384
    forward = oa.embeddings.create(input=TEXTS, model=model, encoding_format="float")
    backward = oa.embeddings.create(input=TEXTS[::-1], model=model, encoding_format="float")
    fwd = np.asarray([d.embedding for d in forward.data])
    bwd = np.asarray([d.embedding for d in backward.data])
    np.testing.assert_allclose(fwd, bwd[::-1], atol=1e-5)  # same texts, reversed: rows reversed
    np.testing.assert_allclose(fwd[1], one.data[0].embedding, atol=1e-5)
    assert not np.allclose(fwd[0], fwd[1], atol=1e-2)  # the rows really differ


def test_usage_counts_the_tokens_the_encoder_ran(v1: Server, model: str, minilm_mean: Path) -> None:
    long_text = ("word " * 399).strip()  # over max_length (256): truncated, so 256 tokens are run
    texts = [*TEXTS, long_text]
    tokenizer = Tokenizer.from_file(str(minilm_mean / "tokenizer.json"))
    tokenizer.enable_truncation(max_length=256)
    tokenizer.no_padding()  # the saved tokenizer pads to 256; the encoder pads per batch itself
    want = sum(len(e.ids) for e in tokenizer.encode_batch(texts))  # [CLS] and [SEP] included
    answer = client(v1).embeddings.create(input=texts, model=model)
    assert answer.usage.prompt_tokens == answer.usage.total_tokens == want
    assert client(v1).embeddings.create(input="hello world", model=model).usage.prompt_tokens == 4  # CLS, 2, SEP
    assert want - 256 < 60  # the long text counted 256, not ~400


@pytest.mark.parametrize(
    ("kwargs", "param", "reason"),
    [
        ({"input": [101, 7592, 102]}, "input", "token arrays are not supported"),
        ({"input": [[101, 7592, 102], [101, 102]]}, "input", "token arrays are not supported"),
        ({"input": ""}, "input", "must not be empty"),
        ({"input": ["fine", ""]}, "input[1]", "must not be empty"),
        ({"input": ["fine", "\u200b"]}, "input[1]", "must not be empty"),  # what the tokenizer drops: nothing
        ({"input": []}, "input", "at least 1 item"),
        ({"input": ["t"] * (MAX_TEXTS + 1)}, "input", f"at most {MAX_TEXTS} items"),
        ({"input": "ok", "dimensions": 128}, "dimensions", "cannot shorten"),
        ({"input": "ok", "extra_body": {"encoding_format": "int8"}}, "encoding_format", "'float' or 'base64'"),
        ({"input": "ok", "extra_body": {"temperature": 1}}, "temperature", "Extra inputs are not permitted"),
    ],
)
def test_bad_requests_are_typed_400s(v1: Server, model: str, kwargs: dict, param: str, reason: str) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client(v1).embeddings.create(model=model, **kwargs)
    err = caught.value
    assert err.status_code == 400 and err.type == "invalid_request_error" and err.param == param
    assert reason in err.message, err.message
    assert err.request_id  # the server's X-Request-ID, as the client reports it


def test_null_optional_parameters_are_the_defaults() -> None:
    """`"encoding_format": null` (clients that write every optional parameter) was a 400 where `"dimensions": null`
    was accepted; both mean "not given"."""
    from service.schemas.openai import EmbeddingRequest

    body = EmbeddingRequest.model_validate({"model": "m", "input": "x", "encoding_format": None, "dimensions": None,
                                            "user": None})
    assert body.encoding_format == "float" and body.dimensions is None


def test_dimensions_equal_to_the_models_are_accepted(v1: Server, model: str) -> None:
    answer = client(v1).embeddings.create(input="ok", model=model, dimensions=384, encoding_format="float")
    assert len(answer.data[0].embedding) == 384


def test_model_names_aliases_and_model_not_found(v1: Server, model: str) -> None:
    oa = client(v1)
    by_alias = oa.embeddings.create(input="ok", model=ALIAS, encoding_format="float")
    assert by_alias.model == model  # answered by, and named as, the served model
    with pytest.raises(openai.NotFoundError) as caught:
        oa.embeddings.create(input="ok", model="text-embedding-ada-002")
    assert caught.value.code == "model_not_found" and caught.value.param == "model"

    assert caught.value.status_code == 404 and SERVED_ID in caught.value.message

    assert [m.id for m in oa.models.list().data] == [SERVED_ID]
    card = oa.models.retrieve(SERVED_ID)
    assert card.id == SERVED_ID and card.object == "model" and card.owned_by == "strata" and card.created > 1.6e9
    assert oa.models.retrieve(ALIAS).id == SERVED_ID and oa.models.retrieve(model).id == SERVED_ID
    assert oa.embeddings.create(input="ok", model=SERVED_ID).model == model
    with pytest.raises(openai.NotFoundError):
        oa.models.retrieve("gpt-4o")


def test_api_keys_in_openai_shape_and_the_rest_of_the_api_unchanged(v1: Server, model: str) -> None:
    with pytest.raises(openai.AuthenticationError) as caught:
        client(v1, key="wrong-key-000000").embeddings.create(input="ok", model=model)
    assert caught.value.status_code == 401 and caught.value.code == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        client(v1, key="wrong-key-000000").models.list()
    with httpx.Client(base_url=v1.url) as c:
        missing = c.post("/v1/embeddings", json={"input": "ok", "model": model})
        plain = c.post("/encode", json={"texts": ["ok"]})
        unknown = c.get("/v1/files", headers={"Authorization": f"Bearer {KEY}"})
    assert missing.status_code == 401 and missing.headers["WWW-Authenticate"] == "Bearer"
    assert "missing API key" in missing.json()["error"]["message"]
    assert plain.status_code == 401 and "missing API key" in plain.json()["detail"]  # {"detail"} outside /v1
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "unknown_url"


def test_body_cap_is_a_413_in_openai_shape(v1: Server, model: str) -> None:
    with http(v1) as c:
        big = c.post("/v1/embeddings", json={"input": ["x" * 1900] * 10, "model": model})
        plain = c.post("/encode", json={"texts": ["x" * 1900] * 10})
    assert big.status_code == 413 and big.json()["error"]["code"] == "request_too_large"
    assert "the limit is 16384" in big.json()["error"]["message"]
    assert plain.status_code == 413 and "the limit is 16384" in plain.json()["detail"]
    with pytest.raises(openai.APIStatusError) as caught:
        client(v1).embeddings.create(input=["x" * 1900] * 10, model=model)
    assert caught.value.status_code == 413


def test_in_flight_cap_is_a_rate_limit_error(v1: Server, model: str) -> None:
    outcomes: list[object] = []

    def call() -> None:
        try:
            outcomes.append(client(v1).embeddings.create(input=HEAVY, model=model))
        except openai.RateLimitError as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=call) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    limited = [o for o in outcomes if isinstance(o, openai.RateLimitError)]
    assert len(outcomes) == 6 and limited and len(limited) < 6, outcomes
    assert limited[0].code == "rate_limit_exceeded" and limited[0].response.headers["Retry-After"] == "1"


def test_metrics_count_the_openai_route(v1: Server, model: str) -> None:
    client(v1).embeddings.create(input=TEXTS, model=model)
    with http(v1) as c:
        text = c.get("/metrics").text
    assert 'strata_requests_total{endpoint="/v1/embeddings",method="POST",status="200"}' in text
    assert 'strata_requests_total{endpoint="/v1/embeddings",method="POST",status="400"}' in text
    assert 'strata_texts_encoded_total{endpoint="/v1/embeddings"}' in text
    assert 'strata_encode_seconds_count{endpoint="/v1/embeddings"}' in text


def test_not_ready_is_a_503_in_openai_shape(tmp_path: Path) -> None:
    srv = start_server(tmp_path, {"STRATA_INDEX_ROOT": str(tmp_path / "empty-root")})
    try:
        with pytest.raises(openai.InternalServerError) as caught:
            client(srv).embeddings.create(input="ok", model="any")
    finally:
        stop_server(srv)
    assert caught.value.status_code == 503 and caught.value.type == "server_error"
    assert caught.value.code == "not_ready" and "no current index" in caught.value.message
