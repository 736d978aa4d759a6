"""A batch's encode stage: one ONNX run for the texts of every job that needs vectors, brought vectors put in
place of their texts, and one run per job when the shared run raises (a job whose own run still raises fails
alone)."""

from __future__ import annotations

import numpy as np

from indexer.runtime.encoder import OnnxEncoder
from service.engine.batch import Job, failed

Encoded = tuple[np.ndarray, list[bool], list[int], int]  # (vectors, truncated, tokens, texts in the ONNX run)


def encode_jobs(jobs: list[Job], wanted: list[int], errors: list[Exception | None], encoder: OnnxEncoder,
                dim: int) -> Encoded:
    """The vectors of the jobs `wanted` in job order: theirs encoded, or the ones they brought (a brought text is
    neither encoded nor truncated: 0 tokens)."""
    if all(jobs[j].vectors is None for j in wanted):
        return _encode(jobs, wanted, errors, encoder, dim)
    vecs, truncated, tokens, n_texts = _encode(jobs, [j for j in wanted if jobs[j].vectors is None], errors,
                                               encoder, dim)
    parts: list[np.ndarray] = []
    out_trunc: list[bool] = []
    out_tokens: list[int] = []
    row = 0
    for j in wanted:
        if errors[j] is not None:
            continue
        n = len(jobs[j].texts)
        brought = jobs[j].vectors
        if brought is not None:
            parts.append(np.asarray(brought, dtype=np.float32))
            out_trunc += [False] * n
            out_tokens += [0] * n
        else:
            parts.append(vecs[row : row + n])
            out_trunc += truncated[row : row + n]
            out_tokens += tokens[row : row + n]
            row += n
    return (np.concatenate(parts) if parts else np.zeros((0, dim), np.float32)), out_trunc, out_tokens, n_texts


def _encode(jobs: list[Job], wanted: list[int], errors: list[Exception | None], encoder: OnnxEncoder, dim: int
            ) -> Encoded:
    """One run for all the jobs `wanted`, or, when that run raises, one run per job (a job whose run still raises
    gets its `errors` entry and no rows)."""
    texts = [t for j in wanted for t in jobs[j].texts]
    if not texts:  # every request of the batch was refused, or lexical
        return np.zeros((0, dim), dtype=np.float32), [], [], 0
    try:
        e = encoder.encode_counted(texts, batch_size=len(texts))
        return e.vectors, list(e.truncated), list(e.tokens), len(texts)
    except Exception as exc:  # noqa: BLE001
        if len(wanted) == 1:
            errors[wanted[0]] = failed("encode", jobs[wanted[0]], exc)
            return np.zeros((0, dim), dtype=np.float32), [], [], 0
    parts, truncated, tokens = [], [], []
    for j in wanted:
        try:
            e = encoder.encode_counted(jobs[j].texts, batch_size=len(jobs[j].texts))
        except Exception as exc:  # noqa: BLE001
            errors[j] = failed("encode", jobs[j], exc)
            continue
        parts.append(e.vectors)
        truncated += list(e.truncated)
        tokens += list(e.tokens)
    vecs = np.concatenate(parts) if parts else np.zeros((0, dim), dtype=np.float32)
    return vecs, truncated, tokens, max((len(jobs[j].texts) for j in wanted), default=0)
