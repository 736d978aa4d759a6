"""One encoder, kept loaded in its own process, timed on command: the coordinator (`bench/peers/encoding.py`)
starts one per contender, each with the interpreter of the venv that holds its library, and interleaves rounds.

Standalone on purpose (it runs inside the peers' venvs): only `strata` imports the project, by path.

Protocol: one JSON object per line on stdin, one JSON answer per line on stdout (logs go to stderr):
    {"op": "throughput", "batch": 64}     -> {"seconds": s}       (encode every text in one call)
    {"op": "latency", "n": 300}           -> {"ms": [..]}          (one text per call)
    {"op": "vectors", "n": 256, "out": P} -> {"saved": P}          (.npy of the first n texts, L2-normalised)
    {"op": "quit"}

    python encode_worker.py KIND MODEL TEXTS.json THREADS        # KIND: see LOADERS
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

Encode = Callable[[list[str], int], np.ndarray]  # (texts, batch size) -> (n, dim) L2-normalised vectors


def _normalise(v: np.ndarray) -> np.ndarray:
    v = np.asarray(v, dtype=np.float32)
    return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)


def st_torch(model: str, threads: int) -> Encode:
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(threads)
    st = SentenceTransformer(model, device="cpu")
    return lambda texts, b: st.encode(texts, batch_size=b, normalize_embeddings=True, convert_to_numpy=True)


def st_onnx(model: str, threads: int) -> Encode:
    """MODEL = 'DIR' (sentence-transformers' own ONNX export in DIR/onnx/model.onnx) or 'DIR::onnx/FILE'."""
    import onnxruntime as ort
    from sentence_transformers import SentenceTransformer

    folder, _, file_name = model.partition("::")
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    kwargs = {"file_name": file_name or "onnx/model.onnx", "session_options": opts, "provider": "CPUExecutionProvider"}
    st = SentenceTransformer(folder, device="cpu", backend="onnx", model_kwargs=kwargs, local_files_only=True)
    return lambda texts, b: st.encode(texts, batch_size=b, normalize_embeddings=True, convert_to_numpy=True)


def fastembed(model: str, threads: int) -> Encode:
    """Strata's exported `encoder.onnx` (its graph ends in the pooled sentence vector) run by fastembed."""
    from fastembed import TextEmbedding
    from fastembed.common.model_description import ModelSource, PoolingType

    name = f"strata-local/{Path(model).name}"
    dim = json.loads((Path(model) / "encoder.json").read_text())["dim"]
    try:
        TextEmbedding.add_custom_model(model=name, pooling=PoolingType.DISABLED, normalization=True,
                                       sources=ModelSource(hf="strata-local/unused"), dim=dim,
                                       model_file="encoder.onnx")
    except ValueError:  # registered already in this process
        pass
    fe = TextEmbedding(model_name=name, specific_model_path=model, threads=threads, local_files_only=True)
    return lambda texts, b: np.asarray(list(fe.embed(texts, batch_size=b)), dtype=np.float32)


def strata(model: str, threads: int) -> Encode:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from indexer.runtime.encoder import OnnxEncoder

    enc = OnnxEncoder(model, threads=threads)
    return lambda texts, b: enc.encode_with_flags(texts, batch_size=b)[0]


LOADERS: dict[str, Callable[[str, int], Encode]] = {
    "st-torch": st_torch, "st-onnx": st_onnx, "fastembed": fastembed, "strata": strata,
}


def serve(encode: Encode, texts: list[str]) -> None:
    encode(texts[:128], 64)  # warm-up: first runs allocate arenas and pick kernels
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        if op == "quit":
            return
        if op == "throughput":
            t0 = time.perf_counter()
            encode(texts, int(cmd["batch"]))
            answer: dict[str, object] = {"seconds": time.perf_counter() - t0}
        elif op == "latency":
            ms = []
            for t in texts[: int(cmd["n"])]:
                t0 = time.perf_counter()
                encode([t], 1)
                ms.append((time.perf_counter() - t0) * 1000)
            answer = {"ms": ms}
        elif op == "vectors":
            np.save(cmd["out"], _normalise(encode(texts[: int(cmd["n"])], int(cmd.get("batch", 64)))))
            answer = {"saved": cmd["out"]}
        else:
            answer = {"error": f"unknown op {op!r}"}
        print(json.dumps(answer), flush=True)


def main() -> int:
    kind, model, texts_file, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    texts = json.loads(Path(texts_file).read_text())
    encode = LOADERS[kind](model, threads)
    print(json.dumps({"ready": kind}), flush=True)
    serve(encode, texts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
