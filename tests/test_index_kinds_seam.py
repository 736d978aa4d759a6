"""Index kinds are spelled once: no module of `indexer` or `service` names a kind outside the seam (`ann.py`, where
each kind is declared, and the `faiss` package, one module per kind's class). Everything kind-specific goes
through the kind's `ann.KindSpec` and `AnnIndex` hooks."""

from __future__ import annotations

import ast

from indexer.runtime.ann import KINDS

from .conftest import REPO

SEAM = ("indexer/runtime/ann.py", "indexer/runtime/faiss/")


def _kind_literals(path: str, source: str) -> list[str]:
    """`path:line 'kind'` for every string constant that is a kind's name."""
    return [f"{path}:{node.lineno} {node.value!r}" for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Constant) and node.value in KINDS]


def test_no_kind_is_named_outside_the_seam() -> None:
    found = [hit for pkg in ("indexer", "service") for p in sorted((REPO / pkg).rglob("*.py"))
             if not str(p.relative_to(REPO)).startswith(SEAM)
             for hit in _kind_literals(str(p.relative_to(REPO)), p.read_text())]
    assert not found, f"kind names outside the seam (use KindSpec hooks): {found}"


def test_the_check_finds_a_kind_named_in_a_module() -> None:
    assert _kind_literals("x.py", 'if kind == "ivf":\n    pass\n') == ["x.py:1 'ivf'"]
    assert _kind_literals("x.py", "if spec.trained:\n    pass\n") == []
