"""The peers' virtual environments under `bench/.venv-peers/` (gitignored), created on first use.

The peers pin other versions of packages Strata also uses, and each other's pins collide (infinity-emb's
optimum needs transformers < 4.53, txtai and sentence-transformers 6 need transformers ≥ 5), so each group gets
its own venv. torch is installed first from the CPU wheel so that pip never reaches for the CUDA build. None of
this is a project dependency.

    python -m bench.peers.venvs            # create / complete all of them, print the installed versions
"""

from __future__ import annotations

import json
import subprocess
import sys
import venv
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / ".venv-peers"
TORCH = "torch==2.13.0"  # the CPU wheel this machine's pip finds locally; the peers' own pins allow it


@dataclass(frozen=True)
class PeerVenv:
    name: str
    torch: bool  # install the CPU torch wheel before `packages`
    packages: tuple[str, ...]
    report: tuple[str, ...]  # distributions whose versions the results record

    @property
    def path(self) -> Path:
        return ROOT / self.name

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"


VENVS: dict[str, PeerVenv] = {v.name: v for v in (
    # fastembed, sentence-transformers' ONNX backend (+ its int8 export) and the ANN peers share one venv.
    # sentence-transformers 5.1: 6.x's [onnx] extra cannot be installed (it needs transformers >= 5, every
    # optimum-onnx release needs < 4.58).
    PeerVenv("encoders", True,
             ("fastembed==0.9.1", "sentence-transformers[onnx]==5.1.2", "usearch==2.26.6", "hnswlib==0.8.0"),
             ("fastembed", "sentence-transformers", "optimum", "optimum-onnx", "onnxruntime", "transformers",
              "usearch", "hnswlib", "torch")),
    PeerVenv("infinity", True, ("infinity-emb[optimum,server]==0.0.78",),
             ("infinity-emb", "optimum", "onnxruntime", "transformers", "torch")),
    PeerVenv("txtai", True, ("txtai[api]==9.14.0", "faiss-cpu==1.15.1"),
             ("txtai", "faiss-cpu", "sentence-transformers", "transformers", "torch")),
    # the vector databases of bench/peers_scale.py (fed vectors: no torch)
    PeerVenv("chroma", False, ("chromadb==1.5.9", "pyarrow==26.0.1"), ("chromadb", "numpy", "pyarrow")),
    PeerVenv("milvus", False, ("pymilvus==3.0.2", "milvus-lite==3.2.2", "pyarrow==26.0.1"),
             ("pymilvus", "milvus-lite", "faiss-cpu", "numpy", "pyarrow")),
)}


class VenvError(RuntimeError):
    """A peer's venv could not be created; the message holds pip's own last lines."""


def ensure(v: PeerVenv) -> Path:
    """Create `v` if its marker is missing; returns its python. Raises VenvError with pip's tail on failure."""
    marker = v.path / ".strata-complete"
    if marker.is_file() and marker.read_text() == json.dumps(v.packages):
        return v.python
    if not v.python.exists():
        venv.EnvBuilder(with_pip=True, clear=True).create(v.path)
    steps = ([[TORCH]] if v.torch else []) + [list(v.packages)]
    for pkgs in steps:
        proc = subprocess.run([str(v.python), "-m", "pip", "install", "--quiet", *pkgs], capture_output=True,
                              text=True)
        if proc.returncode != 0:
            lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if not ln.startswith("WARNING: Loc")]
            raise VenvError(f"pip install {' '.join(pkgs)} failed ({proc.returncode}):\n" + "\n".join(lines[-15:]))
    marker.write_text(json.dumps(v.packages))
    return v.python


def versions(v: PeerVenv) -> dict[str, str]:
    code = ("import importlib.metadata as m, json, sys\n"
            "out = {}\n"
            "for d in sys.argv[1:]:\n"
            "    try: out[d] = m.version(d)\n"
            "    except m.PackageNotFoundError: pass\n"
            "print(json.dumps(out))")
    proc = subprocess.run([str(v.python), "-c", code, *v.report], capture_output=True, text=True, check=True)
    return json.loads(proc.stdout)


def main() -> int:
    failed = 0
    for v in VENVS.values():
        try:
            ensure(v)
            print(v.name, versions(v), flush=True)
        except VenvError as e:
            failed += 1
            print(f"{v.name}: {e}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
