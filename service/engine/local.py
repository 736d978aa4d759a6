"""The local backend: each version's index (any kind; IVF shards merged, if it has any) searched in this process."""

from __future__ import annotations

from pathlib import Path

from indexer.runtime.faiss_index import set_threads
from indexer.runtime.version import IndexVersion
from service.engine.settings import EngineSettings


class LocalBackend:
    name = "local"

    def __init__(self, settings: EngineSettings) -> None:
        self.settings = settings

    def start(self) -> None:
        pass

    def open_index(self, folder: Path) -> IndexVersion:
        set_threads(self.settings.threads)  # the swap's probe query searches on the calling thread
        return IndexVersion(folder, search_params=self.settings.search_param_overrides(),
                            mmap=self.settings.mmap)

    def close(self) -> None:
        pass
