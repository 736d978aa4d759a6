"""What the app's lifespan sets for the process while it serves, and gives back when it stops."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from service.main import GC_THRESHOLDS, create_app
from service.settings import Settings
from tests.conftest import REPO
from tests.service.test_tracing import InProcessServer


def test_the_collector_runs_rarely_over_a_frozen_startup_while_serving_and_is_given_back_after(tmp_path: Path
                                                                                                ) -> None:
    """While the app serves, what startup loaded is frozen (left out of full collections) and the thresholds are
    `GC_THRESHOLDS` (a full collection walks the overlay's maps of written documents: rare, so that hardly any
    search meets one); once it stops, both are as before."""
    (tmp_path / "faq" / "versions").mkdir(parents=True)
    before = gc.get_threshold()
    assert before != GC_THRESHOLDS
    app = create_app(Settings(collections_dir=tmp_path, watch_interval_s=0, workers=1, threads=1))
    with InProcessServer(app) as srv, httpx.Client(base_url=srv.url, timeout=60) as c:
        assert c.get("/health").status_code == 200
        assert gc.get_threshold() == GC_THRESHOLDS and gc.get_freeze_count() > 10_000
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


@pytest.mark.parametrize(("env", "line"), [
    ({"STRATA_LOG_LEVEL": "bogus"}, "STRATA_LOG_LEVEL='bogus': Input should be 'critical'"),
    ({"STRATA_CORS_ORIGINS": "https://app.example"}, "STRATA_CORS_ORIGINS: not valid JSON"),
    ({"STRATA_PUBLIC_PATHS": "/health"}, "STRATA_PUBLIC_PATHS: not valid JSON"),
    ({"STRATA_API_KEYS_FILE": "/nonexistent/keys"}, "STRATA_API_KEYS_FILE /nonexistent/keys: cannot be read"),
])
def test_a_bad_setting_exits_2_with_one_line_naming_it(tmp_path: Path, env: dict[str, str], line: str) -> None:
    """A level logging does not know, a list setting that is not JSON, a keys file that cannot be read: each was a
    traceback (exit 1) out of logging, pydantic-settings or the file read."""
    r = subprocess.run([sys.executable, "-m", "service"], cwd=REPO, capture_output=True, text=True, timeout=120,
                       env=os.environ | {"STRATA_INDEX_ROOT": str(tmp_path), "STRATA_PORT": "1"} | env)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith(f"python -m service: error: {line}"), r.stderr


def test_a_bad_flag_value_is_named_as_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    """`--port 99999` was reported as `STRATA_PORT=99999`, a variable the operator never set."""
    from service.__main__ import main

    assert main(["--port", "99999"]) == 2
    assert capsys.readouterr().err == "python -m service: error: --port=99999: Input should be less than or equal to " \
                                      "65535\n"
