"""A collection's own settings: `collection.json` in its index root (beside `current`), validated here and read
nowhere else. What it may set, and how each setting composes (a request's value wins, then this file's, then the
process-wide setting or built-in default):

- `mode`: the default `/search` mode (else the served version's, `Manifest.search_mode`);
- `fusion`, `alpha`, `rrf_k`: hybrid's defaults (else convex, 0.5, 60);
- `search`: the vector search's parameters by name (`ann.SEARCH_PARAMS`: `nprobe` for IVF, `ef_search` for HNSW),
  checked against the served version's kind when set; a knob the served kind does not take is not applied
  (STRATA_NPROBE / STRATA_EF_SEARCH, then the manifest, decide);
- `max_top_k`, `max_queries`, `filter`: limits, only ever narrower than the API's (`MAX_TOP_K`, `MAX_QUERIES`,
  `filters.LIMITS`);
- `access`: what a key may do there, only ever narrower than its grants (`service.auth`): the scope reading
  needs (`read` or `admin`), whether writes are allowed at all, and which keys (by fingerprint) may use it.

Bad content raises `ConfigError` naming the file and the field. Written atomically (`atomic.write_json_atomic`).

May import: pydantic, the standard library, `indexer.runtime`."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from indexer.runtime.ann import KNOBS, SEARCH_PARAMS, IndexParamError, check_search_params
from indexer.runtime.atomic import write_json_atomic
from indexer.runtime.filters import LIMITS, FilterError, FilterLimits, check_limits
from indexer.runtime.fusion import DEFAULT_ALPHA, DEFAULT_RRF_K, Fusion
from indexer.runtime.manifest import SearchMode
from indexer.runtime.query import Query

CONFIG_FILE = "collection.json"
MAX_TOP_K = 100  # the API's top_k limit (`service.schemas.search` reads it from here); a collection may only lower it
MAX_QUERIES = 64  # the API's queries per /search call (`service.schemas.common` reads it); the same for a collection
FINGERPRINT_CHARS = 16


class ConfigError(ValueError):
    """A collection.json (or a change to it) that does not validate; `field` is its dotted path."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class FilterCaps(BaseModel):
    """Narrower filter limits than the API's (`filters.LIMITS`); null: the API's."""

    model_config = ConfigDict(extra="forbid")
    depth: int | None = Field(None, ge=1, le=LIMITS.depth)
    width: int | None = Field(None, ge=1, le=LIMITS.width)
    conditions: int | None = Field(None, ge=1, le=LIMITS.conditions)
    values: int | None = Field(None, ge=1, le=LIMITS.values)

    def limits(self) -> FilterLimits:
        return FilterLimits(**{k: v if v is not None else getattr(LIMITS, k) for k, v in self.model_dump().items()})


class Access(BaseModel):
    """What a key may do on this collection, on top of its grants (`service.auth`): never more."""

    model_config = ConfigDict(extra="forbid")
    read: Literal["read", "admin"] = Field("read", description="the scope searching, encoding and reading need")
    write: Literal["admin", "none"] = Field("admin", description="the scope writes need; none: no key may write")
    keys: list[str] | None = Field(None, description=f"fingerprints (`indexer collection --fingerprint KEY`: the "
                                   f"first {FINGERPRINT_CHARS} hex digits of the key's sha256) of the only keys that "
                                   f"may use the collection; null: every key its grants allow")

    @field_validator("keys")
    @classmethod
    def _fingerprints(cls, keys: list[str] | None) -> list[str] | None:
        for key in keys or []:
            if len(key) != FINGERPRINT_CHARS or any(c not in "0123456789abcdef" for c in key):
                raise ValueError(f"{key[:40]!r} is not a key fingerprint ({FINGERPRINT_CHARS} lower-case hex "
                                 f"digits: `indexer collection --fingerprint KEY`)")
        return keys


def fingerprint(key: str) -> str:
    """What `access.keys` lists for a key: never the key itself (collection.json sits beside the index)."""
    return hashlib.sha256(key.encode()).hexdigest()[:FINGERPRINT_CHARS]


class Compaction(BaseModel):
    """When the collection compacts by itself (the API's background compaction: `service.engine.compactor`): as soon
    as one of the limits is passed by what the served version does not hold yet."""

    model_config = ConfigDict(extra="forbid")
    auto: bool = Field(True, description="compact in the background; false: only `indexer compact` by hand")
    written_docs: int = Field(10_000, ge=1, description="documents written (or replaced) since the served version")
    log_mib: float = Field(64.0, gt=0, description="MiB of write-log entries the served version does not hold")
    deleted_share: float = Field(0.2, gt=0, le=1, description="share of the served version's documents deleted "
                                 "or replaced since")
    min_interval_s: float = Field(60.0, ge=0, description="at least this long from one compaction's end to the "
                                  "next one's start, unless more written documents wait than the served version "
                                  "holds (a collection growing faster than it compacts), writes are held back, or "
                                  "at the rate documents are written they would be held back before a compaction "
                                  "started now could end (as long as the last one took)")
    max_unfolded_docs: int = Field(200_000, ge=1, description="the overlay's bound: while this many written "
                                   "documents wait for a compaction, upserts are refused (429, Retry-After) and "
                                   "the compaction runs at once, interval or not; deletes are always taken. "
                                   "With auto false there is no bound (`indexer compact` by hand)")
    index: Literal["auto", "keep"] = Field("auto", description="auto: the index kind follows the size (flat below "
                                           "10,000 documents, IVF above with nlist by size, its nprobe calibrated "
                                           "again; IVF retrained once 20% of it was added since training; a "
                                           "lexical engine auto chose is chosen again by size); keep: the "
                                           "version's kind, quantizer and lexical engine")


class CollectionConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mode: Literal["dense", "lexical", "hybrid"] | None = Field(None, description="default /search mode")
    fusion: Literal["rrf", "convex"] | None = Field(None, description="hybrid's default fusion")
    alpha: float | None = Field(None, ge=0, le=1, description="convex fusion's default dense weight")
    rrf_k: float | None = Field(None, gt=0, le=10_000, description="rrf's default rank constant")
    search: dict[str, int] = Field(default_factory=dict, description="default vector-search knobs by name "
                                   "(nprobe for IVF, ef_search for HNSW)")
    max_top_k: int | None = Field(None, ge=1, le=MAX_TOP_K, description="top_k limit, at most the API's")
    max_queries: int | None = Field(None, ge=1, le=MAX_QUERIES,
                                    description="queries per /search call, at most the API's")
    filter: FilterCaps = Field(default_factory=FilterCaps)
    access: Access = Field(default_factory=Access)
    compaction: Compaction = Field(default_factory=Compaction)

    @field_validator("search")
    @classmethod
    def _known_search_params_in_range(cls, search: dict[str, int]) -> dict[str, int]:
        # the same range a request may ask (`ann.Knob.max_request`): a default no request could set is a mistake
        search_params = {k.name: k for k in KNOBS}
        for name, value in search.items():
            if name not in search_params:
                raise ValueError(f"{name!r} is no index kind's search parameter (known: {', '.join(search_params)})")
            if not 1 <= value <= search_params[name].max_request:
                raise ValueError(f"{name} must be between 1 and {search_params[name].max_request}, not {value}")
        return search

    # -- precedence: request > this file > process-wide ------------------------------------------------------------
    def fusion_for(self, kind: str | None, k: float | None, alpha: float | None) -> Fusion | None:
        """A request's fusion fields over this collection's defaults (None: nothing set anywhere, the built-in
        default). `k` alone means rrf and `alpha` alone convex, whatever the default."""
        if (kind, k, alpha, self.fusion, self.rrf_k, self.alpha) == (None,) * 6:
            return None
        kind = kind or ("rrf" if k is not None else "convex" if alpha is not None else self.fusion or "convex")
        return Fusion(kind, next(v for v in (k, self.rrf_k, DEFAULT_RRF_K) if v is not None),
                      next(v for v in (alpha, self.alpha, DEFAULT_ALPHA) if v is not None))

    def top_k_for(self, default: int) -> int:
        """The top_k of a request that gives none: the API's `default`, or this collection's `max_top_k` when lower
        (a request that asks for nothing over the limit is not refused for it)."""
        return default if self.max_top_k is None else min(default, self.max_top_k)

    def search_params_for(self, kind: str, asked: dict[str, int] | None) -> dict[str, int] | None:
        """The request's search parameters over this collection's, of those `kind` takes (a later version of another
        kind leaves them unapplied rather than refusing every search)."""
        own = {k: v for k, v in self.search.items() if k in SEARCH_PARAMS.get(kind, ())}
        merged = own | (asked or {})
        return merged or None

    def shape(self, query: Query, kind: str | None, *, brought_vector: bool = False,
              version_mode: SearchMode | None = None) -> Query:
        """`query` with this collection's defaults under the request's own (its mode unless it brings a vector,
        which decides the mode; the search parameters `kind` takes, unless the query runs lexical: it searches no
        vectors, and a request naming none must not be refused for the collection's knobs), after checking it
        against the collection's limits. `version_mode`: the mode the served version runs when neither the request
        nor this file names one (`Manifest.search_mode`)."""
        self.check_request(query)
        mode = query.mode or (None if brought_vector else self.mode)
        runs = mode or (None if brought_vector else version_mode)  # a brought vector runs dense or hybrid
        search_params = (query.search_params if kind is None or runs == "lexical"
                         else self.search_params_for(kind, query.search_params))
        return (query if (mode, search_params) == (query.mode, query.search_params)
                else replace(query, mode=mode, search_params=search_params))

    def check_request(self, query: Query) -> None:
        """Raises ConfigError (field: the request's) for a query over this collection's limits."""
        if query.top_k is not None and self.max_top_k is not None and query.top_k > self.max_top_k:
            raise ConfigError(f"top_k {query.top_k} is over this collection's limit of {self.max_top_k} "
                              f"(collection.json max_top_k)", "top_k")
        if query.top_k is not None and self.max_queries is not None and len(query.texts) > self.max_queries:
            raise ConfigError(f"{len(query.texts)} queries are over this collection's limit of {self.max_queries} "
                              f"(collection.json max_queries)", "queries")
        if query.filter is not None and self.filter != FilterCaps():
            try:
                check_limits(query.filter, self.filter.limits())
            except FilterError as exc:
                raise ConfigError(f"{exc} (this collection's limits: collection.json filter)", "filter") from None

    def check_served(self, kind: str, has_lexical: bool) -> None:
        """Raises ConfigError unless the served version can apply this config: search parameters its kind takes, in
        range, and a default mode it can run."""
        try:
            check_search_params(kind, self.search)
        except IndexParamError as exc:
            raise ConfigError(f"search: {exc}", "search") from None
        if self.mode in ("lexical", "hybrid") and not has_lexical:
            raise ConfigError(f"mode: {self.mode!r} needs a lexical index, and the served version has none", "mode")


def path_of(root: Path) -> Path:
    return Path(root) / CONFIG_FILE


def _field(err: dict[str, Any]) -> str:
    return ".".join(str(p) for p in err.get("loc", ())) or "(top level)"


def parse(data: Any, origin: str) -> CollectionConfig:
    """Validate `data` (the file's JSON); ConfigError naming `origin` and the first bad field."""
    try:
        return CollectionConfig.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = _field(err)
        raise ConfigError(f"{origin}: {field}: {err.get('msg')}", field) from None


def load(root: Path) -> CollectionConfig:
    """The collection's config (all defaults when it has no collection.json); ConfigError for a bad file."""
    path = path_of(root)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return CollectionConfig()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot be read: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    return parse(data, str(path))


def save(root: Path, config: CollectionConfig) -> Path:
    """Write the config atomically (tmp, fsync, rename, fsync of the folder); what is unset is left out."""
    path = path_of(root)
    write_json_atomic(path, config.model_dump(mode="json", exclude_defaults=True))
    return path


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text  # a bare word: mode=hybrid


def with_changes(config: CollectionConfig, sets: list[str], unsets: list[str], origin: str) -> CollectionConfig:
    """`config` with `KEY=VALUE` assignments (dotted keys: search.nprobe=32, access.write=none; VALUE as JSON,
    else a string) and KEYs reset to their defaults; ConfigError naming the field."""
    data = config.model_dump(mode="json", exclude_defaults=True)
    for item in sets:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise ConfigError(f"{origin}: --set {item!r}: expected KEY=VALUE (e.g. mode=hybrid, search.nprobe=32)")
        _assign(data, key.strip(), _value(value.strip()), origin)
    for key in unsets:
        _assign(data, key.strip(), None, origin, remove=True)
    return parse(data, origin)


def _assign(data: dict[str, Any], key: str, value: Any, origin: str, *, remove: bool = False) -> None:
    *parents, last = key.split(".")
    node = data
    for part in parents:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{origin}: {key}: {part!r} is not a group of settings", key)
        node = child
    if remove:
        node.pop(last, None)
    else:
        node[last] = value
