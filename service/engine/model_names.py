"""The names the OpenAI-compatible routes serve the encoder under, stable across swaps.

An OpenAI client stores a model id in its configuration, and vectors beside it. A swap to another encoder (the
demo's background adaptation: `all-MiniLM-L6-v2-layers-0-6` → `all-MiniLM-L6-v2-adapted-mean`) must not turn
that id into a 404 mid-session, and a swap that changes the vectors' dimension must not go unnoticed by it. So:

- the listed id is `STRATA_MODEL_NAME` when set, else `strata-<dim>` (`strata-384`): it does not change when a
  swap changes the encoder, only when the dimension changes — the one change a client storing vectors cannot
  absorb;
- the served encoder's folder name is an alias, and so are the encoders of the versions still in the index root
  (the ones a rollback can serve again) while they make vectors of the served dimension;
- an id that named a dimension no longer served (`strata-384` after a swap to a 768-dimensional encoder, or the
  name of an encoder of another dimension whose version is still in the root) is `DimensionChanged`: the routes
  answer 410 naming the new id and dimension, instead of vectors a client's store would reject (or mix up);
- `STRATA_MODEL_ALIASES` are accepted as the served model whatever it is (`["*"]`: any name), but never in place
  of another encoder's own name: with several collections an encoder's folder name or listed id answers with that
  encoder, whatever the aliases say (`model_catalog`).

The root's versions are listed when a name is not the served one; their encoders are read from their manifests
once per version (a version folder never changes once complete).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from indexer.runtime.layout import IndexRoot
from indexer.runtime.manifest import Manifest, ManifestError
from service.engine.errors import EngineError

log = logging.getLogger(__name__)

DEFAULT_BASE = "strata"
ANY_MODEL = "*"


class UnknownModel(EngineError):
    """A `model` that is neither the served id nor an accepted alias."""

    def __init__(self, name: str, served: str) -> None:
        super().__init__(f"The model `{name}` does not exist or you do not have access to it; this server serves "
                         f"`{served}`")


class DimensionChanged(EngineError):
    """A `model` that named vectors of a dimension this server no longer makes."""

    def __init__(self, name: str, old_dim: int, served: str, dim: int, encoder: str) -> None:
        super().__init__(f"The model `{name}` made {old_dim}-dimensional vectors; this server now serves `{served}` "
                         f"({dim}-dimensional vectors, encoder `{encoder}`) since a swap changed the encoder. "
                         f"Vectors of the two cannot be compared: re-embed what you stored with `{served}`")
        self.old_dim, self.dim, self.served = old_dim, dim, served


@dataclass(frozen=True)
class Encoder:
    name: str  # the encoder folder's name
    dim: int


def served_id(model_name: str | None, dim: int) -> str:
    """The id `/v1/models` lists: `STRATA_MODEL_NAME`, else `strata-<dim>`."""
    return model_name or f"{DEFAULT_BASE}-{dim}"


class ModelNames:
    """Resolves a request's `model` against the served encoder and the root's other versions."""

    def __init__(self, root: Path, model_name: str | None, aliases: list[str]) -> None:
        self.root = IndexRoot(root)
        self.model_name, self.aliases = model_name, aliases
        self._encoders: dict[str, Encoder | None] = {}  # version -> its encoder (None: unreadable manifest)

    def served_id(self, dim: int) -> str:
        return served_id(self.model_name, dim)

    def resolve(self, name: str, encoder: Encoder, *, aliases: bool = True) -> None:
        """Return when `name` may be answered by the served `encoder`; raise UnknownModel or DimensionChanged.
        `aliases` False: only the names of encoders (the served id, folder names), not `STRATA_MODEL_ALIASES`
        — how several collections find the one encoder a name is the name of before any alias may answer it."""
        served = self.served_id(encoder.dim)
        if name in (served, encoder.name) or (aliases and (name in self.aliases or ANY_MODEL in self.aliases)):
            return
        for other in self.kept_encoders():
            # the default id of another dimension, `strata-768`, was listed while that version was served
            if name == other.name or (self.model_name is None and name == served_id(None, other.dim)):
                if other.dim == encoder.dim:
                    return
                raise DimensionChanged(name, other.dim, served, encoder.dim, encoder.name)
        raise UnknownModel(name, served)

    def kept_encoders(self) -> list[Encoder]:
        """The encoders of the versions in the root, newest version first (what a rollback can serve)."""
        versions = self.root.versions()
        for gone in set(self._encoders) - set(versions):
            del self._encoders[gone]
        found = []
        for version in reversed(versions):
            if version not in self._encoders:
                self._encoders[version] = self._read(version)
            if (enc := self._encoders[version]) is not None:
                found.append(enc)
        return found

    def _read(self, version: str) -> Encoder | None:
        try:
            model = Manifest.load(self.root.version_dir(version)).model
        except (ManifestError, OSError) as exc:
            log.debug("version %s: no model name from its manifest (%s)", version, exc)
            return None
        return Encoder(Path(model.dir).name, model.dim)
