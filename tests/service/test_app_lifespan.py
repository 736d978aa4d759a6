"""What the app's lifespan sets for the process while it serves, and gives back when it stops."""

from __future__ import annotations

import gc
from pathlib import Path

import httpx

from service.main import GC_THRESHOLDS, create_app
from service.settings import Settings
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
