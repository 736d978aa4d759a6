"""Collections: the named corpora one process serves, each an index root with its own encoder, versions, gates, swaps,
write log and metrics series (a `Collection`), all on one shared `Scheduler`.

Where they come from (`plan`):
- `STRATA_COLLECTIONS_DIR=D`: every subfolder of D that is an index root (it holds `versions/` or `current`) is a
  collection named after it (D may not exist yet: a fresh volume before its first build). Names are
  `[a-z0-9][a-z0-9_-]{0,63}`; other folders are skipped with a log line saying why. D is looked at again every
  `watch_interval_s`: a folder `indexer build --root D/NAME` creates is served without a restart (a folder removed
  stays served until the next restart);
- `STRATA_INDEX_ROOT` (or nothing: the default root): one collection named `default`;
- both set: `CollectionsConfigError` (the CLI exits 2). The sharded (Ray) backend serves one root: combined with a
  collections folder it is refused the same way (its shard deployments are per version of one root; serving several
  roots would need one set of deployments per collection, which `sharded` does not manage yet).

`STRATA_DEFAULT_COLLECTION` (else `default`, else the only collection) is what the routes without
`/collections/NAME` serve.

Each collection's own settings are its index root's `collection.json` (`indexer.runtime.collection_config`): read
before it is served (one that does not validate: the collection is not served, the error names the file and the
field, the others are, and it is tried again at each look), and again when it changes (the watcher, SIGHUP,
`POST .../admin/reload`); `PUT /collections/NAME/config` writes and applies it at once.

Created and deleted over HTTP (`create`, `remove`; `indexer.runtime.collection_dirs` on the disk): a new collection
is an empty first version of an exported encoder under `models_dir` (`STRATA_MODELS_DIR`), served at once; a
deleted one stops being served, then its folder goes. What a crash cut short (a hidden staging folder or tombstone)
is removed at startup. Discovery, create and delete run one at a time.

Encoders: collections whose versions were built with the same exported encoder folder share one loaded encoder
(`encoders.EncoderCache`) and its micro-batches (`scheduler`)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path

from indexer.runtime import collection_config, collection_dirs
from indexer.runtime.collection_config import Access, CollectionConfig, ConfigError
from indexer.runtime.collection_dirs import NAME_PATTERN, NAME_RE, CollectionDirError, CollectionExists
from indexer.runtime.empty_version import EMPTY_KIND, EncoderNotFound
from indexer.runtime.layout import CURRENT, VERSIONS
from indexer.runtime.paths import DEFAULT_MODEL_NAME
from service.engine.backends import Backend, make_backend
from service.engine.collection import Collection
from service.engine.errors import BackendUnsupported, BadConfig, CollectionConflict, UnknownCollection
from service.engine.metrics import Metrics
from service.engine.scheduler import Scheduler
from service.engine.settings import EngineSettings
from service.engine.tracing import Tracing
from service.engine.triggers import Triggers

log = logging.getLogger(__name__)

DEFAULT = "default"


class CollectionsConfigError(ValueError):
    """Settings that cannot be served together (the CLI prints it and exits 2)."""


@dataclass(frozen=True)
class Source:
    name: str
    root: Path


def is_index_root(folder: Path) -> bool:
    return (folder / VERSIONS).is_dir() or (folder / CURRENT).is_symlink()


def scan(folder: Path) -> tuple[list[Source], dict[str, str]]:
    """The collections under `folder`, by name, and the subfolders skipped, each with why."""
    found, skipped = [], {}
    for child in sorted(folder.iterdir()) if folder.is_dir() else []:
        if not child.is_dir() or child.name.startswith("."):
            continue
        if not NAME_RE.fullmatch(child.name):
            skipped[child.name] = f"{child.name!r} is not a collection name ({NAME_PATTERN}: lower-case letters, " \
                                  f"digits, '-' and '_', at most 64)"
        elif not is_index_root(child):
            skipped[child.name] = f"{child} is not an index root (no {VERSIONS}/ or {CURRENT}: build one with " \
                                  f"`indexer build --root {child}`)"
        else:
            found.append(Source(child.name, child))
    return found, skipped


def plan(settings: EngineSettings) -> list[Source] | None:
    """The collections to serve at startup (None: those of `collections_dir`, scanned); raises
    CollectionsConfigError for settings that cannot go together."""
    if settings.collections_dir is None:
        return [Source(DEFAULT, settings.index_root)]
    if "index_root" in settings.model_fields_set:
        raise CollectionsConfigError(f"STRATA_INDEX_ROOT ({settings.index_root}) and STRATA_COLLECTIONS_DIR "
                                     f"({settings.collections_dir}) are both set: serve one root (STRATA_INDEX_ROOT) "
                                     f"or a folder of collections (STRATA_COLLECTIONS_DIR), not both")
    if settings.engine == "sharded":
        raise CollectionsConfigError("the sharded (Ray) backend serves one index root and cannot serve collections "
                                     "(STRATA_COLLECTIONS_DIR): serve the shards of one root with STRATA_INDEX_ROOT, "
                                     "or the collections with the local backend")
    if settings.collections_dir.exists() and not settings.collections_dir.is_dir():
        raise CollectionsConfigError(f"STRATA_COLLECTIONS_DIR={settings.collections_dir} is not a folder")
    if settings.default_collection is not None and not NAME_RE.fullmatch(settings.default_collection):
        raise CollectionsConfigError(f"STRATA_DEFAULT_COLLECTION={settings.default_collection!r} is not a "
                                     f"collection name ({NAME_PATTERN})")
    return None


class Collections:
    def __init__(self, settings: EngineSettings, metrics: Metrics, tracing: Tracing | None = None,
                 backend: Backend | None = None) -> None:
        self.settings, self.metrics, self.tracing = settings, metrics, tracing or Tracing()
        sources = plan(settings)
        self.folder = settings.collections_dir if sources is None else None
        self.scheduler = Scheduler(settings, metrics, self.tracing)
        self.by_name: dict[str, Collection] = {}
        self.skipped: dict[str, str] = {}
        self._backend = backend  # one root only (a test's, or the sharded one)
        self._started = False
        self.triggers = Triggers()
        metrics.engines_loaded.set_function(lambda: sum(e.leases.alive() for e in self.by_name.values()))
        self._changing = asyncio.Lock()  # discovery, create and delete: one at a time
        if sources is None:
            assert self.folder is not None
            for left in collection_dirs.sweep(self.folder):  # an interrupted create, delete or restore
                log.warning("collections: removed %s, left by an interrupted create, delete or restore", left)
            sources, self.skipped = scan(self.folder)
            for name, why in self.skipped.items():
                log.warning("collections: skipped %s: %s", name, why)
            if not sources:
                log.warning("collections: %s %s no index root yet; new ones are served as they appear", self.folder,
                            "holds" if self.folder.is_dir() else "does not exist:")
        self._fixed = sources if self.folder is None else []  # the roots the settings name (no folder to scan)
        self.refused: dict[str, str] = {}  # collections not served: their collection.json does not validate
        for source in sources:
            self._add(source)

    # -- lookup ---------------------------------------------------------------------------------------------------
    def default_name(self) -> str | None:
        wanted = self.settings.default_collection
        if wanted is not None:
            return wanted if wanted in self.by_name else None
        if DEFAULT in self.by_name:
            return DEFAULT
        return next(iter(self.by_name)) if len(self.by_name) == 1 else None

    def get(self, name: str) -> Collection:
        collection = self.by_name.get(name)
        if collection is None and not NAME_RE.fullmatch(name):
            raise UnknownCollection(f"{name[:80]!r} is not a collection name ({NAME_PATTERN}: lower-case letters, "
                                    f"digits, '-' and '_', at most 64)")
        if collection is None and name in self.refused:
            raise UnknownCollection(f"collection {name!r} is not served: {self.refused[name]}")
        if collection is None:
            where = f" in {self.folder}" if self.folder else ""
            raise UnknownCollection(f"no collection named {name!r}{where}; collections: "
                                    f"{', '.join(sorted(self.by_name)) or 'none'}")
        return collection

    def default(self) -> Collection:
        name = self.default_name()
        if name is None:
            wanted = self.settings.default_collection
            if (wanted or DEFAULT) in self.refused:
                raise UnknownCollection(f"collection {wanted or DEFAULT!r} is not served: "
                                        f"{self.refused[wanted or DEFAULT]}")
            raise UnknownCollection(
                f"STRATA_DEFAULT_COLLECTION={wanted!r} is not a collection" if wanted else
                f"no default collection: {len(self.by_name)} collections and none named {DEFAULT!r}; use "
                f"/collections/NAME/… or set STRATA_DEFAULT_COLLECTION")
        return self.by_name[name]

    def names(self) -> list[str]:
        return sorted(self.by_name)

    def access(self, name: str) -> Access | None:
        """A served collection's own access rules (its collection.json), None when none is served by that name."""
        collection = self.by_name.get(name)
        return collection.config.access if collection is not None else None

    # -- lifecycle --------------------------------------------------------------------------------------------------
    def _add(self, source: Source) -> Collection | None:
        """Serve `source`; None (logged, in `refused`, tried again at each look) when its collection.json does not
        validate: the other collections are served all the same."""
        s = self.settings.model_copy(update={"index_root": source.root} | (
            {"model_dir": None} if self.folder is not None else {}))  # each collection pairs with its own encoder
        try:
            config = collection_config.load(source.root)
        except ConfigError as exc:
            if self.refused.get(source.name) != str(exc):
                log.error("collection %s not served: %s", source.name, exc)
            self.refused[source.name] = str(exc)
            return None
        self.refused.pop(source.name, None)
        backend = self._backend or make_backend(s)
        # the unlabelled metrics follow the default collection (which discovery may add later)
        collection = Collection(s, self.metrics, backend, self.tracing, scheduler=self.scheduler, name=source.name,
                        primary=lambda: self.default_name() == source.name, config=config)
        self.by_name[source.name] = collection
        log.info("collection %s: %s", source.name, source.root)
        return collection

    async def start(self) -> None:
        await self.scheduler.start()
        for collection in list(self.by_name.values()):  # one at a time: a shared encoder is loaded by the first
            await collection.start(signals=False)
        self._started = True
        self.triggers.on_sighup(self._reload_all)
        if self.settings.watch_interval_s > 0:
            self.triggers.spawn(self._watch)

    async def stop(self) -> None:
        await self.triggers.stop()
        await self.scheduler.stop()  # the batches running finish first: they hold leases on the collections
        for collection in self.by_name.values():
            await collection.stop()

    async def discover(self) -> list[str]:
        """Serve the collections that appeared in the folder since the last look; their names."""
        async with self._changing:
            return await self._discover()

    async def _discover(self) -> list[str]:
        if self.folder is None:
            sources = self._fixed
        else:
            sources, skipped = await asyncio.to_thread(scan, self.folder)
            for name, why in skipped.items():
                if self.skipped.get(name) != why:
                    log.warning("collections: skipped %s: %s", name, why)
            self.skipped = skipped
        added = []
        for source in sources:
            if source.name not in self.by_name:
                collection = self._add(source)
                if collection is None:
                    continue
                if self._started:
                    await collection.start(signals=False)
                added.append(source.name)
                log.info("collections: serving new collection %s", source.name)
        return added

    # -- collections made and removed over HTTP (`indexer.runtime.collection_dirs`) -----------------------------
    async def create(self, name: str, encoder: str | None, config: CollectionConfig | None) -> Collection:
        """Make collection `name` in the collections folder (an empty first version of `encoder`, a folder under
        `models_dir`; None: the default encoder) with `config` as its collection.json, and serve it.
        `CollectionConflict` (409): one of that name exists, or no collections folder is served (`BackendUnsupported`,
        501, on the sharded backend); `BadConfig` (422)
        naming the field: a name that cannot be a collection's, an unknown encoder (the known ones listed), settings
        an empty (flat, dense-only) version cannot apply."""
        folder = self._folder_for("create")
        s = self.settings
        try:
            collection_dirs.check_name(name)
            self._check_new(name)
            model_dir = collection_dirs.resolve_encoder(s.models_dir, encoder,
                                                        s.model_dir or s.models_dir / DEFAULT_MODEL_NAME)
            if config is not None:
                config.check_served(EMPTY_KIND, False)
        except CollectionDirError as exc:
            raise BadConfig(str(exc), [exc.field]) from None
        except ConfigError as exc:
            raise BadConfig(str(exc), ["settings", *(exc.field or "config").split(".")]) from None
        async with self._changing:
            self._check_new(name)
            try:
                root = await asyncio.to_thread(collection_dirs.create_collection, folder, name, model_dir, config)
            except CollectionExists as exc:
                raise CollectionConflict(str(exc)) from None
            except EncoderNotFound as exc:
                raise BadConfig(str(exc), ["encoder"]) from None
            collection = self._add(Source(name, root))
            assert collection is not None  # its collection.json was validated above
            if self._started:
                await collection.start(signals=False)
        log.info("collections: created %s (encoder %s)", name, model_dir)
        return collection

    async def remove(self, name: str) -> None:
        """Stop serving collection `name` and remove its folder durably (`collection_dirs.delete_collection`: a
        crash leaves the collection or nothing); one not served because its collection.json does not validate is
        removed too. UnknownCollection (404) when there is none of that name."""
        folder = self._folder_for("delete")
        async with self._changing:
            if name in self.refused and name not in self.by_name:  # on disk, not served: its collection.json
                why = self.refused.pop(name)
                try:
                    await asyncio.to_thread(collection_dirs.delete_collection, folder, name)
                except collection_dirs.NoSuchCollection:  # removed by hand meanwhile
                    raise UnknownCollection(f"no collection named {name!r} (it was not served: {why})") from None
                log.info("collections: deleted %s (it was not served)", name)
                return
            collection = self.get(name)
            was_default = self.default_name() == name
            del self.by_name[name]  # new requests get a 404 from here on
            await collection.stop()  # its writes in flight finish first (its write thread is drained)
            collection.collection_metrics.forget(was_default)
            await asyncio.to_thread(collection_dirs.delete_collection, folder, name)
        log.info("collections: deleted %s", name)

    def _check_new(self, name: str) -> None:
        if name in self.by_name or name in self.refused:
            raise CollectionConflict(f"collection {name!r} already exists")

    def check_backend(self, what: str) -> None:
        """`BackendUnsupported` (501) when the backend can never `what` (create, delete or restore a collection):
        the sharded one serves one root, and refuses a collections folder at startup (`plan`)."""
        if self.settings.engine == "sharded":
            raise BackendUnsupported(f"the sharded (Ray) backend serves the shards of one index root, so it cannot "
                                     f"{what} over HTTP (a collections folder, STRATA_COLLECTIONS_DIR, is the local "
                                     f"backend's only): serve collections with `python -m service` and "
                                     f"STRATA_COLLECTIONS_DIR, or each sharded root with its own `python -m service "
                                     f"sharded`; a snapshot is restored with `indexer snapshot restore ARCHIVE --root "
                                     f"DIR`, then served from DIR")

    def _folder_for(self, what: str) -> Path:
        self.check_backend(f"{what} a collection")
        if self.folder is None:
            raise CollectionConflict(f"this server serves one index root ({self.settings.index_root}): collections "
                                     f"are created and deleted in a collections folder (STRATA_COLLECTIONS_DIR), "
                                     f"so it cannot {what} one")
        return self.folder

    def refresh_configs(self) -> list[str]:
        """Apply the collection.json files changed on disk since the last look; the collections whose changed."""
        return [name for name, collection in list(self.by_name.items()) if collection.refresh_config()]

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.settings.watch_interval_s)
            try:
                await self.discover()
                await asyncio.to_thread(self.refresh_configs)
            except Exception:  # noqa: BLE001 (the watcher must outlive any one failed look)
                log.exception("collections watcher: discovery failed")

    async def _reload_all(self) -> None:
        await self.discover()
        self.refresh_configs()
        for collection in list(self.by_name.values()):
            await collection.swapper.attempt("sighup", retry=True)
