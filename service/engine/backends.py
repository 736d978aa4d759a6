"""Where a version's vectors are searched: the `Backend` protocol, the local backend (each version's index, of any
kind, IVF shards merged if it has any, searched in this process) and `make_backend`, which picks the backend the
settings name (`STRATA_ENGINE`: `local`, or `sharded`, the Ray backend of `service.engine.sharded`)."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from indexer.runtime.faiss.devices import set_threads
from indexer.runtime.version import IndexVersion, VectorIndex
from service.engine.settings import EngineSettings


class Backend(Protocol):
    """Where a version's vectors are searched: opened per version, closed with the collection."""

    name: str

    def start(self) -> None: ...

    def open_index(self, folder: Path) -> VectorIndex: ...

    def close(self) -> None: ...


class LocalBackend:
    name = "local"

    def __init__(self, settings: EngineSettings) -> None:
        self.settings = settings

    def start(self) -> None:
        pass

    def open_index(self, folder: Path) -> IndexVersion:
        set_threads(self.settings.threads)  # the swap's probe query searches on the calling thread
        version = IndexVersion(folder, search_params=self.settings.search_param_overrides(), mmap=self.settings.mmap)
        version.warm_filters()  # a served version's first filter then pays for its own matches only
        return version

    def close(self) -> None:
        pass


def make_backend(settings: EngineSettings) -> Backend:
    if settings.engine == "sharded":
        from service.engine.sharded import RayBackend  # Ray only where it is used

        return RayBackend(settings)
    return LocalBackend(settings)
