"""The figures of docs/scaling.md: one log-log plot per figure of `bench/scale.py` against N.

    python -m bench.scale_plots            # reads bench/results/scale-*.json, writes docs/scaling-*.png

For each size the latest result that measured it is taken (`-nommap` and `-cold-filters` runs are left out: they
serve the same build another way, or other requests; a `-latency` run, `bench.scale --latency-only`, replaces only
the served figures of the run before it).
Figures a run did not reach (cut short) are left out of that size's points.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
DOCS = REPO / "docs"

Series = dict[str, Callable[[dict[str, Any]], float | None]]


def stamp_of(path: Path) -> str:
    """The run's UTC stamp in a result's name (`…-20261128T1351Z…`), comparable as text."""
    m = re.search(r"(\d{8}T\d{4,6})Z", path.stem)
    return m.group(1).ljust(15, "0") if m else ""


def latest_per_size() -> list[dict[str, Any]]:
    """The latest measurement of each N, by the stamp in the file's name (not the name itself: a run of several
    sizes, `scale-100000-1000000-…`, sorts before an older `scale-1000000-…`)."""
    by_n: dict[int, dict[str, Any]] = {}
    for path in sorted(RESULTS.glob("scale-*.json"), key=stamp_of):
        if path.stem.endswith("-nommap") or "-cold-filters" in path.stem:  # other builds' or requests' figures
            continue
        for r in json.loads(path.read_text()):
            n = int(r["n_docs"])
            if path.stem.endswith("-latency") and n in by_n:  # a later serving of the same build: its figures win
                by_n[n] = by_n[n] | {k: r[k] for k in ("search", "startup_s", "steady_rss_mib") if k in r}
            else:
                by_n[n] = r
    return [by_n[n] for n in sorted(by_n)]


def _get(*keys: str) -> Callable[[dict[str, Any]], float | None]:
    def read(r: dict[str, Any]) -> float | None:
        v: Any = r
        for k in keys:
            if not isinstance(v, dict) or k not in v:
                return None
            v = v[k]
        return float(v) if isinstance(v, (int, float)) else None
    return read


def _search(mode: str, flt: str, conns: int, key: str = "p50_ms") -> Callable[[dict[str, Any]], float | None]:
    def read(r: dict[str, Any]) -> float | None:
        for s in r.get("search", []):
            if s["mode"] == mode and s["filter"] == flt and s["conns"] == conns:
                return float(s[key])
        return None
    return read


FIGURES: dict[str, tuple[str, Series]] = {
    "build-seconds": ("build wall seconds by stage (under each run's load)", {
        "total": _get("stages_s", "total_s"), "load (read + store)": _get("stages_s", "load_s"),
        "k-means": _get("stages_s", "train_s"), "add": _get("stages_s", "add_s"),
        "BM25": _get("stages_s", "lexical_s"), "calibration": _get("stages_s", "calibrate_s")}),
    "build-rss": ("build peak RSS (MiB)", {"peak RSS": _get("build", "peak_rss_mib")}),
    "bytes-per-doc": ("bytes per document on disk", {
        "total": _get("bytes_per_doc", "total_on_disk"), "vectors": _get("bytes_per_doc", "vectors"),
        "store": _get("bytes_per_doc", "store"), "filters": _get("bytes_per_doc", "filters"),
        "lexical": _get("bytes_per_doc", "lexical"), "quantizer+lists": _get("bytes_per_doc", "quantizer+lists")}),
    "serving-rss": ("serving RSS (MiB)", {
        "steady": _get("swap", "steady_rss_mib"), "steady anonymous": _get("swap", "steady_anon_mib"),
        "swap peak": _get("swap", "swap_peak_rss_mib"), "swap peak anonymous": _get("swap", "swap_peak_anon_mib")}),
    "startup": ("startup to /ready (s, checksums on)", {"startup": _get("startup_s")}),
    "search-p50": ("/search p50 ms, 1 connection", {
        f"{m}{' 1 % filter' if f != 'none' else ''}": _search(m, f, 1)
        for m in ("dense", "lexical", "hybrid") for f in ("none", "1 %")}),
    "throughput": ("/search requests/s, 8 connections", {
        m: _search(m, "none", 8, "rps") for m in ("dense", "lexical", "hybrid")}),
}


def plot(results: list[dict[str, Any]], out: Path = DOCS) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for name, (title, series) in FIGURES.items():
        fig, ax = plt.subplots(figsize=(6, 4))
        for label, read in series.items():
            pts = [(r["n_docs"], v) for r in results if (v := read(r)) is not None and v > 0]
            if pts:
                ax.plot(*zip(*pts, strict=True), marker="o", label=label)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("documents (N)")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = out / f"scaling-{name}.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        written.append(path)
    return written


if __name__ == "__main__":
    for p in plot(latest_per_size()):
        print(p)
