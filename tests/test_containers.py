"""Containers without a Docker engine: the compose files and Dockerfiles are parsed and checked, and the exact
commands of each image (jobs entrypoint, API CMD, HEALTHCHECK) are run here as they would run inside."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import httpx
import pytest
import yaml

from indexer.layout import IndexRoot

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
    assert api["ports"] == ["8000:8000"] and api["restart"] == "unless-stopped"
    assert api["read_only"] is True and "/tmp" in api["tmpfs"]
    assert api["build"]["dockerfile"] == "docker/Dockerfile.api"
    assert api["volumes"] == ["strata:/data:ro"]
    hc = api["healthcheck"]
    assert hc["test"][0] == "CMD" and "http://127.0.0.1:8000/health" in " ".join(hc["test"])
    assert {"interval", "timeout", "retries", "start_period"} <= hc.keys()
    assert hc["test"][1:] == exec_form(dockerfile("Dockerfile.api"), "HEALTHCHECK")  # one probe, two places
    for name in ("indexer", "nightly"):
        job = services[name]
        assert job["build"]["dockerfile"] == "docker/Dockerfile.jobs" and job["volumes"] == ["strata:/data"]
        assert job["profiles"] in (["jobs"], ["nightly"])  # never started by a plain `docker compose up`
    assert services["indexer"]["restart"] == "no"
    assert "jobs-entrypoint.sh" in " ".join(services["nightly"]["entrypoint"])
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
    model = home / "models" / "all-MiniLM-L6-v2-mean"
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
        first_line = srv.log.read_text().splitlines()[0]
        assert json.loads(first_line)["level"]  # STRATA_LOG_FORMAT=json from the image
    finally:
        stop_server(srv)
    dead = [part.replace("8000", str(port)) for part in exec_form(api, "HEALTHCHECK")]
    assert subprocess.run(dead, capture_output=True, timeout=30).returncode != 0  # the probe can fail
