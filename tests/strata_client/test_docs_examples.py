"""docs/client.md's `python` examples run as written (in a fresh interpreter each, as a reader pastes them) against
a server of a Quora index built as `python -m service demo` builds it, the demo's URL replaced by the server's."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO, Server

DEMO_URL = "http://127.0.0.1:8000"
BLOCKS = re.findall(r"^```python\n(.*?)^```$", (REPO / "docs" / "client.md").read_text(), flags=re.M | re.S)
NAMES = ["client", "async", "langchain", "llamaindex"]


def test_the_page_has_the_examples_it_promises() -> None:
    assert len(BLOCKS) == len(NAMES) and all(DEMO_URL in b for b in BLOCKS)
    assert "strata_client.langchain" in BLOCKS[2] and "strata_client.llamaindex" in BLOCKS[3]


@pytest.mark.parametrize("block", range(len(NAMES)), ids=NAMES)
def test_each_example_runs_as_written(demo_server: Server, block: int) -> None:
    if block >= 2:
        pytest.importorskip("langchain_core" if block == 2 else "llama_index.core")
    code = BLOCKS[block].replace(DEMO_URL, demo_server.url)
    env = os.environ | {"PYTHONPATH": str(REPO)}
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip()  # each example prints what it found
