"""The encoders of a process, each loaded once: collections (and versions) built with the same exported encoder
share one ONNX session and tokenizer.

An encoder is known by its folder (resolved) and the ONNX checksum its `encoder.json` records: a folder whose
model was re-exported in place is a new encoder. Entries are weak: an encoder no served version pairs with any
more is freed with its last searcher.
"""

from __future__ import annotations

import logging
import threading
import weakref
from pathlib import Path

from indexer.runtime.encoder import ENCODER_META, EncoderLoadError, EncoderMeta, OnnxEncoder

log = logging.getLogger(__name__)

EncoderKey = tuple[str, str]  # (resolved folder, onnx sha256)


def encoder_key(model_dir: Path) -> EncoderKey:
    """Raises EncoderLoadError when the folder holds no readable encoder.json."""
    meta_path = model_dir / ENCODER_META
    try:
        sha = EncoderMeta.model_validate_json(meta_path.read_text()).onnx_sha256
    except (OSError, ValueError) as exc:
        raise EncoderLoadError(f"{meta_path}: {exc} ({model_dir} is not an exported Strata encoder: create one "
                               f"with `encoder export`)") from exc
    return str(model_dir.resolve()), sha


class EncoderCache:
    def __init__(self, threads: int | None) -> None:
        self.threads = threads
        self._lock = threading.Lock()  # one load at a time: two collections asking together load it once
        self._loaded: weakref.WeakValueDictionary[EncoderKey, OnnxEncoder] = weakref.WeakValueDictionary()
        self.loads = 0  # ONNX sessions created (tests and the memory bench read it)

    def get(self, model_dir: Path) -> OnnxEncoder:
        """The encoder of `model_dir`, loaded (its ONNX bytes checked against encoder.json) unless it is already."""
        try:
            key = encoder_key(model_dir)
        except EncoderLoadError:  # let the encoder's own loader say what is wrong with the folder
            return OnnxEncoder(model_dir, threads=self.threads, verify_sha256=True)
        with self._lock:
            encoder = self._loaded.get(key)
            if encoder is None:
                encoder = OnnxEncoder(model_dir, threads=self.threads, verify_sha256=True)
                self._loaded[key] = encoder
                self.loads += 1
                log.info("loaded encoder %s (%d-dimensional, %s pooling)", model_dir, encoder.dim,
                         encoder.meta.pooling)
            return encoder

    def loaded(self) -> list[OnnxEncoder]:
        with self._lock:
            return list(self._loaded.values())
