"""A collection's own settings as served: its `collection.json` (`indexer.runtime.collection_config`), read before
the collection serves, read again when the file changes on disk (`indexer collection --set`: the watcher, SIGHUP, a
reload), and replaced over HTTP (`PUT /collections/{name}/config`: checked against the served version, written
atomically, applied from the next request). A file that stops validating is logged and the served settings kept."""

from __future__ import annotations

import logging
from pathlib import Path

from indexer.runtime import collection_config
from indexer.runtime.collection_config import CollectionConfig, ConfigError
from service.engine.errors import BadConfig
from service.engine.searcher import Searcher

log = logging.getLogger(__name__)


def _stamp(root: Path) -> tuple[int, int] | None:
    """What tells a changed collection.json: its mtime and size (None: there is none)."""
    try:
        st = collection_config.path_of(root).stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


class LiveConfig:
    """The settings one collection serves with (`current`). A bad file at construction raises ConfigError, before
    anything is started."""

    def __init__(self, root: Path, name: str, config: CollectionConfig | None = None) -> None:
        self.root, self.name = root, name
        self._stamp = _stamp(root)
        self.current = config if config is not None else collection_config.load(root)

    def refresh(self) -> bool:
        """Read collection.json again if it changed on disk; True when a new config applies."""
        stamp = _stamp(self.root)
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        try:
            self.current = collection_config.load(self.root)
        except ConfigError as exc:
            log.error("collection %s: kept its config: %s", self.name, exc)
            return False
        log.info("collection %s: config reloaded from %s", self.name, collection_config.path_of(self.root))
        return True

    def replace(self, config: CollectionConfig, served: Searcher | None) -> None:
        """Check `config` against the served version (`BadConfig` naming the field), write it atomically, and
        apply it from the next request."""
        if served is not None:
            try:
                config.check_served(served.manifest.index.kind, served.manifest.lexical is not None)
            except ConfigError as exc:
                raise BadConfig(str(exc), (exc.field or "config").split(".")) from None
        collection_config.save(self.root, config)
        self.current, self._stamp = config, _stamp(self.root)
