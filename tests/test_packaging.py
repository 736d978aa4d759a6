"""What a user installs and types — entry points, --help, the torch-free serving path, README ↔ CI — and the
import rules between the packages, checked on their source (every import, function-level ones included) and
on what a real import loads."""

from __future__ import annotations

import ast
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
        "import sys\nimport service.engine, service.engine.local\n"
        "web = sorted(m for m in sys.modules if m.split('.')[0] in {'fastapi', 'starlette'})\n"
        "assert not web, web\n"
        "from service.main import create_app\ncreate_app()\n"
        "pipeline = sorted(m for m in sys.modules\n"
        "                  if m.startswith('indexer.') and not m.startswith('indexer.runtime'))\n"
        "assert not pipeline, pipeline\nprint('ok')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


# -- import rules, on the source ----------------------------------------------------------------------------------
PACKAGES = ("indexer", "models", "service")


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every module `path` imports, anywhere in the file (absolute names; relative imports resolved)."""
    package = _module_name(path).rsplit(".", 0 if path.name == "__init__.py" else 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}  # `from pkg import module`
    return found


SOURCES = {_module_name(p): _imports(p) for pkg in PACKAGES for p in sorted((REPO / pkg).rglob("*.py"))}


def _top(name: str) -> str:
    return name.split(".")[0]


def _importers(predicate) -> set[str]:  # noqa: ANN001 (str -> bool)
    return {m for m, imported in SOURCES.items() if any(predicate(i) for i in imported)}


def test_only_one_module_imports_faiss() -> None:
    assert _importers(lambda i: _top(i) == "faiss") == {"indexer.runtime.faiss_index"}


def test_only_one_module_imports_the_lexical_engine() -> None:
    assert _importers(lambda i: _top(i) in {"bm25s", "Stemmer", "tantivy"}) == {"indexer.runtime.lexical"}


def test_the_engine_never_imports_fastapi() -> None:
    web = _importers(lambda i: _top(i) in {"fastapi", "starlette", "uvicorn"})
    assert not {m for m in web if m == "service.engine" or m.startswith("service.engine.")}, web


def test_service_never_imports_torch_models_or_the_build_pipeline() -> None:
    service = {m: i for m, i in SOURCES.items() if _top(m) == "service"}
    for module, imported in service.items():
        assert not {i for i in imported if _top(i) in {"torch", "transformers", "models"}}, module
        pipeline = {i for i in imported if _top(i) == "indexer" and i != "indexer"
                    and not i.startswith("indexer.runtime")}
        assert not pipeline, (module, pipeline)


def test_the_runtime_stands_alone() -> None:
    """`indexer.runtime` imports nothing of the pipeline, the service or the training side."""
    for module, imported in SOURCES.items():
        if module.startswith("indexer.runtime"):
            outside = {i for i in imported if _top(i) in {"service", "models", "torch", "transformers"}
                       or (_top(i) == "indexer" and i != "indexer" and not i.startswith("indexer.runtime"))}
            assert not outside, (module, outside)


def test_the_indexer_never_imports_torch_models_or_service() -> None:
    for module, imported in SOURCES.items():
        if _top(module) == "indexer":
            assert not {i for i in imported if _top(i) in {"service", "models", "torch", "transformers"}}, module


def test_ray_is_imported_only_by_the_distributed_build_and_the_sharded_backend() -> None:
    ray_users = _importers(lambda i: _top(i) == "ray")
    assert ray_users <= {"indexer.ray_build", "indexer.ray_input", "indexer.ray_embed", "service.engine.sharded"}
    assert "service.engine.sharded" in ray_users


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
