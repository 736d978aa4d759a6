"""Stable model names across swaps, with OpenAI's own client against a real uvicorn server on 127.0.0.1: a served
root is swapped from one tiny random BERT to another (same dimension), then to a third of another dimension, by
real `indexer build` runs that the API's watcher picks up."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from indexer.runtime.layout import IndexRoot
from tests.conftest import REPO, Server, start_server, stop_server
from tests.conftest import write_quora_like as quora_like

openai = pytest.importorskip("openai")
TEXTS = ["how can i learn python quickly", "what is the best way to invest money"]


def build(root: Path, model: Path, data: Path) -> str:
    r = subprocess.run([sys.executable, "-m", "indexer.cli", "build", "--root", str(root), "--model", str(model),
                        "--data", str(data), "--rows", "60", "--threads", "1", "--keep", "10"],
                       cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    version = IndexRoot(root).current_version()
    assert version is not None
    return version


def wait_for_version(server: Server, version: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if httpx.get(f"{server.url}/ready", timeout=30).json().get("index_version") == version:
            return
        time.sleep(0.2)
    pytest.fail(f"the server did not swap to {version}: {httpx.get(f'{server.url}/ready', timeout=30).text}")


@pytest.fixture(scope="module")
def encoders(tiny_exported: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Three tiny random BERTs: the fixture's (32-dim), another 32-dim one (another seed), and a 48-dim one."""
    from models.export import export_encoder
    from tests.tiny_bert import make_tiny_bert

    tmp = tmp_path_factory.mktemp("encoders")
    out = {"first": tiny_exported}
    for name, hidden, seed in (("second", 32, 1), ("wider", 48, 2)):
        export_encoder(make_tiny_bert(tmp / f"ckpt-{name}", hidden=hidden, seed=seed), tmp / f"tiny-{name}",
                       pooling="cls")
        out[name] = tmp / f"tiny-{name}"
    return out


@pytest.fixture(scope="module")
def swapped(encoders: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[tuple[Server, Path, Path]]:
    tmp = tmp_path_factory.mktemp("names")
    data = quora_like(tmp / "quora.tsv.gz")
    root = tmp / "root"
    build(root, encoders["first"], data)
    # the random encoders' MRR@10 differ by chance: the quality gate is not what this test is about
    server = start_server(tmp, {"STRATA_INDEX_ROOT": str(root), "STRATA_WATCH_INTERVAL_S": "0.2",
                                "STRATA_MAX_MRR_DROP": "1"})
    yield server, root, data
    stop_server(server)


def client(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=30)


def vectors(answer: object) -> np.ndarray:
    return np.asarray([d.embedding for d in answer.data], dtype=np.float32)  # type: ignore[attr-defined]


def test_the_first_model_id_survives_swaps_until_the_dimension_changes(
        swapped: tuple[Server, Path, Path], encoders: dict[str, Path]) -> None:
    server, root, data = swapped
    oa = client(server)
    first_id = oa.models.list().data[0].id
    assert [m.id for m in oa.models.list().data] == [first_id] == ["strata-32"]
    before = oa.embeddings.create(input=TEXTS, model=first_id, encoding_format="float")
    assert before.model == encoders["first"].name and len(before.data[0].embedding) == 32
    by_folder = oa.embeddings.create(input=TEXTS, model=encoders["first"].name, encoding_format="float")
    np.testing.assert_array_equal(vectors(by_folder), vectors(before))  # the folder's name is an alias
    first_version = IndexRoot(root).current_version()

    # a swap to another encoder of the same dimension: the listed id and the old names keep answering
    wait_for_version(server, build(root, encoders["second"], data))
    assert [m.id for m in oa.models.list().data] == [first_id]
    after = oa.embeddings.create(input=TEXTS, model=first_id, encoding_format="float")
    assert after.model == encoders["second"].name  # the answer names the encoder that made the vectors
    assert not np.allclose(vectors(after), vectors(before))
    old_name = oa.embeddings.create(input=TEXTS, model=encoders["first"].name, encoding_format="float")
    assert old_name.model == encoders["second"].name  # its version is still in the root: a rollback can serve it
    assert oa.models.retrieve(encoders["first"].name).id == first_id
    with pytest.raises(openai.NotFoundError) as caught:
        oa.embeddings.create(input="ok", model="text-embedding-ada-002")
    assert caught.value.code == "model_not_found" and first_id in caught.value.message

    # a swap to another dimension: the old ids answer 410 naming the new id and dimension
    wait_for_version(server, build(root, encoders["wider"], data))
    assert [m.id for m in oa.models.list().data] == ["strata-48"]
    for gone in (first_id, encoders["first"].name, encoders["second"].name):
        with pytest.raises(openai.APIStatusError) as refused:
            oa.embeddings.create(input="ok", model=gone)
        err = refused.value
        assert err.status_code == 410 and err.code == "model_dimension_changed" and err.param == "model"
        assert "made 32-dimensional vectors" in err.message and "`strata-48` (48-dimensional" in err.message
    wide = oa.embeddings.create(input=TEXTS, model="strata-48", encoding_format="float")
    assert wide.model == encoders["wider"].name and len(wide.data[0].embedding) == 48
    assert oa.embeddings.create(input="ok", model=encoders["wider"].name).model == encoders["wider"].name

    # once the first encoder's version is gone from the root, nothing can serve it again: its name is unknown
    shutil.rmtree(IndexRoot(root).version_dir(first_version))
    with pytest.raises(openai.APIStatusError) as caught:
        oa.embeddings.create(input="ok", model=encoders["first"].name)
    assert caught.value.status_code == 404
    with pytest.raises(openai.APIStatusError) as still_gone:  # the second's version remains: still told why
        oa.embeddings.create(input="ok", model=first_id)
    assert still_gone.value.status_code == 410
