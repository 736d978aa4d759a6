"""What a user installs and types — entry points, --help, the torch-free serving path, README ↔ CI — and the
import rules between the packages, checked on their source by import-linter (every import, function-level ones
included) and on what a real import loads."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from .conftest import REPO

# A meta-path hook that makes torch (and the training stack) unimportable, as in the API image.
BLOCK = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {'torch', 'transformers', 'sentence_transformers', 'models'}:
            raise ImportError(f'{name} is not allowed on the serving path')
sys.meta_path.insert(0, Block())
"""


def test_serving_path_imports_without_torch() -> None:
    code = BLOCK + (
        "import indexer.build, indexer.cli, indexer.evaluate, service.main, service.__main__, service.demo\n"
        "from service.main import create_app\ncreate_app()\n"
        "assert 'torch' not in sys.modules\nprint('ok')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_the_api_process_loads_no_build_pipeline_and_the_engine_no_fastapi() -> None:
    code = (
        "import sys\nimport service.engine, service.engine.backends\n"
        "web = sorted(m for m in sys.modules if m.split('.')[0] in {'fastapi', 'starlette'})\n"
        "assert not web, web\n"
        "from service.main import create_app\ncreate_app()\n"
        "pipeline = sorted(m for m in sys.modules\n"
        "                  if m.startswith('indexer.') and not m.startswith('indexer.runtime'))\n"
        "assert not pipeline, pipeline\nprint('ok')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_the_client_imports_without_the_server_or_the_frameworks() -> None:
    """`pip install -e ".[client]"` is httpx alone: strata_client must load without the server's packages, numpy
    or the integrations' frameworks (each loaded only by its module)."""
    code = (
        "import sys\nclass Block:\n    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in {'service', 'indexer', 'models', 'numpy', 'fastapi', 'pydantic',\n"
        "                                  'langchain_core', 'llama_index', 'torch'}:\n"
        "            raise ImportError(f'{name} is not allowed in the client')\n"
        "sys.meta_path.insert(0, Block())\n"
        "import strata_client\nstrata_client.Client('http://127.0.0.1:1').close()\nprint('ok')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras["client"] == ["httpx>=0.27"]
    frameworks = {d.split(">")[0] for d in extras["langchain"] + extras["llamaindex"]}
    assert {"langchain-core", "llama-index-core", "httpx"} <= frameworks


# -- import rules: the contracts in pyproject.toml's [tool.importlinter] -----------------------------------------------
PACKAGES = ("indexer", "models", "service", "strata_client")


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` on the packages under `root`, with the contracts in its pyproject.toml."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([sys.executable, "-c", "from importlinter.cli import lint_imports_command as c; c()",
                           "--no-cache", "--config", str(root / "pyproject.toml")],
                          capture_output=True, text=True, cwd=root, env=env)


def test_the_import_contracts_hold() -> None:
    """The layer rules of the package docstrings, as `[tool.importlinter]` contracts: no import circles, the
    runtime stands alone, no torch/models/build pipeline in `service`, no HTTP in the engine, faiss, the lexical
    engine and Ray each in their own modules."""
    r = _lint_imports(REPO)
    assert r.returncode == 0 and "0 broken" in r.stdout, r.stdout + r.stderr


# A violation of each kind, injected into a copy of the tree as a function-level import (they count too).
VIOLATIONS = [
    ("indexer/stage.py", "from indexer.build import build", "No import circles"),
    ("models/parity.py", "from models.export import export_encoder", "No import circles"),
    ("indexer/runtime/store.py", "from indexer.evaluate import evaluate", "never the other way round"),
    ("indexer/evaluate.py", "import torch", "indexer (runtime included) never imports"),
    ("service/deps.py", "from indexer.build import build", "service never imports"),
    ("service/engine/leases.py", "from fastapi import Request", "service.engine imports of Strata only itself"),
    # the allow-list: a module of service the contract never names is out of the engine's reach too
    ("service/engine/leases.py", "from service.schemas.collections import CollectionInfo",
     "service.engine imports of Strata only itself"),
    ("service/engine/swap.py", "from service.settings import Settings", "service.engine imports of Strata only itself"),
    # an edge module that reaches nothing forbidden itself (`service` contains the engine: named by `service.*`)
    ("service/engine/leases.py", "from service.schemas.common import ErrorBody",
     "service.engine imports of Strata only itself"),
    ("service/engine/scheduler.py", "from indexer.build import build", "service.engine imports of Strata only itself"),
    ("indexer/build.py", "import faiss", "Only indexer.runtime.faiss imports faiss"),
    ("strata_client/client.py", "from service.schemas.search import Hit", "strata_client never imports the server"),
    ("service/routers/search.py", "from service.engine.searcher import Stages",
     "service.routers import the engine only"),
    ("service/routers/health.py", "from indexer.runtime.manifest import Manifest",
     "service.routers import the engine only"),
    ("strata_client/types.py", "import langchain_core", "The client's framework integrations import their framework"),
]


@pytest.mark.parametrize(("path", "line", "contract"), VIOLATIONS,
                         ids=[f"{v[0]}:{v[1].split()[1]}" for v in VIOLATIONS])
def test_a_broken_import_contract_fails_the_check(tmp_path: Path, path: str, line: str, contract: str) -> None:
    import shutil

    for name in PACKAGES:
        shutil.copytree(REPO / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__", "static"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / path
    target.write_text(target.read_text() + f"\n\ndef _injected() -> None:\n    {line}  # noqa\n")
    r = _lint_imports(tmp_path)
    assert r.returncode != 0, r.stdout
    broken = [block for block in r.stdout.split("\n\n") if "BROKEN" in block]
    assert any(contract in " ".join(block.split()) for block in broken), r.stdout


@pytest.mark.parametrize("package", ["indexer", "indexer.runtime", "models", "service", "service.engine",
                                     "service.routers"])
def test_each_package_says_what_it_owns_and_may_import(package: str) -> None:
    doc = ast.get_docstring(ast.parse((REPO / package.replace(".", "/") / "__init__.py").read_text())) or ""
    assert "May import" in doc, package
    if package != "models":  # the training side's docstring lists what it is in its first sentence
        assert "Owns" in doc, package


@pytest.mark.parametrize(
    "argv",
    [
        ["-m", "indexer.cli", "--help"],
        ["-m", "indexer.cli", "build", "--help"],
        ["-m", "indexer.cli", "eval", "--help"],
        ["-m", "indexer.cli", "info", "--help"],
        ["-m", "indexer.cli", "tune", "--help"],
        ["-m", "models.cli", "--help"],
        ["-m", "models.cli", "export", "--help"],
        ["-m", "service", "--help"],
    ],
)
def test_every_cli_has_help(argv: list[str]) -> None:
    r = subprocess.run([sys.executable, *argv], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0 and "usage:" in r.stdout


def test_console_scripts_are_declared() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["scripts"] == {"indexer": "indexer.cli:main", "encoder": "models.cli:main"}
    extras = project["optional-dependencies"]
    assert not any(dep.startswith("torch") for dep in extras["serve"])
    assert {"serve", "train", "gpu", "dev"} <= extras.keys()


def test_ci_runs_the_readme_test_command() -> None:
    readme = (REPO / "README.md").read_text()
    commands = re.findall(r"```(?:bash|sh)\n(.*?)\n```", readme, flags=re.S)
    assert len(commands) >= 2
    test_command = commands[1].strip()
    assert "pytest" in test_command
    assert test_command in (REPO / ".ci" / "run").read_text()


def test_info_on_empty_root(tmp_path) -> None:  # noqa: ANN001
    r = subprocess.run([sys.executable, "-m", "indexer.cli", "info", "--root", str(tmp_path)], capture_output=True,
                       text=True, cwd=REPO)
    assert r.returncode == 0 and "no versions yet" in r.stdout


def test_eval_on_empty_root_is_a_clear_error(tmp_path) -> None:  # noqa: ANN001
    r = subprocess.run([sys.executable, "-m", "indexer.cli", "eval", "--root", str(tmp_path)], capture_output=True,
                       text=True, cwd=REPO)
    assert r.returncode == 2 and "has no current index" in r.stderr and "Traceback" not in r.stderr


def test_the_installed_package_ships_the_search_page(tmp_path: Path) -> None:
    """The API image installs a wheel (not the source tree): the page's static files must be package data."""
    import shutil
    import zipfile

    src = tmp_path / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for name in ("indexer", "models", "service"):
        shutil.copytree(REPO / name, src / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                        str(tmp_path / "dist"), str(src)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    (wheel,) = (tmp_path / "dist").glob("strata-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {f"service/static/{p.name}" for p in (REPO / "service" / "static").iterdir()}
    assert {"service/static/index.html", "service/static/app.js", "service/static/app.css"} <= shipped <= names


def bench_imports(source: str) -> list[str]:
    """The `bench` modules a Python source imports, at any level of its code."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
        found += [n for n in names if n == "bench" or n.startswith("bench.")]
    return found


def test_no_test_imports_bench() -> None:
    """Benchmarks measure the product; tests test it. A test that needs a benchmark's logic means that logic
    belongs in the product (or the test goes with the benchmark)."""
    nested = "import os\ndef f():\n    from bench.common import pct\nimport bench"
    assert sorted(bench_imports(nested)) == ["bench", "bench.common"]
    offenders = {str(p.relative_to(REPO)): found for p in sorted((REPO / "tests").rglob("*.py"))
                 if (found := bench_imports(p.read_text()))}
    assert not offenders, f"tests import bench: {offenders}"
    assert not (REPO / "tests" / "bench").exists()
