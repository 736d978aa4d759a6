"""Write the int8 gate's shipped fp32 references (`models/gate_refs/`): for each fp32 export given, its
figures on the gate's screen sample (500 STS-B dev pairs, the first 2,000 Quora rows), under the key the gate looks
up (`models.int8_gate.cache_key`: the graph's sha256, its max length, the sample's content). Run it on
`encoder export --quantize none` outputs of the default checkpoint, one per served pooling (mean: the quickstart's;
layers:0,6: the demo's); the exporter writes the same graph bit for bit from the same checkpoint and torch, so the
first export on another machine finds them (`tests/models/test_int8_gate.py` checks the session's mean
export). models/gate_refs/README.md lists what is shipped.

    python bench/gate_reference.py FP32_DIR [FP32_DIR ...]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from indexer.runtime.encoder import ENCODER_META, OnnxEncoder  # noqa: E402
from models.int8_gate import PACKAGED, SCREEN_PAIRS, SCREEN_ROWS, cache_key, measure, stsb_x100  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("fp32", type=Path, nargs="+", help="fp32 exports (encoder export --quantize none)")
    args = ap.parse_args()
    PACKAGED.mkdir(exist_ok=True)
    for folder in args.fp32:
        meta = json.loads((folder / ENCODER_META).read_text())
        if meta.get("quantization"):
            raise SystemExit(f"{folder} is {meta['quantization']}: the reference is the fp32 graph's")
        key = cache_key(folder, SCREEN_PAIRS, SCREEN_ROWS)
        enc = OnnxEncoder(folder)
        try:
            items = measure(enc, "fp32 reference", SCREEN_PAIRS, SCREEN_ROWS)
        finally:
            enc.close()
        out = PACKAGED / f"{key}.npz"
        np.savez_compressed(out, cosines=items.cosines, gold=items.gold, rr=items.rr)
        print(f"{out.relative_to(REPO)}: pooling {meta['pooling']}, onnx {meta['onnx_sha256'][:12]}…, STS-B dev "
              f"{stsb_x100(items):.2f}, Quora MRR@10 {items.rr.mean() * 100:.2f} ({len(items.rr)} queries)")


if __name__ == "__main__":
    main()
