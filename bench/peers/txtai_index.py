"""txtai builds its own index of the serving corpus (the same ids and texts as Strata's index) with its FAISS
backend and its default settings, and saves it for its API to load. Runs in the txtai venv.

    python txtai_index.py MODEL_DIR CORPUS.npz INDEX_DIR CONFIG.yml     # prints {"seconds", "docs", "config"}
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import yaml
from txtai import Embeddings


def main() -> int:
    model, corpus, index_dir, config_file = sys.argv[1], np.load(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])
    settings = {"path": model, "backend": "faiss", "content": True}
    t0 = time.perf_counter()
    emb = Embeddings(**settings)
    emb.index((int(i), str(t), None) for i, t in zip(corpus["ids"], corpus["texts"], strict=True))
    emb.save(str(index_dir))
    seconds = time.perf_counter() - t0
    # The API loads the saved index at `path`; `embeddings` is the configuration it was built with.
    config_file.write_text(yaml.safe_dump({"path": str(index_dir), "writable": False, "embeddings": settings}))
    # txtai picks the FAISS factory by corpus size (IDMap,Flat when small, IVF<n>,Flat above) and records it
    ann = {"backend": emb.config.get("backend"), **(emb.config.get("build", {}).get("settings") or {})}
    if getattr(emb.ann, "backend", None) is not None and hasattr(emb.ann.backend, "nprobe"):
        ann["nprobe"] = emb.ann.nprobe()
    print(json.dumps({"seconds": round(seconds, 1), "docs": emb.count(), "config": ann}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
