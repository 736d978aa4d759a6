"""Index kinds are spelled once: no module of `indexer` or `service` names a kind outside the seam (`ann.py`, where
each kind is declared, and the `faiss` package, one module per kind's class) and none imports a kind's own names
(its params model, its class, its module, a function named after it such as `split_ivf`). Everything
kind-specific goes through the kind's `ann.KindSpec` and `AnnIndex` hooks."""

from __future__ import annotations

import ast

from indexer.runtime.ann import KIND_SPECS, KINDS

from .conftest import REPO

SEAM = ("indexer/runtime/ann.py", "indexer/runtime/faiss/")
FAISS_PACKAGE = "indexer.runtime.faiss"  # its functions named after a kind (`split_ivf`) are that kind's own


def _kind_literals(path: str, source: str) -> list[str]:
    """`path:line 'kind'` for every string constant that is a kind's name."""
    return [f"{path}:{node.lineno} {node.value!r}" for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Constant) and node.value in KINDS]


def _kinds_own_names() -> tuple[set[str], set[str]]:
    """(names, modules) that belong to one kind: its params model and class, and its class's module."""
    impls = [spec.impl if isinstance(spec.impl, str) else f"{spec.impl.__module__}:{spec.impl.__name__}"
             for spec in KIND_SPECS.values()]
    names = {spec.params.__name__ for spec in KIND_SPECS.values()} | {impl.partition(":")[2] for impl in impls}
    return names, {impl.partition(":")[0] for impl in impls}


def _kind_imports(path: str, source: str) -> list[str]:
    """`path:line name` for every import of a kind's own name or module, or of a function of the faiss package with
    a kind as a word of its name."""
    names, modules = _kinds_own_names()
    hits = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            imported = [f"{node.module}.{a.name}" if node.module in modules else a.name for a in node.names]
        elif isinstance(node, ast.Import):
            imported = [a.name for a in node.names]
        else:
            continue
        hits += [f"{path}:{node.lineno} {name}" for name in imported
                 if name in names or name.rpartition(".")[0] in modules or name in modules
                 or (isinstance(node, ast.ImportFrom) and (node.module or "").startswith(FAISS_PACKAGE)
                     and set(name.lower().split("_")) & set(KINDS))]
    return hits


def _outside_the_seam() -> list[tuple[str, str]]:
    return [(str(p.relative_to(REPO)), p.read_text()) for pkg in ("indexer", "service")
            for p in sorted((REPO / pkg).rglob("*.py")) if not str(p.relative_to(REPO)).startswith(SEAM)]


def test_no_kind_is_named_outside_the_seam() -> None:
    found = [hit for path, source in _outside_the_seam() for hit in _kind_literals(path, source)]
    assert not found, f"kind names outside the seam (use KindSpec hooks): {found}"


def test_no_kinds_own_names_are_imported_outside_the_seam() -> None:
    found = [hit for path, source in _outside_the_seam() for hit in _kind_imports(path, source)]
    assert not found, f"a kind's own names imported outside the seam (use KindSpec/AnnIndex hooks): {found}"


def test_the_check_finds_a_kinds_names_imported() -> None:
    assert _kind_imports("x.py", "from indexer.runtime.ann import IvfParams, KIND_SPECS\n") == ["x.py:1 IvfParams"]
    assert _kind_imports("x.py", "from indexer.runtime.faiss.ivf import IvfIndex\n") == [
        "x.py:1 indexer.runtime.faiss.ivf.IvfIndex"]
    assert _kind_imports("x.py", "from indexer.runtime.faiss.files import INDEX_FILE, split_ivf\n") == [
        "x.py:1 split_ivf"]
    assert _kind_imports("x.py", "import indexer.runtime.faiss.hnsw\n") == ["x.py:1 indexer.runtime.faiss.hnsw"]
    assert _kind_imports("x.py", "from indexer.runtime.faiss.kinds import open_index\n") == []


def test_the_check_finds_a_kind_named_in_a_module() -> None:
    assert _kind_literals("x.py", 'if kind == "ivf":\n    pass\n') == ["x.py:1 'ivf'"]
    assert _kind_literals("x.py", "if spec.trained:\n    pass\n") == []
