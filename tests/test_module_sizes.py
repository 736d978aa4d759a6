"""No file over 400 lines and no function over 60 lines in the product packages: a module holds one concept, a
function one step. There is no list of exceptions: what grows past a limit is split by concept (a new module, a
helper with a name that says what it does) in the change that grows it."""

from __future__ import annotations

import ast

from .conftest import REPO

MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 60
PACKAGES = ("indexer", "models", "service", "strata_client")


def _sources() -> dict[str, str]:
    return {str(p.relative_to(REPO)): p.read_text() for pkg in PACKAGES for p in sorted((REPO / pkg).rglob("*.py"))}


def _functions(tree: ast.AST, prefix: str = "") -> list[tuple[str, int]]:
    """(qualified name, lines) of every function, methods as Class.method, nested ones as outer.inner."""
    out: list[tuple[str, int]] = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.append((prefix + node.name, node.end_lineno - node.lineno + 1))
            out += _functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            out += _functions(node, f"{prefix}{node.name}.")
    return out


def _long_functions(sources: dict[str, str]) -> dict[str, int]:
    return {f"{path}:{name}": n for path, text in sources.items()
            for name, n in _functions(ast.parse(text)) if n > MAX_FUNCTION_LINES}


def test_no_file_is_over_400_lines() -> None:
    long = {path: text.count("\n") for path, text in _sources().items() if text.count("\n") > MAX_FILE_LINES}
    assert not long, f"over {MAX_FILE_LINES} lines, split them by concept: {long}"


def test_no_function_is_over_60_lines() -> None:
    long = _long_functions(_sources())
    assert not long, f"over {MAX_FUNCTION_LINES} lines, split them: {long}"


def test_the_checks_find_a_long_function_and_a_method() -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    source = f"def long():\n{body}\nclass C:\n    def short(self):\n        pass\n\n    def long(self):\n" + \
        "".join("    " + line + "\n" for line in body.splitlines())
    assert _long_functions({"m.py": source}) == {"m.py:long": MAX_FUNCTION_LINES + 1,
                                                 "m.py:C.long": MAX_FUNCTION_LINES + 1}
