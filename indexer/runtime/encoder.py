"""The exported sentence encoder at run time: `tokenizers` + ONNX Runtime, no torch.

A model folder (written by `encoder export`) holds `encoder.onnx`, `tokenizer.json` and `encoder.json`
(`EncoderMeta`). The ONNX graph takes `input_ids` and `attention_mask` (int64, dynamic batch and sequence)
and returns `sentence_embedding`: the pooled, L2-normalised vector.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from indexer.runtime.onnx_session import SessionSettings, default_threads
from indexer.runtime.progress import Progress

log = logging.getLogger(__name__)

ENCODER_META = "encoder.json"
ENCODER_ONNX = "encoder.onnx"
TOKENIZER_FILE = "tokenizer.json"


class EncoderMeta(BaseModel):
    """What `encoder.json` records about an exported model."""

    pooling: str  # "cls" | "mean" | "layers:I,J,…" (BERT-LC) | "pooler" (a trained pooler kept in the graph)
    pooling_origin: str | None = None  # "--pooling", the checkpoint's pooling config file, or the default
    dim: int = Field(gt=0)
    max_length: int = Field(gt=1)  # tokens, [CLS] and [SEP] included: at least those two
    source: str
    onnx_sha256: str
    exported_at: datetime
    opset: int | None = None
    exporter: str | None = None  # "torchscript" or "dynamo" (torch.onnx.export's two paths)
    parity_min_cosine: float | None = None
    quantization: str | None = None
    # int8 vs fp32 figures when quantized (numbers; the staged gate adds `stage` and its screen's bounds)
    quality_gate: dict[str, int | float | str | list[float] | None] | None = None
    quantization_details: dict[str, Any] | None = None  # how the int8 graph was made (models/quantize.py)
    # `encoder adapt --data CORPUS` (models/corpus_adapt.py): recipe, whether the adapted weights were kept, and
    # whether dev queries verified it ("verified": false = selected on a label-free proxy only)
    adaptation: dict[str, Any] | None = None


class EncoderLoadError(RuntimeError):
    """A model folder is missing files or is inconsistent."""


@dataclass(frozen=True)
class Batch:
    input_ids: np.ndarray
    attention_mask: np.ndarray
    truncated: list[bool]


@dataclass(frozen=True)
class Encoded:
    """Vectors of some texts, with per text whether it was truncated and how many tokens the model ran: special
    tokens ([CLS], [SEP]) included, counted after truncation to max_length."""

    vectors: np.ndarray
    truncated: list[bool]
    tokens: list[int]


# A run may pad up to PAD_SLACK × its real tokens plus RUN_OVERHEAD_TOKENS (the fixed cost of one more ONNX
# run, in tokens) before it is cut; measured (docs/decisions.md).
PAD_SLACK = 1.1
RUN_OVERHEAD_TOKENS = 32
# Padded tokens per ONNX run: a batch over it is run in row slices. Attention activations grow with
# rows × length², and the CPU arena keeps its high-water mark, which a build holds to its end; slicing keeps it a
# third as high at the same texts/s (docs/benchmarks.md, the encoder's run sizes). Batches of 64 texts up to 64
# tokens are never sliced.
MAX_RUN_TOKENS = 4096
# Texts per run when encoding a corpus on CPU, with parallel 1-thread runs: small runs are as fast as any and
# faster than 64 (docs/benchmarks.md, the encoder's run sizes). A GPU keeps the larger runs it needs.
CPU_CORPUS_BATCH = 16
GPU_CORPUS_BATCH = 64


def length_groups(lengths: Sequence[int], batch_size: int, *, slack: float | None = None,
                  overhead: int | None = None) -> list[np.ndarray]:
    """Indices cut into ONNX runs: sorted by token count, at most `batch_size` each, a new run started when
    padding the current one to the next length would cost more than `slack` × its real tokens + `overhead`."""
    slack = PAD_SLACK if slack is None else slack
    overhead = RUN_OVERHEAD_TOKENS if overhead is None else overhead
    order = np.argsort(np.asarray(lengths), kind="stable")
    groups: list[np.ndarray] = []
    start, real = 0, 0
    for pos, i in enumerate(order.tolist()):
        n, length = pos - start + 1, lengths[i]
        if pos > start and (n > batch_size or n * length > slack * (real + length) + overhead):
            groups.append(order[start:pos])
            start, real = pos, 0
        real += length
    groups.append(order[start:])
    return groups


def read_meta(model_dir: Path, *, verify_sha256: bool = False) -> EncoderMeta:
    """The `encoder.json` of an exported encoder folder, once its three files are found there (and, with
    `verify_sha256`, its ONNX file is the one `encoder.json` names); `EncoderLoadError` says what is wrong."""
    meta_path, onnx_path, tok_path = (model_dir / name for name in (ENCODER_META, ENCODER_ONNX, TOKENIZER_FILE))
    for p in (meta_path, onnx_path, tok_path):
        if not p.is_file():
            raise EncoderLoadError(f"{p} is missing: {model_dir} is not an exported Strata encoder (create one with "
                                   "`encoder export`)")
    try:
        meta = EncoderMeta.model_validate_json(meta_path.read_text())
    except ValueError as exc:
        raise EncoderLoadError(f"{meta_path} is not a valid encoder.json: {exc}") from exc
    if verify_sha256:
        from indexer.runtime.atomic import sha256_file

        actual = sha256_file(onnx_path)
        if actual != meta.onnx_sha256:
            raise EncoderLoadError(
                f"{onnx_path} sha256 {actual[:12]}… does not match encoder.json ({meta.onnx_sha256[:12]}…)")
    return meta


def _tokenizer(path: Path, max_length: int) -> tuple[Any, int]:
    """(the tokenizer truncating to `max_length`, unpadded, its [PAD] id)."""
    from tokenizers import Tokenizer

    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises its own untyped errors for a file it cannot parse
        raise EncoderLoadError(f"{path} is not a readable tokenizer.json: {exc}") from exc
    tokenizer.enable_truncation(max_length=max_length)
    tokenizer.no_padding()  # we pad per batch ourselves, to the batch's longest
    pad = tokenizer.token_to_id("[PAD]")
    return tokenizer, 0 if pad is None else pad


def _session_settings(session: SessionSettings | None, threads: int | None, providers: Sequence[str] | None
                      ) -> tuple[SessionSettings, list[str]]:
    """(the settings a session is created with, threads resolved; the execution providers, the GPU's first when
    there is one): a GPU runs one batch at a time faster than several, so it gets no parallel runs."""
    import onnxruntime as ort

    settings = session or SessionSettings()
    if threads is not None:
        settings = settings.replace(threads=threads)
    available = ort.get_available_providers()
    if providers is None:
        providers = [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in available]
    if "CUDAExecutionProvider" in set(providers) & set(available) and hasattr(ort, "preload_dlls"):
        ort.preload_dlls()  # onnxruntime-gpu >= 1.21 finds the CUDA/cuDNN of the nvidia-* wheels only this way
    if settings.parallel_runs and list(providers)[:1] != ["CPUExecutionProvider"]:
        settings = settings.replace(parallel_runs=False)
    return settings.replace(threads=settings.threads or default_threads()), list(providers)


def _open_session(onnx_path: Path, settings: SessionSettings, providers: list[str]) -> Any:
    """An ONNX Runtime session of `onnx_path`; `EncoderLoadError` for a graph it cannot load."""
    import onnxruntime as ort

    try:
        return ort.InferenceSession(str(onnx_path), sess_options=settings.to_ort(), providers=providers)
    except Exception as exc:  # onnxruntime raises its own untyped errors for corrupt graphs
        raise EncoderLoadError(f"ONNX Runtime could not load {onnx_path}: {exc}") from exc


class OnnxEncoder:
    """Encodes texts to L2-normalised float32 vectors with an exported ONNX model."""

    def __init__(
        self,
        model_dir: str | Path,
        *,
        threads: int | None = None,
        providers: Sequence[str] | None = None,
        verify_sha256: bool = False,
        session: SessionSettings | None = None,
    ) -> None:
        self.model_dir = Path(model_dir)
        onnx_path = self.model_dir / ENCODER_ONNX
        self.meta = read_meta(self.model_dir, verify_sha256=verify_sha256)
        self.tokenizer, self.pad_id = _tokenizer(self.model_dir / TOKENIZER_FILE, self.meta.max_length)
        # decided before the session exists, so the recorded settings are the ones it was created with
        self.session_settings, chosen = _session_settings(session, threads, providers)
        self.threads: int = self.session_settings.threads or default_threads()
        self.session = _open_session(onnx_path, self.session_settings, chosen)
        self.providers = self.session.get_providers()
        self.parallel = self.session_settings.parallel_runs and self.threads > 1
        # ThreadPoolExecutor starts its threads on first use: an encoder that never runs a batch costs none
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="onnx-run") if self.parallel else None
        out = self.session.get_outputs()[0]
        if out.shape[-1] not in (self.meta.dim, None) and isinstance(out.shape[-1], int):
            raise EncoderLoadError(f"{onnx_path} outputs dim {out.shape[-1]} but encoder.json says {self.meta.dim}")
        log.info("loaded encoder %s (pooling=%s, dim=%d, providers=%s, threads=%d%s)",
                 self.model_dir, self.meta.pooling, self.meta.dim, self.providers, self.threads,
                 " as parallel 1-thread runs" if self.parallel else "")

    @property
    def dim(self) -> int:
        return self.meta.dim

    @property
    def corpus_batch_size(self) -> int:
        """The default texts per run of `encode`, for this encoder's execution provider."""
        return CPU_CORPUS_BATCH if self.providers[0] == "CPUExecutionProvider" else GPU_CORPUS_BATCH

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        """Tokens per text as the model sees them (special tokens included, cut to max_length)."""
        return [len(e.ids) for e in self.tokenizer.encode_batch(list(texts))]

    def _tokenize_all(self, texts: Sequence[str]) -> list:  # noqa: ANN001 - tokenizers.Encoding
        """`encode_batch`, but one text tokenised on this thread: `encode_batch` hands even one text to the
        tokenizer's worker pool and waits for it (the same encoding either way)."""
        if len(texts) == 1:
            return [self.tokenizer.encode(texts[0])]
        return self.tokenizer.encode_batch(list(texts))

    def _encode_one(self, text: str) -> Encoded:
        """One text (a served query, most of the time): one unpadded row, straight to the session — what
        `encode_counted` does for it without the grouping, padding and scattering of a batch. Those cost CPU per
        query when they run right after an ONNX run, their code and data out of the caches it swept
        (docs/decisions.md)."""
        e = self.tokenizer.encode(text)
        ids = np.asarray([e.ids], dtype=np.int64)
        out = self.session.run(None, {"input_ids": ids, "attention_mask": np.ones_like(ids)})[0]
        return Encoded(np.ascontiguousarray(out, dtype=np.float32), [bool(e.overflowing)], [len(e.ids)])

    def tokenize(self, texts: Sequence[str]) -> Batch:
        """Tokenise and pad to the longest text of this batch (not to max_length)."""
        return self._pad(self.tokenizer.encode_batch(list(texts)))

    def _pad(self, encs: Sequence) -> Batch:  # noqa: ANN001 - tokenizers.Encoding
        longest = max((len(e.ids) for e in encs), default=1)
        ids = np.full((len(encs), longest), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(encs), longest), dtype=np.int64)
        for i, e in enumerate(encs):
            n = len(e.ids)
            ids[i, :n] = e.ids
            mask[i, :n] = 1
        return Batch(ids, mask, [bool(e.overflowing) for e in encs])

    def close(self) -> None:
        """Stop the run threads, if any were started (the session itself is freed with the object)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    def _slices(self, batch: Batch, parallel: bool) -> list[slice]:
        """Row slices of one padded batch: at most MAX_RUN_TOKENS each, and split `threads` ways when parallel."""
        n = len(batch.input_ids)
        rows = max(1, MAX_RUN_TOKENS // max(1, batch.input_ids.shape[1]))
        if parallel:
            rows = min(rows, -(-n // self.threads))
        return [slice(s, s + rows) for s in range(0, n, rows)]

    def _run_slice(self, batch: Batch, rows: slice) -> np.ndarray:
        return self.session.run(None, {"input_ids": batch.input_ids[rows],
                                       "attention_mask": batch.attention_mask[rows]})[0]

    def _run_many(self, batches: Sequence[Batch], *, parallel: bool | None = None) -> list[np.ndarray]:
        """Vectors of each padded batch. When parallel, the row slices of all the batches run at once on the
        pool, `threads` at a time; otherwise one after the other on the calling thread."""
        parallel = self.parallel if parallel is None else parallel
        parts = [(b, rows) for b, batch in enumerate(batches) for rows in self._slices(batch, parallel)]
        if parallel and len(parts) > 1 and self._pool is not None:
            outs = list(self._pool.map(lambda part: self._run_slice(batches[part[0]], part[1]), parts))
        else:
            outs = [self._run_slice(batches[b], rows) for b, rows in parts]
        per_batch: list[list[np.ndarray]] = [[] for _ in batches]
        for (b, _), out in zip(parts, outs, strict=True):
            per_batch[b].append(out)
        return [np.ascontiguousarray(o[0] if len(o) == 1 else np.concatenate(o), dtype=np.float32)
                for o in per_batch]

    def _run(self, batch: Batch, *, parallel: bool | None = None) -> np.ndarray:
        return self._run_many([batch], parallel=parallel)[0]

    def encode_with_flags(
        self, texts: Sequence[str], batch_size: int = 64, *, group_by_length: bool = True
    ) -> tuple[np.ndarray, list[bool]]:
        """Vectors (n, dim) and, per text, whether it was truncated to max_length tokens.

        With `group_by_length` (the default) the texts are tokenised once, sorted by token count and cut into
        runs of at most `batch_size` that pad little (`length_groups`): a micro-batch of one long and many
        short queries is not padded to the long one. Without it, each `batch_size` slice is one padded run."""
        encoded = self.encode_counted(texts, batch_size, group_by_length=group_by_length)
        return encoded.vectors, encoded.truncated

    def encode_counted(
        self, texts: Sequence[str], batch_size: int = 64, *, group_by_length: bool = True,
        parallel: bool | None = None
    ) -> Encoded:
        """`encode_with_flags`, plus the tokens the model ran per text (from the same tokenisation). `parallel=False`
        runs on the calling thread only, never on the encoder's run threads (the service's write lane: its
        threads' CPU priority must be the one that runs)."""
        if not texts:
            return Encoded(np.zeros((0, self.dim), dtype=np.float32), [], [])
        if len(texts) == 1:
            return self._encode_one(texts[0])
        encs = self._tokenize_all(texts)
        tokens = [len(e.ids) for e in encs]
        if group_by_length:
            groups = length_groups(tokens, batch_size)
        else:
            groups = [np.arange(s, min(s + batch_size, len(encs))) for s in range(0, len(encs), batch_size)]
        vecs = np.empty((len(texts), self.dim), dtype=np.float32)
        flags = [False] * len(texts)
        batches = [self._pad([encs[i] for i in idx]) for idx in groups]
        for idx, batch, out in zip(groups, batches, self._run_many(batches, parallel=parallel), strict=True):
            vecs[idx] = out
            for i, f in zip(idx.tolist(), batch.truncated, strict=True):
                flags[i] = f
        return Encoded(vecs, flags, tokens)

    def encode(self, texts: Sequence[str], batch_size: int | None = None, *, progress: bool = False,
               desc: str = "encoding", on_progress: Callable[[int], None] | None = None, bar: bool = True,
               by_tokens: bool = False) -> np.ndarray:
        """Encode many texts in input order, `batch_size` per run (default `corpus_batch_size`), sorted by length
        so runs pad little. `progress`: a bar on a terminal, else log lines with rate and ETA; `bar=False`: lines
        only; `on_progress(n)`: told of every n more texts done. `by_tokens`: tokenise all first and cut runs by
        token count (`length_groups`), for a sample in memory (the int8 gate's texts: little padding)."""
        batch_size = batch_size or self.corpus_batch_size
        n = len(texts)
        vecs = np.empty((n, self.dim), dtype=np.float32)
        if n == 0:
            return vecs
        if by_tokens:
            encs = self.tokenizer.encode_batch(list(texts))
            runs = length_groups([len(e.ids) for e in encs], batch_size)

            def padded(idx: np.ndarray) -> Batch:
                return self._pad([encs[i] for i in idx])
        else:
            # Character length is a cheap, good proxy for token length when ordering.
            order = np.argsort([len(t) for t in texts], kind="stable")
            runs = [order[s : s + batch_size] for s in range(0, n, batch_size)]

            def padded(idx: np.ndarray) -> Batch:
                return self.tokenize([texts[i] for i in idx])
        shown = Progress(n, desc, unit="texts", bar=bar) if progress else None

        def encode_batch(idx: np.ndarray, parallel: bool = False) -> int:
            vecs[idx] = self._run(padded(idx), parallel=parallel)
            return len(idx)

        def finished(done: int) -> None:
            if shown is not None:
                shown.update(done)
            if on_progress is not None:
                on_progress(done)

        if self._pool is not None and len(runs) > 1:
            # `threads` batches at once, each on one thread; a bounded window keeps memory and progress steady
            window: deque[Future[int]] = deque()
            for idx in runs:
                window.append(self._pool.submit(encode_batch, idx))
                if len(window) >= 2 * self.threads:
                    finished(window.popleft().result())
            while window:
                finished(window.popleft().result())
        else:  # a single batch still splits its rows across the threads
            for idx in runs:
                finished(encode_batch(idx, parallel=self.parallel))
        if shown is not None:
            shown.close()
        return vecs
