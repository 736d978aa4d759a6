"""Manifests from before index kinds still load: `data/main-ivf-version` is a version folder written by main's code
at 3f44667 (IVF4,SQfp16, nprobe 2, no `params`; made with /tmp's make_main_version.py, kept in the test's
docstring below). It opens as an ivf `AnnIndex` with its nlist, nprobe and codec, searches like before, and is
saved back with the old fields beside the new typed `index.params`, so that older readers still read IVF versions.

The folder was written by:
    build_ivf(x, ids, 4, 2, codec="SQfp16"); IndexInfo(factory="IVF4,SQfp16", nlist=4, nlist_requested=1024,
    nprobe=2, ntotal=200) — main's `indexer.runtime.manifest` and FAISS module at 3f44667.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from indexer.runtime.ann import FlatParams, HnswParams, IvfParams
from indexer.runtime.manifest import IndexInfo, Manifest, ManifestError
from indexer.runtime.version import IndexVersion

OLD = Path(__file__).parent / "data" / "main-ivf-version"


def test_a_manifest_written_by_main_loads_as_ivf() -> None:
    raw = json.loads((OLD / "manifest.json").read_text())
    assert "params" not in raw["index"] and raw["index"]["nprobe"] == 2  # really the old shape
    manifest = Manifest.load(OLD)
    assert manifest.index.kind == "ivf"
    assert manifest.index.params == IvfParams(nlist=4, nlist_requested=1024, codec="SQfp16", nprobe=2)


def test_an_old_version_opens_and_searches_as_before(tmp_path: Path) -> None:
    folder = tmp_path / "v"
    shutil.copytree(OLD, folder)
    vectors = np.load(folder / "vectors.npy")
    version = IndexVersion(folder)
    try:
        assert version.kind == "ivf" and version.nprobe == 2 and version.nlist == 4 and version.ntotal == 200
        assert version.search_defaults() == {"nprobe": 2}
        queries = vectors[:20]
        _, exact = version.ann.exact_search(queries, 5)
        _, every_list = version.search(queries, 5, search_params={"nprobe": 4})
        assert np.array_equal(every_list, exact)  # every list probed: exact (fp16 codes hold the vectors)
        assert (exact[:, 0] == np.arange(20) * 3).all()  # each vector finds itself first
        hits = version.hits(*version.search(queries[:1], 3))
        assert hits[0][0].ext_id == 0 and hits[0][0].text == "text 0" and hits[0][0].metadata == {"n": 0}
    finally:
        version.close()


def test_saving_keeps_the_old_fields_for_older_readers(tmp_path: Path) -> None:
    folder = tmp_path / "v"
    shutil.copytree(OLD, folder)
    manifest = Manifest.load(folder)
    manifest.index.set_nprobe(3)
    manifest.save(folder)
    raw = json.loads((folder / "manifest.json").read_text())["index"]
    assert raw["nprobe"] == 3 and raw["nlist"] == 4 and raw["factory"] == "IVF4,SQfp16"  # what main reads
    old_keys = {"kind": "ivf", "nlist": 4, "nlist_requested": 1024, "codec": "SQfp16", "nprobe": 3}
    assert {k: raw["params"][k] for k in old_keys} == old_keys  # older readers ignore the newer keys (None here)
    assert {k: v for k, v in raw["params"].items() if k not in old_keys} == {"nlist_reason": None,
                                                                              "train_sample": None,
                                                                              "quantizer": "flat"}  # as built
    assert Manifest.load(folder).index.params.nprobe == 3  # type: ignore[union-attr]


@pytest.mark.parametrize("params", [FlatParams(), HnswParams(m=16, ef_construction=40, ef_search=32)])
def test_other_kinds_record_their_typed_parameters(params: FlatParams | HnswParams, tmp_path: Path) -> None:
    manifest = Manifest.load(OLD)
    manifest.index = IndexInfo.for_params(params, 200)
    manifest.save(tmp_path)
    raw = json.loads((tmp_path / "manifest.json").read_text())["index"]
    assert raw["params"]["kind"] == params.kind and raw["nlist"] is None and raw["nprobe"] is None
    assert Manifest.load(tmp_path).index.params == params


def test_a_manifest_with_an_unknown_kind_is_refused_with_the_reason(tmp_path: Path) -> None:
    shutil.copytree(OLD, tmp_path / "v")
    path = tmp_path / "v" / "manifest.json"
    raw = json.loads(path.read_text())
    raw["index"]["params"] = {"kind": "diskann"}
    path.write_text(json.dumps(raw))
    with pytest.raises(ManifestError, match="diskann"):
        Manifest.load(tmp_path / "v")
