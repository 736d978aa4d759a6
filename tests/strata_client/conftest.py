"""Real Strata servers for the client and its integrations (uvicorn on 127.0.0.1, the real encoder, FAISS,
SQLite, BM25), started once for this package: `corpus_server` serves 300 Quora questions with metadata (topic,
year, ref_doc_id) built by `indexer build --data`, writable; `demo_server` serves a Quora build as
`python -m service demo` makes it (paper protocol, 300 rows); `capped_server` a copy of the corpus with API keys
and an in-flight cap of 1 (real 401/403/429 answers)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from indexer.quora import read_rows
from tests.conftest import REPO, Server, start_server, stop_server

N_DOCS = 300
TOPICS = ("tech", "life", "money")
READ_KEY, ADMIN_KEY = "client-read-key-0123", "client-admin-key-0123"


def corpus_rows(quora: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    for row in read_rows(quora):
        for text in (row.question1, row.question2):
            if text.strip() and text not in seen and len(rows) < N_DOCS:
                seen.add(text)
                i = len(rows)
                rows.append({"id": f"q{i}" if i % 2 else i, "text": text, "topic": TOPICS[i % 3],
                             "year": 2000 + i % 20, "ref_doc_id": f"src-{i % 10}"})
        if len(rows) >= N_DOCS:
            return rows
    return rows


def indexer_build(*args: str) -> None:
    r = subprocess.run([sys.executable, "-m", "indexer.cli", "build", "--threads", "2", "--no-eval", *args],
                       cwd=REPO, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr


@pytest.fixture(scope="package")
def corpus_rows_(quora_file: Path) -> list[dict[str, Any]]:
    return corpus_rows(quora_file)


@pytest.fixture(scope="package")
def corpus_root(tmp_path_factory: pytest.TempPathFactory, minilm_mean: Path,
                corpus_rows_: list[dict[str, Any]]) -> Path:
    tmp = tmp_path_factory.mktemp("client-corpus")
    data = tmp / "docs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in corpus_rows_), encoding="utf-8")
    indexer_build("--data", str(data), "--model", str(minilm_mean), "--root", str(tmp / "root"),
                  "--metadata-fields", "topic,year,ref_doc_id")
    return tmp / "root"


def _copy(root: Path, tmp: Path) -> Path:
    return Path(shutil.copytree(root, tmp / "root", symlinks=True))


@pytest.fixture(scope="package")
def corpus_server(tmp_path_factory: pytest.TempPathFactory, corpus_root: Path) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("client-server")
    srv = start_server(tmp, {"STRATA_INDEX_ROOT": str(_copy(corpus_root, tmp))})
    yield srv
    stop_server(srv)


@pytest.fixture(scope="package")
def capped_server(tmp_path_factory: pytest.TempPathFactory, corpus_root: Path) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("client-capped")
    srv = start_server(tmp, {"STRATA_INDEX_ROOT": str(_copy(corpus_root, tmp)),
                             "STRATA_API_KEYS": f"{READ_KEY},{ADMIN_KEY}:admin", "STRATA_MAX_IN_FLIGHT": "1",
                             "STRATA_WORKERS": "1", "STRATA_RETRY_AFTER_S": "1"})
    yield srv
    stop_server(srv)


@pytest.fixture(scope="package")
def demo_server(tmp_path_factory: pytest.TempPathFactory, minilm_mean: Path, quora_file: Path) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("client-demo")
    indexer_build("--data", str(quora_file), "--rows", str(N_DOCS), "--model", str(minilm_mean), "--root",
                  str(tmp / "root"))
    srv = start_server(tmp, {"STRATA_INDEX_ROOT": str(tmp / "root")})
    yield srv
    stop_server(srv)


@pytest.fixture(scope="package")
def passages_server(tmp_path_factory: pytest.TempPathFactory, minilm_mean: Path,
                    corpus_rows_: list[dict[str, Any]]) -> Iterator[Server]:
    """A version built with passages (`--chunk 24`): 30 documents of ten questions each, several passages apiece."""
    tmp = tmp_path_factory.mktemp("client-passages")
    data = tmp / "docs.jsonl"
    docs = [{"id": i, "text": " ".join(r["text"] for r in corpus_rows_[i * 10 : i * 10 + 10]), "topic": TOPICS[i % 3]}
            for i in range(30)]
    data.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    indexer_build("--data", str(data), "--model", str(minilm_mean), "--root", str(tmp / "root"), "--chunk", "24",
                  "--index", "flat")
    srv = start_server(tmp, {"STRATA_INDEX_ROOT": str(tmp / "root")})
    yield srv
    stop_server(srv)
