"""Which matrix kernels the faiss-cpu wheel's own OpenBLAS runs: chosen from the CPU's flags when OpenBLAS is loaded.

The wheel bundles OpenBLAS 0.3.15, which does not know CPUs newer than itself and then falls back to its oldest
kernels ("Prescott", SSE3): on a Sapphire Rapids core with AVX-512 every BLAS call FAISS makes (k-means' assignment,
adding many vectors to IVF lists, exact top k of many queries) ran several times slower than with the kernels the
CPU can run (docs/decisions.md, costs behind implementation choices). OpenBLAS reads `OPENBLAS_CORETYPE` once, when
the library is loaded, i.e. when faiss is first imported; `prefer_native_kernels` sets it from /proc/cpuinfo before
that, unless the environment already names one (the user's choice wins): "SkylakeX" with the AVX-512 foundation
the SkylakeX kernels use, else "Haswell" with AVX2 and FMA, else nothing (OpenBLAS's own detection). Children (a
compaction, a build's workers) inherit it.

May import: the standard library only (it runs before faiss is imported).
"""

from __future__ import annotations

import os
import platform
from collections.abc import Set
from pathlib import Path

CORETYPE_ENV = "OPENBLAS_CORETYPE"
_SKYLAKEX = frozenset({"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"})
_HASWELL = frozenset({"avx2", "fma"})


def coretype_for(flags: Set[str]) -> str | None:
    """The OpenBLAS kernel family a CPU with `flags` (as /proc/cpuinfo lists them) runs best of those it can."""
    if _SKYLAKEX <= flags:
        return "SkylakeX"
    if _HASWELL <= flags:
        return "Haswell"
    return None


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The first processor's flags (empty where there is no /proc/cpuinfo)."""
    try:
        with cpuinfo.open() as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


def prefer_native_kernels() -> None:
    """Set `OPENBLAS_CORETYPE` for this process and its children (x86-64 Linux, not already set; left unset when
    the flags name no family: OpenBLAS detects)."""
    if CORETYPE_ENV not in os.environ and platform.system() == "Linux" and platform.machine() == "x86_64":
        chosen = coretype_for(cpu_flags())
        if chosen is not None:
            os.environ[CORETYPE_ENV] = chosen
