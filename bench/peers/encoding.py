"""Encoding side by side: every contender loaded once in its own worker process (`encode_worker.py`, with the
interpreter of the venv that holds its library), then timed in interleaved rounds (A B C … A B C …) so that
the shared machine's load falls on all of them alike. Figures are medians over rounds; ratios are taken
between those medians.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import interleave, median, percentiles

WORKER = Path(__file__).with_name("encode_worker.py")


@dataclass
class Contender:
    name: str
    python: Path
    kind: str  # encode_worker.LOADERS key
    model: str
    proc: subprocess.Popen[str] | None = field(default=None, repr=False)

    def start(self, texts_file: Path, threads: int) -> None:
        self.proc = subprocess.Popen([str(self.python), str(WORKER), self.kind, self.model, str(texts_file),
                                      str(threads)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self._read()

    def ask(self, **cmd: Any) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def _read(self) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            err = self.proc.stderr.read() if self.proc.stderr else ""
            raise RuntimeError(f"{self.name} worker exited: {err.strip().splitlines()[-1:] or 'no output'}\n"
                               + "\n".join(err.strip().splitlines()[-8:]))
        return json.loads(line)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            try:
                self.ask(op="quit")
            except (RuntimeError, BrokenPipeError, ValueError):
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def measure(contenders: list[Contender], texts: list[str], *, rounds: int, single: int, threads: int,
            reference: str, log=print) -> dict[str, Any]:  # noqa: ANN001
    """Sentences/s at batch 64 and single-text latency per contender (medians over interleaved rounds), min
    cosine to `reference`'s vectors on the first 128 texts, and per-contender determinism (the same 128 texts
    encoded twice at batch 64 and once at batch 1)."""
    work = Path(tempfile.mkdtemp(prefix="strata-enc-"))
    texts_file = work / "texts.json"
    texts_file.write_text(json.dumps(texts))
    started: list[Contender] = []
    errors: dict[str, str] = {}
    for c in contenders:
        log(f"loading {c.name}")
        try:
            c.start(texts_file, threads)
            started.append(c)
        except Exception as e:  # a peer that cannot load offline is recorded, not fatal
            errors[c.name] = str(e)
            log(f"  {c.name} failed: {e}")
    try:
        n_vec = min(128, len(texts))
        vecs: dict[str, np.ndarray] = {}
        det: dict[str, dict[str, Any]] = {}
        for c in started:
            a = np.load(c.ask(op="vectors", n=n_vec, batch=64, out=str(work / f"{id(c)}-a.npy"))["saved"])
            b = np.load(c.ask(op="vectors", n=n_vec, batch=64, out=str(work / f"{id(c)}-b.npy"))["saved"])
            one = np.load(c.ask(op="vectors", n=n_vec, batch=1, out=str(work / f"{id(c)}-1.npy"))["saved"])
            vecs[c.name] = a
            det[c.name] = {"repeat_bitwise_equal": bool(np.array_equal(a, b)),
                           "batch1_vs_batch64_max_abs_diff": float(np.max(np.abs(a - one)))}
        tput: dict[str, list[float]] = {c.name: [] for c in started}
        lat: dict[str, list[float]] = {c.name: [] for c in started}
        for r, c in interleave(started, rounds):
            s = c.ask(op="throughput", batch=64)["seconds"]
            tput[c.name].append(len(texts) / s)
            lat[c.name].extend(c.ask(op="latency", n=single)["ms"])
            log(f"  round {r + 1}: {c.name} {len(texts) / s:.0f} sent/s")
    finally:
        for c in started:
            c.stop()
    ref = vecs.get(reference)
    rows = []
    for c in started:
        p = percentiles(lat[c.name], (50, 99))
        rows.append({"encoder": c.name, "sentences_per_s_b64": round(median(tput[c.name]), 1),
                     "rounds_b64": [round(x, 1) for x in tput[c.name]],
                     "single_p50_ms": round(p[50], 2), "single_p99_ms": round(p[99], 2),
                     "min_cosine_vs_ref": (round(float(np.min(np.sum(vecs[c.name] * ref, axis=1))), 5)
                                           if ref is not None else None),
                     **det[c.name]})
    return {"texts": len(texts), "rounds": rounds, "single": single, "threads": threads, "reference": reference,
            "rows": rows, "errors": errors}


if __name__ == "__main__":  # pragma: no cover - run through bench/compare.py
    sys.exit("run bench/compare.py")
