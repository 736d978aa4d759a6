"""The scale corpus's text (`bench/scale_corpus.py`) behaves like text: its vocabulary grows with N as a real
collection's does (Heaps' law), run as the benchmarks run it (a subprocess: tests do not import `bench`)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
WORDS = Path("/usr/share/dict/american-english")


def vocab(tmp: Path, *sizes: int, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "bench.scale_corpus", "vocab", *map(str, sizes), "--quick"]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300,
                          env=os.environ | {"PYTHONPATH": str(REPO), "STRATA_SCALE_CACHE": str(tmp)} | (env or {}))


def test_vocabulary_grows_with_n_like_real_text(tmp_path: Path, quora_file: Path) -> None:
    """Quora's training questions: 11,134 terms at 20k, 22,833 at 80k (Heaps' exponent 0.52), 38-41 % of terms
    in one document, 10 words at the median. Recombined seeds alone stay near the seeds' vocabulary (exponent
    ~0.05)."""
    if not WORDS.is_file():
        pytest.skip(f"{WORDS} missing: apt-get install -y wamerican")
    r = vocab(tmp_path, 20_000, 80_000)
    assert r.returncode == 0, r.stderr[-2000:]
    small, large = json.loads(r.stdout.splitlines()[-1])
    heaps = math.log(large["terms"] / small["terms"]) / math.log(large["docs"] / small["docs"])
    assert 0.4 <= heaps <= 0.65, (heaps, small, large)
    assert 20_000 <= large["terms"] <= 35_000
    assert 0.3 <= small["df1_share"] <= large["df1_share"] <= 0.55
    assert large["words_p10_p50_p90"][1] == 10


def test_a_missing_word_list_is_a_clear_error(tmp_path: Path) -> None:
    r = vocab(tmp_path, 1_000, env={"STRATA_WORDS": str(tmp_path / "no-words")})
    assert r.returncode == 1
    assert "apt-get install -y wamerican" in r.stderr and "Traceback" not in r.stderr, r.stderr
