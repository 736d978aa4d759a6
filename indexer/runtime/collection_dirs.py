"""Collections made and removed as folders of a collections folder (`STRATA_COLLECTIONS_DIR`): what
`POST /collections`, `DELETE /collections/{name}` and `indexer collection create|delete` do on the disk.

Each change is one rename, so a crash leaves the collection whole or not there at all:
- create: the root is made in a hidden staging folder (`.creating-NAME-…`: its empty first version, sealed, its
  `collection.json`), synced, then renamed to `NAME` and the folder synced;
- delete: `NAME` is renamed to a hidden tombstone (`.trash-NAME-…`) and the folder synced, then the tombstone is
  removed.
A crash before the rename leaves a hidden folder that is not a collection (`sweep` removes it, as the API does at
startup; discovery skips hidden folders); after it, the rename has happened entirely. So does a restore's staging
folder (`indexer.runtime.restore`) and an upload's file, left by a crash mid-restore.

Encoders: a collection pairs with an exported encoder (`encoder export`), named by its folder under the models
folder (`STRATA_MODELS_DIR`, default `~/.strata/models`)."""

from __future__ import annotations

import os
import re
import secrets
import shutil
from pathlib import Path

from indexer.runtime import collection_config
from indexer.runtime.atomic import fsync_dir, staging_lock, sweep_lock, sync_tree
from indexer.runtime.collection_config import CollectionConfig
from indexer.runtime.empty_version import create_empty_version, encoder_meta
from indexer.runtime.encoder import ENCODER_META
from indexer.runtime.paths import strata_home
from indexer.runtime.restore import RESTORING

NAME_PATTERN = r"[a-z0-9][a-z0-9_-]{0,63}"
NAME_RE = re.compile(NAME_PATTERN)
CREATING_PREFIX, TRASH_PREFIX = ".creating-", ".trash-"
UPLOAD_PREFIX = ".upload-"  # a snapshot uploaded over HTTP, streamed to a file here before it is restored
MODELS_DIR_ENV = "STRATA_MODELS_DIR"


class CollectionDirError(ValueError):
    """A collection that cannot be made or removed; `field` names the request's field at fault."""

    def __init__(self, message: str, field: str = "name") -> None:
        super().__init__(message)
        self.field = field


class CollectionExists(CollectionDirError):
    pass


class NoSuchCollection(CollectionDirError):
    pass


def default_models_dir() -> Path:
    env = os.environ.get(MODELS_DIR_ENV)
    return Path(env).expanduser() if env else strata_home() / "models"


def check_name(name: str) -> None:
    if not NAME_RE.fullmatch(name):
        raise CollectionDirError(f"{name[:80]!r} is not a collection name ({NAME_PATTERN}: lower-case letters, "
                                 f"digits, '-' and '_', at most 64)")


def known_encoders(models_dir: Path) -> dict[str, Path]:
    """The exported encoders under `models_dir`, by folder name."""
    if not models_dir.is_dir():
        return {}
    return {d.name: d for d in sorted(models_dir.iterdir()) if (d / ENCODER_META).is_file()}


def resolve_encoder(models_dir: Path, name: str | None, default: Path) -> Path:
    """The encoder folder `name` names under `models_dir` (None: `default`); CollectionDirError (field `encoder`)
    listing the known ones otherwise."""
    known = known_encoders(models_dir)
    if name is None:
        if (default / ENCODER_META).is_file():
            return default
        what = f"the default encoder {default} is not an exported encoder"
    elif name in known:
        return known[name]
    else:
        what = f"no encoder named {name[:80]!r} in {models_dir}"
    raise CollectionDirError(f"{what}; known encoders: {', '.join(known) or 'none'} (export one with `encoder "
                             f"export --out {models_dir}/NAME`)", "encoder")


def create_collection(folder: Path, name: str, model_dir: Path, config: CollectionConfig | None = None) -> Path:
    """Make collection `name` in `folder`: an index root with an empty first version of `model_dir`'s encoder and
    `config` as its collection.json; CollectionExists when there is one of that name."""
    check_name(name)
    target = folder / name
    if target.exists():
        raise CollectionExists(f"collection {name!r} already exists ({target})")
    encoder_meta(model_dir)  # EncoderNotFound (a ValueError) before anything is written
    folder.mkdir(parents=True, exist_ok=True)
    stage = folder / f"{CREATING_PREFIX}{name}-{secrets.token_hex(4)}"
    with staging_lock(folder):
        try:
            create_empty_version(stage, model_dir)
            if config is not None:
                collection_config.save(stage, config)
            sync_tree(stage)
            if target.exists():  # made meanwhile by another writer: keep theirs
                raise CollectionExists(f"collection {name!r} already exists ({target})")
            os.rename(stage, target)
            fsync_dir(folder)
        finally:
            shutil.rmtree(stage, ignore_errors=True)
    return target


def delete_collection(folder: Path, name: str) -> None:
    """Remove collection `name` from `folder`: renamed to a tombstone (synced), then removed."""
    check_name(name)
    target = folder / name
    if not target.is_dir():
        raise NoSuchCollection(f"no collection named {name!r} in {folder}")
    trash = folder / f"{TRASH_PREFIX}{name}-{secrets.token_hex(4)}"
    os.rename(target, trash)
    fsync_dir(folder)
    shutil.rmtree(trash, ignore_errors=True)


def sweep(folder: Path) -> list[str]:
    """Remove what an interrupted create, delete or restore left in `folder` (hidden staging folders, tombstones,
    an upload's file); their names. Nothing while an operation of any process is staging there (`staging_lock`):
    what is staged then may be its work in progress, and the next sweep finds what it leaves."""
    if not folder.is_dir():
        return []
    with sweep_lock(folder) as free:
        if not free:
            return []
        left = [d for d in folder.iterdir() if d.is_dir() and (d.name.startswith((CREATING_PREFIX, TRASH_PREFIX))
                                                                or (d.name.startswith(".") and RESTORING in d.name))]
        uploads = [f for f in folder.glob(f"{UPLOAD_PREFIX}*.tar") if f.is_file()]
        for d in left:
            shutil.rmtree(d, ignore_errors=True)
        for f in uploads:
            f.unlink(missing_ok=True)
    return sorted(p.name for p in (*left, *uploads))
