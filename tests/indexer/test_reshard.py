"""`indexer shard`: a published IVF version (built from vectors, with metadata and a lexical index) split into N
shard files by `id % N` on real FAISS files. The merged shards answer as the parent did — dense at the served
nprobe, filtered, lexical — the rest of the version is the parent's files hard-linked, the new version is sealed
and published with its parent named; a version that is not IVF, already sharded, damaged, a count out of range or a
root that does not exist is refused with the reason, exit 2, nothing published (no empty root made)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import faiss
import numpy as np
import pytest

from indexer.build import BuildConfig, build
from indexer.runtime.integrity import verify_folder
from indexer.runtime.layout import IndexRoot
from indexer.runtime.manifest import Manifest
from indexer.runtime.version import IndexVersion
from tests.conftest import indexer_cli

DIM = 32
N = 2_000
WORDS = "how what why learn python money invest india sky blue sea green dog cat car road guitar".split()


def corpus(path: Path) -> Path:
    rng = np.random.default_rng(7)
    centers = rng.normal(size=(20, DIM))
    vecs = centers[rng.integers(0, 20, N)] + 0.4 * rng.normal(size=(N, DIM))
    ids = rng.permutation(10**6)[:N]  # sparse ids: the split is by id, not by position
    with path.open("w") as fh:
        for i, (doc_id, v) in enumerate(zip(ids, vecs, strict=True)):
            text = " ".join(rng.choice(WORDS, 6)) + f" doc{i}"
            fh.write(json.dumps({"id": int(doc_id), "text": text, "bucket": i % 5, "vector": v.tolist()}) + "\n")
    return path


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory, tiny_exported: Path) -> Path:
    tmp = tmp_path_factory.mktemp("reshard")
    r = tmp / "root"
    build(BuildConfig(model_dir=tiny_exported, data=str(corpus(tmp / "docs.jsonl")), root=r, evaluate=False,
                      threads=1, index="ivf", nlist=16, nprobe=3, lexical=True))
    return r


def queries() -> np.ndarray:
    q = np.random.default_rng(3).normal(size=(60, DIM)).astype(np.float32)
    return q / np.linalg.norm(q, axis=1, keepdims=True)


def test_a_split_version_answers_as_its_parent(root: Path) -> None:
    ir = IndexRoot(root)
    parent_name = ir.current_version()
    assert parent_name is not None
    r = indexer_cli("shard", "--root", str(root), "--shards", "3")
    assert r.returncode == 0, r.stderr
    assert "into 3 shards" in r.stdout and "hard-linked" in r.stdout
    name = ir.current_version()
    assert name != parent_name  # published: the new version is current, the parent kept
    parent_dir, child_dir = ir.version_dir(parent_name), ir.version_dir(name or "")
    child = Manifest.load(child_dir)
    parent_manifest = Manifest.load(parent_dir)
    assert child.parent_version == parent_name and child.index.nprobe == parent_manifest.index.nprobe == 3
    assert [s.file for s in child.index.shards] == [f"shards/shard-0000{s}.faiss" for s in range(3)]
    assert sum(s.ntotal for s in child.index.shards) == child.index.ntotal == N
    assert not (child_dir / "index.faiss").exists()
    for s, info in enumerate(child.index.shards):  # shard s holds exactly the ids ≡ s (mod 3)
        shard = faiss.read_index(str(child_dir / info.file))
        assert shard.ntotal == info.ntotal > 0
        ivf = faiss.extract_index_ivf(shard)
        ids = np.concatenate([faiss.rev_swig_ptr(ivf.invlists.get_ids(li), ivf.invlists.list_size(li)).copy()
                              for li in range(ivf.nlist) if ivf.invlists.list_size(li)])
        assert len(ids) == info.ntotal and (ids % 3 == s).all()
    # the rest of the version is the parent's files, linked (the same inode), and sealed with checksums
    assert os.stat(child_dir / "store.sqlite").st_ino == os.stat(parent_dir / "store.sqlite").st_ino
    assert (child_dir / "lexical").is_dir()
    verified = verify_folder(child_dir)
    assert any(f.startswith("shards/") for f in json.loads((child_dir / "manifest.json").read_text())
               ["checksums"]["files"]) and verified is not None

    parent, merged = IndexVersion(parent_dir), IndexVersion(child_dir)
    try:
        q = queries()
        a, b = parent.search(q, 10), merged.search(q, 10)
        assert (a[1] == b[1]).all() and np.allclose(a[0], b[0])
        assert merged.nprobe == 3  # the parent's served setting, not exact search
        exact = parent.ann.exact_search(q, 10)[1]
        assert (a[1] != exact).any()  # nprobe 3 of 16 is approximate: equal answers are not both exact
        flt = {"bucket": 2}
        fa, fb = parent.search(q, 10, parent.match(flt)), merged.search(q, 10, merged.match(flt))
        assert (fa[1] == fb[1]).all()
        hits = [[(h.ext_id, h.metadata) for h in v.hits(*found)[0]] for v, found in ((parent, fa), (merged, fb))]
        assert hits[0] == hits[1] and len(hits[0]) == 10
        for text in ("learn python money", "blue sea dog"):
            la, lb = parent.lexical_search([text], 10)[0], merged.lexical_search([text], 10)[0]
            assert (la[1] == lb[1]).all() and la[1].size == 10
    finally:
        parent.close()
        merged.close()

    info = indexer_cli("info", "--root", str(root))
    assert info.returncode == 0 and f"* {name}  {N} vectors" in info.stdout
    assert f"3 shards of {parent_name}" in info.stdout, info.stdout

    again = indexer_cli("shard", "--root", str(root), "--shards", "2")  # the current version is sharded now
    assert again.returncode == 2 and "already kept as 3 shards" in again.stderr


def test_a_version_that_cannot_be_split_is_refused_and_nothing_is_published(tmp_path: Path, root: Path,
                                                                            tiny_exported: Path) -> None:
    ir = IndexRoot(root)
    parent = ir.versions()[0]  # the IVF version the first test split (this one does not depend on it)
    for args, said in ((("--shards", "1"), "between 2 and"), (("--shards", "300"), "between 2 and"),
                       (("--shards", "2", "--version", "nope"), "no version nope")):
        r = indexer_cli("shard", "--root", str(root), *args)
        assert r.returncode == 2 and said in r.stderr and "Traceback" not in r.stderr, r.stderr

    missing = tmp_path / "no-such-root"  # a mistyped --root: refused, and no empty root made
    r = indexer_cli("shard", "--root", str(missing), "--shards", "2")
    assert r.returncode == 2 and "has no current index" in r.stderr and not missing.exists(), r.stderr

    flat = tmp_path / "flat"
    build(BuildConfig(model_dir=tiny_exported, data=str(corpus(tmp_path / "docs.jsonl")), root=flat,
                      evaluate=False, threads=1, index="flat", lexical=False))
    r = indexer_cli("shard", "--root", str(flat), "--shards", "2")
    assert r.returncode == 2 and "holds a flat index: only IVF versions are sharded" in r.stderr, r.stderr
    assert len(IndexRoot(flat).versions()) == 1

    # a damaged version is never split: the checksum names the file, nothing is published
    damaged = tmp_path / "damaged"
    ir_d = IndexRoot(damaged)
    ir_d.versions_dir.mkdir(parents=True)
    os.system(f"cp -r {ir.version_dir(parent)} {ir_d.version_dir(parent)}")  # noqa: S605 (test paths)
    ir_d.set_current(parent)
    store = ir_d.version_dir(parent) / "store.sqlite"
    data = bytearray(store.read_bytes())
    data[len(data) // 2] ^= 0xFF
    store.write_bytes(bytes(data))
    r = indexer_cli("shard", "--root", str(damaged), "--shards", "2")
    assert r.returncode == 2 and "store.sqlite" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert ir_d.versions() == [parent] and ir_d.current_version() == parent
    assert not any(p.name.startswith(".") and p.is_dir() for p in damaged.iterdir())  # no staging left behind
