"""An index version opened for searching: real answers, and refusal of corrupt or inconsistent folders."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from indexer.runtime.encoder import OnnxEncoder
from indexer.runtime.layout import IndexRoot
from indexer.runtime.version import IndexLoadError, IndexVersion


def test_known_duplicate_retrieves_its_partner(quora_root: Path, minilm_mean: Path) -> None:
    version = IndexVersion(IndexRoot(quora_root).current_dir())
    vec = OnnxEncoder(minilm_mean).encode(["How can I be a good geologist?"])  # row 7, duplicate of qid 16
    _, ids = version.search(vec, 10)
    assert 16 in ids[0].tolist()
    hits = version.hits(*version.search(vec, 3))
    top = hits[0][0]
    assert top.text == "What should I do to be a great geologist?"
    assert (top.faiss_id, top.ext_id, top.metadata) == (16, 16, {})  # a Quora store: the qid is the id, no metadata
    version.close()


def test_corrupt_or_lying_versions_are_refused(quora_root: Path, tmp_path: Path) -> None:
    src = IndexRoot(quora_root).current_dir()
    truncated = tmp_path / "truncated"
    shutil.copytree(src, truncated)
    data = (truncated / "index.faiss").read_bytes()
    (truncated / "index.faiss").write_bytes(data[: len(data) // 2])
    with pytest.raises(IndexLoadError, match="not a readable FAISS index"):
        IndexVersion(truncated)

    lying = tmp_path / "lying"
    shutil.copytree(src, lying)
    manifest = json.loads((lying / "manifest.json").read_text())
    manifest["model"]["dim"] = 768
    (lying / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(IndexLoadError, match="dimension 384 but the manifest says 768"):
        IndexVersion(lying)
