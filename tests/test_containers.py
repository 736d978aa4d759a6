"""Containers. On a real engine (`docker info` works; CI starts one with ../shared/tools/container-engine):
docker/smoke.sh builds both images and runs the compose stack end to end. Without one: the compose files and
Dockerfiles are parsed and checked, and the exact commands of each image (jobs entrypoint, API CMD, HEALTHCHECK)
are run here as they would run inside, signals included."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest
import tomllib
import yaml

from indexer.runtime.layout import BUILDING_PREFIX, IndexRoot
from indexer.runtime.paths import DEFAULT_MODEL_NAME, DEFAULT_POOLING
from tests.indexer.test_build_signals import lock_is_free

from .conftest import REPO, start_server, stop_server

COMPOSE = REPO / "docker-compose.yml"
COMPOSE_GPU = REPO / "docker-compose.gpu.yml"


def dockerfile(name: str) -> str:
    return (REPO / "docker" / name).read_text()


def instruction(text: str, name: str) -> str:
    """The last `NAME …` instruction, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", text)
    lines = [ln for ln in joined.splitlines() if ln.startswith(f"{name} ")]
    assert lines, f"no {name}"
    return lines[-1][len(name) + 1:].strip()


def exec_form(text: str, name: str) -> list[str]:
    value = instruction(text, name)
    if name == "HEALTHCHECK":
        value = value.split(" CMD ", 1)[1]
    return json.loads(value)


def test_compose_services_ports_volumes_healthchecks() -> None:
    spec = yaml.safe_load(COMPOSE.read_text())
    services = spec["services"]
    assert {"api", "indexer", "nightly"} <= services.keys()
    api = services["api"]
    assert api["ports"] == ["${STRATA_API_PORT:-8000}:8000"] and api["restart"] == "unless-stopped"
    assert api["read_only"] is True and "/tmp" in api["tmpfs"]
    assert api["build"]["dockerfile"] == "docker/Dockerfile.api"
    assert api["volumes"] == ["strata:/data:ro", "api-state:/state"]  # the serving records survive restarts
    assert api["environment"]["STRATA_STATE_DIR"] == "/state" and "api-state" in spec["volumes"]
    hc = api["healthcheck"]
    assert hc["test"][0] == "CMD" and "http://127.0.0.1:8000/health" in " ".join(hc["test"])
    assert {"interval", "timeout", "retries", "start_period"} <= hc.keys()
    assert hc["test"][1:] == exec_form(dockerfile("Dockerfile.api"), "HEALTHCHECK")  # one probe, two places
    for name in ("indexer", "nightly"):
        job = services[name]
        assert job["build"]["dockerfile"] == "docker/Dockerfile.jobs" and job["volumes"] == ["strata:/data"]
        assert job["profiles"] in (["jobs"], ["nightly"])  # never started by a plain `docker compose up`
        assert job["init"] is True  # an init as PID 1 forwards `docker compose stop`'s SIGTERM
        assert "entrypoint" not in job  # the image's: jobs-entrypoint.sh, which handles the signal
    assert services["indexer"]["restart"] == "no"
    # the nightly runs the training chain unless told otherwise (the experiment's best encoder is a trained one)
    assert services["nightly"]["environment"]["STRATA_ADAPT"] == "${STRATA_ADAPT:-1}"
    assert services["indexer"]["environment"].items() < services["nightly"]["environment"].items()
    assert int(services["nightly"]["environment"]["STRATA_REBUILD_EVERY_S"]) > 0  # the loop
    assert "strata" in spec["volumes"]  # named, shared by api and jobs
    used = {v.split(":")[0] for s in services.values() for v in s.get("volumes", [])}
    assert used <= spec["volumes"].keys()
    for s in services.values():
        assert (REPO / s["build"]["dockerfile"]).is_file()


def test_gpu_variant_requests_the_gpu_and_the_gpu_extra() -> None:
    gpu = yaml.safe_load(COMPOSE_GPU.read_text())["services"]
    base = yaml.safe_load(COMPOSE.read_text())["services"]
    assert gpu.keys() <= base.keys()
    for name, s in gpu.items():
        devices = s["deploy"]["resources"]["reservations"]["devices"]
        assert devices[0]["capabilities"] == ["gpu"] and devices[0]["driver"] == "nvidia"
        assert "gpu" in s["build"]["args"]["EXTRAS"].split(","), name
    assert "cu1" in gpu["indexer"]["build"]["args"]["TORCH_INDEX"]


@pytest.mark.parametrize("name", ["Dockerfile.api", "Dockerfile.jobs"])
def test_dockerfiles_pinned_multistage_non_root(name: str) -> None:
    text = dockerfile(name)
    base = re.search(r"ARG PYTHON_IMAGE=(\S+)", text)
    assert base and re.fullmatch(r"python:\d+\.\d+\.\d+-slim-\w+(@sha256:[0-9a-f]{64})?", base.group(1))
    assert len(re.findall(r"^FROM ", text, flags=re.M)) == 2 and "AS build" in text
    assert "COPY --from=build /opt/venv /opt/venv" in text
    user = instruction(text, "USER")
    assert user not in ("root", "0")
    if name == "Dockerfile.api":
        code = "\n".join(ln for ln in text.splitlines() if not ln.startswith("#"))
        assert "ARG EXTRAS=serve" in code and "torch" not in code and "COPY models" not in code
        assert exec_form(text, "CMD") == ["python", "-m", "service"]
        assert "HEALTHCHECK" in text and "/health" in text
    else:
        assert "torch==2.13.0" in text and instruction(text, "ENTRYPOINT") == '["/usr/local/bin/jobs-entrypoint.sh"]'


def test_jobs_default_encoder_is_the_packages_default() -> None:
    """Without STRATA_CHECKPOINT the jobs export what `python -m service demo` serves (indexer.runtime.paths:
    all-MiniLM-L6-v2 with BERT-LC's layers 0,6) into the same folder name."""
    text = (REPO / "docker" / "jobs-entrypoint.sh").read_text()
    default = re.search(r'else\n  POOLING="\$\{STRATA_POOLING:-([^}]+)\}"\n  NAME="([^"]+)"', text)
    assert default, "the entrypoint's default pooling and model name"
    pooling, name = default.groups()
    assert pooling == DEFAULT_POOLING
    assert f"{name}-{pooling.replace(':', '-').replace(',', '-')}" == DEFAULT_MODEL_NAME


def test_container_commands_run_without_docker(tmp_path: Path, tiny_checkpoint: Path, quora_file: Path) -> None:
    """The jobs entrypoint (export when no model, then build) twice, as the nightly job runs it; then the API
    image's CMD on that volume and its HEALTHCHECK command."""
    home = tmp_path / "data"
    env = os.environ | {
        "PYTHONPATH": str(REPO),  # this checkout's code behind the `encoder`/`indexer` console scripts
        "STRATA_HOME": str(home), "STRATA_CHECKPOINT": str(tiny_checkpoint), "STRATA_QUORA": str(quora_file),
        "STRATA_BUILD_ARGS": "--rows 300 --threads 1 --keep 5", "HF_HUB_OFFLINE": "1",
    }
    entrypoint = str(REPO / "docker" / "jobs-entrypoint.sh")
    first = subprocess.run([entrypoint], env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    model = home / "models" / f"{tiny_checkpoint.name}-mean"  # another checkpoint: mean pooling, named after it
    assert (model / "encoder.onnx").is_file() and "built version" in first.stdout
    assert json.loads((model / "encoder.json").read_text())["quantization"] == "int8-static-qdq"  # the default
    second = subprocess.run([entrypoint], env=env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0 and "wrote " not in second.stdout  # model exists: no second export
    root = IndexRoot(home / "indexes" / "quora")
    assert len(root.versions()) == 2
    info = subprocess.run([entrypoint, "indexer", "info", "--root", str(root.root)], env=env, capture_output=True,
                          text=True, timeout=60)
    assert info.returncode == 0 and f"* {root.current_version()}" in info.stdout  # arguments replace the job

    api = dockerfile("Dockerfile.api")
    image_env = dict(re.findall(r"(STRATA_\w+)=(\S+)", instruction(api, "ENV")))
    cmd = exec_form(api, "CMD")
    assert cmd == ["python", "-m", "service"]  # what start_server runs
    # the image's environment, but on 127.0.0.1 and a free port (start_server's) instead of 0.0.0.0:8000
    server_env = {k: v for k, v in image_env.items() if k not in ("STRATA_HOST", "STRATA_PORT")}
    srv = start_server(tmp_path, server_env | {"STRATA_HOME": str(home), "STRATA_INDEX_ROOT": str(root.root)})
    port = srv.url.rsplit(":", 1)[1]
    try:
        probe = [part.replace("8000", str(port)) for part in exec_form(api, "HEALTHCHECK")]
        assert subprocess.run(probe, timeout=30).returncode == 0
        assert httpx.get(f"{srv.url}/ready").json()["index_version"] == root.current_version()
        # STRATA_LOG_FORMAT=json from the image: JSON lines only, no banner; the curl line is a field
        records = [json.loads(line) for line in srv.log.read_text().splitlines()]
        serving = [r for r in records if r["msg"] == f"serving on {srv.url}"]  # said once, after the bind
        assert len(serving) == 1 and serving[0]["try"].startswith("curl ")
    finally:
        stop_server(srv)
    dead = [part.replace("8000", str(port)) for part in exec_form(api, "HEALTHCHECK")]
    assert subprocess.run(dead, capture_output=True, timeout=30).returncode != 0  # the probe can fail


def copied_sources() -> set[str]:
    """What the Dockerfiles COPY from the build context (not from another stage)."""
    sources = set()
    for name in ("Dockerfile.api", "Dockerfile.jobs"):
        for line in re.sub(r"\\\n\s*", " ", dockerfile(name)).splitlines():
            words = line.split()
            if words[:1] == ["COPY"] and not any(w.startswith("--from") for w in words):
                sources |= {w.rstrip("/") for w in words[1:-1] if not w.startswith("--")}
    return sources


def test_dockerignore_admits_exactly_what_the_dockerfiles_copy() -> None:
    """`.git`, bench/, tests/, a local .venv/ and data stay out of the build context; what the images need is in."""
    lines = [ln.strip() for ln in (REPO / ".dockerignore").read_text().splitlines()]
    rules = [ln for ln in lines if ln and not ln.startswith("#")]
    assert rules[0] == "*"  # everything out, then the exceptions
    admitted = {r[1:].rstrip("/") for r in rules if r.startswith("!")}
    assert admitted == copied_sources() == {"pyproject.toml", "README.md", "indexer", "service", "models",
                                            "docker/constraints.txt", "docker/freeze_constraints.py",
                                            "docker/jobs-entrypoint.sh"}


def test_constraints_pin_every_dependency_of_the_image_extras() -> None:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    pins = {}
    for line in (REPO / "docker" / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, eq, version = line.partition("==")
            assert eq and re.fullmatch(r"[0-9][0-9A-Za-z.!]*", version), f"not an exact pin: {line}"
            pins[canonicalize_name(name)] = version
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    needed = {canonicalize_name(Requirement(r).name) for e in ("serve", "train") for r in extras[e]}
    assert needed <= pins.keys(), f"regenerate docker/constraints.txt: {sorted(needed - pins.keys())} unpinned"
    # one torch everywhere: the jobs image, the README's set-up command (and so CI), the constraints
    torch = re.search(r"torch==(\S+)", dockerfile("Dockerfile.jobs")).group(1)
    assert pins["torch"] == torch and f"pip install torch=={torch}" in (REPO / "README.md").read_text()
    for name in ("Dockerfile.api", "Dockerfile.jobs"):  # every dependency installed under the constraints
        text = dockerfile(name)
        assert "pip install -c docker/constraints.txt -r requirements.txt" in text, name
        assert "pip install --no-deps . && pip check" in text, name


def wait_for(predicate, what: str, proc: subprocess.Popen, timeout: float = 180) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not predicate():
        assert proc.poll() is None, f"exited {proc.returncode} before {what}"
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        time.sleep(0.02)


def terminate(proc: subprocess.Popen) -> float:
    """SIGTERM, as `docker compose stop` (through the container's init) sends it; the seconds until exit."""
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    return time.monotonic() - t0


def test_entrypoint_loop_stops_promptly_between_and_during_builds(tmp_path: Path, tiny_exported: Path,
                                                                   quora_file: Path) -> None:
    """The nightly loop (STRATA_REBUILD_EVERY_S > 0) exits 143 at once on SIGTERM, asleep or mid-build; a build
    stopped that way leaves no staging folder and releases its lock."""
    home = tmp_path / "data"
    root = IndexRoot(home / "indexes" / "quora")
    env = os.environ | {"PYTHONPATH": str(REPO), "STRATA_HOME": str(home), "STRATA_MODEL_DIR": str(tiny_exported),
                        "STRATA_QUORA": str(quora_file), "STRATA_REBUILD_EVERY_S": "3600", "HF_HUB_OFFLINE": "1"}
    entrypoint = [str(REPO / "docker" / "jobs-entrypoint.sh")]
    out, err = tmp_path / "out.log", tmp_path / "err.log"

    def start(build_args: str) -> subprocess.Popen:
        return subprocess.Popen(entrypoint, env=env | {"STRATA_BUILD_ARGS": f"{build_args} --threads 1"},
                                stdout=open(out, "w"), stderr=open(err, "w"), text=True)

    loop = start("--rows 300 --no-eval")
    wait_for(lambda: "built version" in out.read_text(), "first build", loop)
    took = terminate(loop)  # asleep until the next build
    assert loop.returncode == 143 and took < 5, (loop.returncode, took, err.read_text()[-2000:])
    assert "jobs-entrypoint: stopped" in err.read_text() and len(root.versions()) == 1

    loop = start("--rows 60000 --no-eval")  # long enough to be caught mid-build
    wait_for(lambda: bool(list(root.root.glob(f"{BUILDING_PREFIX}*"))), "staging folder", loop)
    took = terminate(loop)
    log = err.read_text()
    assert loop.returncode == 143 and took < 5, (loop.returncode, took, log[-2000:])
    assert "indexer build: terminated (SIGTERM)" in log and "jobs-entrypoint: stopped" in log
    assert "Traceback" not in log
    assert not list(root.root.glob(f"{BUILDING_PREFIX}*")) and len(root.versions()) == 1
    assert lock_is_free(root.root)


def test_entrypoint_folds_the_write_log_after_the_build(tmp_path: Path, tiny_exported: Path, quora_file: Path) -> None:
    """With a write log on the root (what the API's PUT /documents leaves), the nightly job builds from the source
    data, then `indexer compact` folds the log into the version it serves; without a log it compacts nothing."""
    import numpy as np

    from indexer.runtime.manifest import Manifest
    from indexer.runtime.writelog import Delete, Upsert, WriteLog, log_path

    home = tmp_path / "data"
    root = IndexRoot(home / "indexes" / "quora")
    wlog = WriteLog(log_path(root.root))  # written with another encoder: compact re-encodes the text
    wlog.append([Upsert(987_654_321, "a question written through the API", {}, np.ones(8, np.float32), "other"),
                 Delete(1)])
    wlog.close()
    env = os.environ | {"PYTHONPATH": str(REPO), "STRATA_HOME": str(home), "STRATA_MODEL_DIR": str(tiny_exported),
                        "STRATA_QUORA": str(quora_file), "STRATA_BUILD_ARGS": "--rows 300 --threads 1 --no-eval",
                        "HF_HUB_OFFLINE": "1"}
    r = subprocess.run([str(REPO / "docker" / "jobs-entrypoint.sh")], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "built version" in r.stdout and "folded 2 write log entries" in r.stdout, r.stdout
    built, compacted = root.versions()
    manifest = Manifest.load(root.current_dir())
    assert root.current_version() == compacted and manifest.parent_version == built
    assert manifest.writes is not None and (manifest.writes.folded_seq, manifest.writes.upserted) == (2, 1)
    assert manifest.index.ntotal == Manifest.load(root.version_dir(built)).index.ntotal + 1 - (manifest.writes.deleted)


def test_entrypoint_builds_the_collection_named_by_strata_collection(tmp_path: Path, tiny_exported: Path) -> None:
    """The jobs build any collection of the API's STRATA_COLLECTIONS_DIR (/data/indexes): STRATA_COLLECTION names
    the root, STRATA_DATA its corpus; the Quora root is not touched."""
    import json

    home = tmp_path / "data"
    corpus = tmp_path / "garden.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"g{i}", "text": f"dog cat sky blue {i}"}) + "\n" for i in range(40)))
    env = os.environ | {"PYTHONPATH": str(REPO), "STRATA_HOME": str(home), "STRATA_MODEL_DIR": str(tiny_exported),
                        "STRATA_COLLECTION": "garden", "STRATA_DATA": str(corpus),
                        "STRATA_BUILD_ARGS": "--threads 1 --no-eval", "HF_HUB_OFFLINE": "1"}
    r = subprocess.run([str(REPO / "docker" / "jobs-entrypoint.sh")], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    garden = IndexRoot(home / "indexes" / "garden")
    assert len(garden.versions()) == 1 and garden.current_version() is not None
    assert not (home / "indexes" / "quora").exists()


def test_entrypoint_adapt_chain_trains_once_and_builds_with_the_adapted_encoder(
        tmp_path: Path, tiny_checkpoint: Path) -> None:
    """STRATA_ADAPT=1: `encoder adapt` (train or reuse) → build with its encoder (an ivf build at a calibrated
    nprobe, or exact search below `--index auto`'s crossover); a second night reuses the training and only builds."""
    from indexer.runtime.manifest import Manifest
    from tests.conftest import write_quora_like

    home = tmp_path / "data"
    env = os.environ | {
        "PYTHONPATH": str(REPO), "STRATA_HOME": str(home), "STRATA_ADAPT": "1",
        "STRATA_CHECKPOINT": str(tiny_checkpoint), "STRATA_QUORA": str(write_quora_like(tmp_path / "q.tsv.gz")),
        "STRATA_ADAPT_ARGS": "--steps 6 --batch-size 8 --threads 1", "STRATA_QUANTIZE": "none",
        "STRATA_BUILD_ARGS": "--rows 60 --threads 1", "HF_HUB_OFFLINE": "1",
    }
    entrypoint = str(REPO / "docker" / "jobs-entrypoint.sh")
    first = subprocess.run([entrypoint], env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    adapted = home / "models" / f"{tiny_checkpoint.name}-adapted-mean"
    assert json.loads((adapted / "encoder.json").read_text())["pooling"] == "mean"
    assert not (home / "models" / f"{tiny_checkpoint.name}-mean").exists()  # no stock export in this chain
    root = IndexRoot(home / "indexes" / "quora")
    manifest = Manifest.load(root.current_dir())
    assert Path(manifest.model.dir) == adapted.resolve()
    if manifest.index.kind == "ivf":  # a corpus above `--index auto`'s crossover: ivf at the entrypoint's target recall
        assert manifest.index.nprobe_calibration is not None and manifest.index.nprobe_calibration.target_recall == 0.95
    else:  # these 60 rows: exact search, nothing to calibrate
        assert manifest.index.kind == "flat" and manifest.index.ntotal < 1_000, (manifest.index.kind,
                                                                                 manifest.index.ntotal)
    train_log = adapted.with_name(adapted.name + ".work") / "train" / "log.jsonl"
    lines = train_log.read_text().count("\n")
    second = subprocess.run([entrypoint], env=env, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    assert train_log.read_text().count("\n") == lines and len(root.versions()) == 2  # reused, built again
    bad = subprocess.run([entrypoint], env=env | {"STRATA_ADAPT": "yes"}, capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "STRATA_ADAPT must be 0, 1 or corpus, got 'yes'" in bad.stderr


def _worded_corpus(path: Path, n: int = 64) -> Path:
    import json
    import random

    from tests.models.fixtures import WORDS

    rng = random.Random(3)
    path.write_text("".join(json.dumps({"id": f"g{i}", "text": " ".join(rng.sample(WORDS, 11))}) + "\n"
                            for i in range(n)))
    return path


def test_entrypoint_adapt_1_never_adapts_another_corpus_unasked(tmp_path: Path, tiny_checkpoint: Path) -> None:
    """STRATA_ADAPT=1 (the nightly's compose default) is the supervised Quora recipe: a collection with another
    corpus is built with the stock encoder and a notice, never with a label-free adaptation nobody asked for."""
    from indexer.runtime.manifest import Manifest

    home = tmp_path / "data"
    env = os.environ | {
        "PYTHONPATH": str(REPO), "STRATA_HOME": str(home), "STRATA_ADAPT": "1", "STRATA_COLLECTION": "garden",
        "STRATA_DATA": str(_worded_corpus(tmp_path / "garden.jsonl")), "STRATA_CHECKPOINT": str(tiny_checkpoint),
        "STRATA_QUANTIZE": "none", "STRATA_BUILD_ARGS": "--threads 1 --no-eval", "HF_HUB_OFFLINE": "1"}
    r = subprocess.run([str(REPO / "docker" / "jobs-entrypoint.sh")], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "STRATA_ADAPT=1 adapts to the Quora TSV's duplicate labels only" in r.stderr
    assert sorted(p.name for p in (home / "models").iterdir()) == [f"{tiny_checkpoint.name}-mean"]
    manifest = Manifest.load(IndexRoot(home / "indexes" / "garden").current_dir())
    assert Path(manifest.model.dir) == (home / "models" / f"{tiny_checkpoint.name}-mean").resolve()


def test_entrypoint_adapt_corpus_adapts_label_free_when_asked(tmp_path: Path, tiny_checkpoint: Path) -> None:
    """STRATA_ADAPT=corpus: `encoder adapt --data CORPUS` (crops; without dev queries, selected on the proxy and
    marked unverified), then the build serves that encoder."""
    import json

    from indexer.runtime.manifest import Manifest

    home = tmp_path / "data"
    env = os.environ | {
        "PYTHONPATH": str(REPO), "STRATA_HOME": str(home), "STRATA_ADAPT": "corpus", "STRATA_COLLECTION": "garden",
        "STRATA_DATA": str(_worded_corpus(tmp_path / "garden.jsonl")), "STRATA_CHECKPOINT": str(tiny_checkpoint),
        "STRATA_ADAPT_ARGS": "--steps 4 --batch-size 8 --max-length 32 --eval-every 2 --threads 1",
        "STRATA_QUANTIZE": "none", "STRATA_BUILD_ARGS": "--threads 1 --no-eval", "HF_HUB_OFFLINE": "1"}
    r = subprocess.run([str(REPO / "docker" / "jobs-entrypoint.sh")], env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    adapted = home / "models" / f"{tiny_checkpoint.name}-adapted-to-garden"
    meta = json.loads((adapted / "encoder.json").read_text())["adaptation"]
    assert meta["recipe"] == "crops" and meta["verified"] is False and "proxy" in meta["selected_on"]
    manifest = Manifest.load(IndexRoot(home / "indexes" / "garden").current_dir())
    assert Path(manifest.model.dir) == adapted.resolve()


def test_entrypoint_rejects_a_bad_interval(tmp_path: Path) -> None:
    r = subprocess.run([str(REPO / "docker" / "jobs-entrypoint.sh")], capture_output=True, text=True, timeout=30,
                       env=os.environ | {"STRATA_HOME": str(tmp_path), "STRATA_REBUILD_EVERY_S": "1d"})
    assert r.returncode == 2
    assert "STRATA_REBUILD_EVERY_S must be a whole number of seconds, got '1d'" in r.stderr


SMOKE_STEPS = ["engine reachable", "setup", "build api image", "build jobs image", "compose up -d, GET /health",
               "GET /ready 503 before the first build", "jobs profile: indexer --rows 3000",
               "API swaps to the new version", "POST /search", "nightly profile once",
               "API swaps to the nightly version", "compose stop mid-build", "nothing half-made, lock free",
               "cleanup: compose down -v"]


def engine_unreachable() -> str | None:
    """Why no container engine can be used here, or None."""
    if shutil.which("docker") is None:
        return "no docker command"
    try:
        r = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return "`docker info` did not answer within 60 s"
    if r.returncode != 0:
        lines = (r.stderr or r.stdout).strip().splitlines()
        return f"`docker info` failed: {lines[-1] if lines else r.returncode}"
    return None


def test_compose_smoke_on_a_real_engine(tmp_path: Path, quora_file: Path) -> None:
    """docker/smoke.sh: both images built, the stack up, a jobs build swapped in and searched, the nightly once,
    then stopped mid-build in seconds with nothing half-made; every step must print PASS."""
    why = engine_unreachable()
    if why:
        pytest.skip(f"no container engine reachable ({why}); start one with "
                    f'`eval "$(../shared/tools/container-engine up)"`')
    env = os.environ | {"STRATA_SMOKE_DATA": str(quora_file), "STRATA_SMOKE_ROWS": "3000",
                        "STRATA_SMOKE_LOGS": str(tmp_path / "logs")}
    env.pop("STRATA_API_PORT", None)  # a free port
    proc = subprocess.Popen([str(REPO / "docker" / "smoke.sh")], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=1800)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)  # the script and its docker commands; its trap runs `compose down -v`
        output, _ = proc.communicate(timeout=180)
        pytest.fail(f"docker/smoke.sh took over 30 min:\n{output}")
    print(output)
    lines = output.splitlines()
    assert proc.returncode == 0 and not [ln for ln in lines if ln.startswith("FAIL")], output
    passed = [ln[6:].split(" (")[0] for ln in lines if ln.startswith("PASS  ")]
    assert passed == SMOKE_STEPS, output
    assert re.search(r"exit codes api=0 nightly=143", output), output
