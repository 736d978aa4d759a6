"""sentence-transformers' own ONNX export of a local checkpoint, and its own dynamic int8 export of that, into
a copy of the checkpoint folder (the installed package's folder is left untouched). Runs in the encoders venv.

    python st_export.py SRC_DIR OUT_DIR      # prints the int8 file name, relative to OUT_DIR
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def main() -> int:
    src, out = Path(sys.argv[1]), Path(sys.argv[2])
    config = "avx512_vnni" if "avx512_vnni" in Path("/proc/cpuinfo").read_text() else "avx2"
    int8_name = f"onnx/model_qint8_{config}.onnx"
    if not (out / int8_name).is_file():
        from sentence_transformers import SentenceTransformer
        from sentence_transformers.backend import export_dynamic_quantized_onnx_model

        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(src, out)
        # No onnx/model.onnx yet: sentence-transformers exports one with optimum, from the local weights.
        model = SentenceTransformer(str(out), device="cpu", backend="onnx", local_files_only=True)
        model.save_pretrained(str(out))
        export_dynamic_quantized_onnx_model(model, config, str(out))
    print(int8_name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
