"""The serving contenders: how to start each on 127.0.0.1 (a free port, a subprocess), when it is ready, how it
spells an `/encode`-equivalent and a `/search`-equivalent request for one text, and how to read vectors back
for the cosine check against the reference.

- Strata: `python -m service` on an index root; `POST /encode {"texts": [t]}`, `POST /search {"query", "top_k"}`.
- infinity-emb: `infinity_emb v2 --engine optimum --pooling-method mean` on a local folder holding
  sentence-transformers' fp32 ONNX export; `POST /embeddings`. It has no search.
- txtai: its API (`uvicorn txtai.api:app`, `CONFIG=config.yml`) loading an index it built itself with its
  FAISS backend over the same documents; `GET /transform?text=`, `GET /search?query=&limit=`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench.common import free_port, wait_ready
from bench.peers.http_load import Call

REPO = Path(__file__).resolve().parents[2]
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "DO_NOT_TRACK": "1",
           "INFINITY_ANONYMOUS_USAGE_STATS": "0", "TOKENIZERS_PARALLELISM": "false"}
TOP_K = 10


@dataclass
class Server:
    name: str
    cmd: list[str]
    env: dict[str, str]
    ready_path: str
    encode: Call
    search: Call | None
    vectors: Callable[[httpx.Client, list[str]], np.ndarray]  # texts -> (n, dim) as served
    log_file: Path
    cwd: Path = REPO
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    url: str = ""
    startup_s: float = 0.0

    def start(self, timeout_s: float) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        cmd = [c.replace("{port}", str(port)) for c in self.cmd]
        env = {k: v.replace("{port}", str(port)) for k, v in self.env.items()}
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "wb") as log:
            self.proc = subprocess.Popen(cmd, cwd=self.cwd, env=os.environ | OFFLINE | env, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        try:  # a peer that fails to start is recorded by the caller, not the end of the run
            self.startup_s = round(wait_ready(self.proc, self.url, self.name, timeout_s, self.log_file,
                                              self.ready_path), 1)
        except SystemExit as e:
            raise RuntimeError(str(e)) from None

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def _strata_vectors(client: httpx.Client, texts: list[str]) -> np.ndarray:
    out: list[list[float]] = []
    for i in range(0, len(texts), 64):
        r = client.post("/encode", json={"texts": texts[i : i + 64]})
        r.raise_for_status()
        out.extend(r.json()["vectors"])
    return np.asarray(out, dtype=np.float32)


def strata(root: Path, work: Path) -> Server:
    return Server(
        "Strata", [sys.executable, "-m", "service"],
        {"STRATA_INDEX_ROOT": str(root), "STRATA_PORT": "{port}", "STRATA_HOST": "127.0.0.1",
         "STRATA_LOG_LEVEL": "warning", "PYTHONPATH": str(REPO)},
        "/ready",
        Call("POST", "/encode", lambda t: {"json": {"texts": [t]}}),
        Call("POST", "/search", lambda t: {"json": {"query": t, "top_k": TOP_K}}),
        _strata_vectors, work / "logs" / "strata.log")


INFINITY_NAME = "minilm"


def _infinity_vectors(client: httpx.Client, texts: list[str]) -> np.ndarray:
    out: list[list[float]] = []
    for i in range(0, len(texts), 64):
        r = client.post("/embeddings", json={"model": INFINITY_NAME, "input": texts[i : i + 64]})
        r.raise_for_status()
        out.extend(d["embedding"] for d in sorted(r.json()["data"], key=lambda d: d["index"]))
    return np.asarray(out, dtype=np.float32)


def infinity(venv_python: Path, model_dir: Path, work: Path, pooling: str = "mean") -> Server:
    """pooling "mean" is this model's; "auto" (infinity's default) is measured only for its cosine."""
    args = ["--pooling-method", pooling] if pooling != "auto" else []
    # Started inside the model folder as `--model-id .`: infinity lists a local folder's ONNX files with the
    # folder's path in front and optimum then looks for that path among bare file names (FileNotFoundError).
    return Server(
        f"infinity-emb ({pooling} pooling)",
        [str(venv_python.parent / "infinity_emb"), "v2", "--model-id", ".", "--served-model-name",
         INFINITY_NAME, "--engine", "optimum", *args, "--device", "cpu", "--host", "127.0.0.1", "--port", "{port}"],
        {"HF_HOME": str((work / "hf-home-infinity").resolve())},  # its optimised-ONNX cache, not ~/.cache
        "/health",
        Call("POST", "/embeddings", lambda t: {"json": {"model": INFINITY_NAME, "input": [t]}}),
        None, _infinity_vectors, work / "logs" / f"infinity-{pooling}.log", cwd=model_dir.resolve())


def _txtai_vectors(client: httpx.Client, texts: list[str]) -> np.ndarray:
    r = client.post("/batchtransform", json=texts)
    r.raise_for_status()
    return np.asarray(r.json(), dtype=np.float32)


def txtai(venv_python: Path, config: Path, work: Path) -> Server:
    return Server(
        "txtai API (faiss)",
        [str(venv_python), "-m", "uvicorn", "txtai.api:app", "--host", "127.0.0.1", "--port", "{port}",
         "--log-level", "warning"],
        {"CONFIG": str(config.resolve()), "HF_HOME": str((work / "hf-home-txtai").resolve())},
        "/count",
        Call("GET", "/transform", lambda t: {"params": {"text": t}}),
        Call("GET", "/search", lambda t: {"params": {"query": t, "limit": TOP_K}}),
        _txtai_vectors, work / "logs" / "txtai.log")


def served_vectors(server: Server, texts: list[str]) -> np.ndarray:
    with httpx.Client(base_url=server.url, timeout=120) as client:
        return server.vectors(client, texts)


def min_cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return round(float(np.min(np.sum(a * b, axis=1))), 5)


def describe(server: Server) -> dict[str, Any]:
    return {"name": server.name, "startup_s": server.startup_s, "command": " ".join(server.cmd)}
