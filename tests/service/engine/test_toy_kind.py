"""A kind added in one place runs the whole index contract: `toy`, a test-only kind over FAISS's `IndexFlatIP` in
an `IndexIDMap2`, is declared by one `ann.register_kind` call (its params model and its `AnnIndex` class beside it)
and nothing else of Strata is touched: it is built (`build_index`), recorded in a manifest and read back from it
(`IndexInfo`), opened as a served version (`IndexVersion` under the write overlay), searched, filtered, refused
search parameters it does not take, saved, loaded and shrunk, by the cases of test_index_contract.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import faiss
import numpy as np
import pytest

from indexer.runtime.ann import KIND_SPECS, KindParams, KindSpec, choose_kind, register_kind, unregister_kind
from indexer.runtime.faiss.flat import FlatIndex
from indexer.runtime.manifest import IndexInfo
from tests.service.engine.test_index_contract import (  # noqa: F401  (the contract's cases, run here on toy)
    Corpus,
    open_served,
    round_trip_and_remove,
    test_a_filter_matching_nothing_is_an_empty_answer,
    test_answers_equal_brute_force_with_the_corpus_id_types,
    test_deletes_and_replacements_through_the_write_overlay,
    test_filters_answer_among_the_matching_documents_only,
    test_k_past_the_documents_returns_every_document_once,
    test_search_parameters_are_the_kinds_own,
)


class ToyParams(KindParams):
    kind: Literal["toy"] = "toy"


class ToyIndex(FlatIndex):
    """Exact search like flat, under its own name and parameters."""

    kind = "toy"

    @classmethod
    def build(cls, vectors: np.ndarray, ids: np.ndarray, params: Any = None) -> ToyIndex:
        out = cls(faiss.IndexIDMap2(faiss.IndexFlat(vectors.shape[1], faiss.METRIC_INNER_PRODUCT)), params)
        out.add(vectors, ids)
        return out


TOY = KindSpec("toy", ToyParams, "a test kind", lambda p: "IDMap2,Flat", ToyIndex)


@pytest.fixture(scope="module", autouse=True)
def toy_registered() -> Iterator[None]:
    register_kind(TOY)  # the one place the kind is added
    yield
    unregister_kind("toy")


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return Corpus()


@pytest.fixture
def served(corpus: Corpus, tmp_path: Path) -> Iterator[tuple[str, str, Any]]:
    index = open_served("local", "toy", corpus, tmp_path)
    yield "local", "toy", index
    index.close()


def test_the_toy_version_is_read_back_as_its_own_kind(served: tuple[str, str, Any]) -> None:
    _, _, index = served
    assert type(index.base.ann) is ToyIndex and isinstance(index.manifest.index.params, ToyParams)
    info = index.manifest.index
    assert IndexInfo.model_validate(info.model_dump(mode="json")) == info  # the manifest's JSON round-trips
    assert choose_kind("toy", 10) == "toy" and "toy" in KIND_SPECS


def test_save_load_round_trip_and_remove_of_the_toy_kind(corpus: Corpus, tmp_path: Path) -> None:
    round_trip_and_remove("toy", corpus, tmp_path)


def test_an_unregistered_kind_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown index kind 'nope'"):
        IndexInfo.model_validate({"factory": "x", "ntotal": 1, "params": {"kind": "nope"}})
