"""What a user installs and types: entry points, --help, the torch-free serving path, README ↔ CI."""

from __future__ import annotations

import re
import subprocess
import sys

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
