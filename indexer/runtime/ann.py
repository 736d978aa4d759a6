"""The one index seam: `AnnIndex`, what every kind of vector index offers, and the typed parameters of each kind.

Like Qdrant's single `VectorIndex` trait over an enum of index kinds, the rest of Strata (versions, the live
overlay, the sharded backend, build/add/compact, eval/tune/calibrate) talks to an `AnnIndex` and never to a kind:
- **flat**: exact inner-product search over every vector (no training, no search parameter);
- **ivf**: inverted lists over a trained coarse quantizer (the default from `AUTO_FLAT_BELOW` vectors on; search
  parameter `nprobe`);
- **hnsw**: FAISS's HNSW graph (search parameter `ef_search`; it cannot remove vectors in place, so a removal
  rebuilds the graph from the stored vectors, and the API's deletes go through the write overlay's tombstones).

Each kind declares itself once, here (`register_kind`, like Qdrant's enum of index kinds): its build parameters
(a pydantic model deriving `KindParams`, recorded in the manifest's `index.params`), the FAISS factory string the
manifest names, its search knob (`Knob`: name, range, the request field, the `STRATA_` variable, the CLI flag, what
calibration tunes), its `AnnIndex` class (a module of the `faiss` package, the only one that imports faiss) and
the hooks (`KindSpec`) through which `--index auto`, the build's options, `--add`'s drift, sharding, the manifest,
calibration's record and eval's table treat it; the request schema, the engine's settings, the CLI flags, the
served defaults and the checks are generated from it. No other module names a kind. This module holds what needs
no faiss: the kinds, their parameters, the abstract interface, the `auto` choice and the per-request
search-parameter checks.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, Field

AUTO = "auto"

# `--index auto`: exact search below this many vectors, IVF from it on: where exact search stops fitting a 1 ms CPU
# budget per query. Below it IVF saves under a millisecond of a served request while it costs answers (at best 0.97
# of exact's top 10) and build time (k-means, nprobe calibration); the runs: docs/scaling.md, docs/cli.md.
AUTO_FLAT_BELOW = 10_000


class IndexParamError(ValueError):
    """A search or build parameter that the index's kind does not take, or a value out of range."""


class KindParams(BaseModel):
    """The build and search parameters of some kind (each kind's model names itself in `kind`)."""

    kind: str


class FlatParams(KindParams):
    """Exact search: nothing to choose."""

    kind: Literal["flat"] = "flat"


Quantizer = Literal["flat", "hnsw"]  # how an IVF index finds a query's lists


class IvfParams(KindParams):
    kind: Literal["ivf"] = "ivf"
    nlist: int = Field(ge=1)  # lists trained (what the corpus allowed: >= 39 training vectors per list)
    nlist_requested: int = Field(ge=1)
    codec: str = "SQfp16"  # codes in the lists: SQfp16 or Flat (float32)
    nprobe: int = Field(ge=1)  # lists probed per query by default (clamped to nlist)
    nlist_reason: str | None = None  # why this nlist (logged at build time too)
    train_sample: int | None = None  # vectors k-means was trained on (bounded: `faiss.kmeans.training_sample`)
    # how a query finds its lists: scoring every centroid, or an HNSW graph over them (large nlist; older
    # versions, which do not say, were all built flat)
    quantizer: Quantizer = "flat"


class HnswParams(KindParams):
    kind: Literal["hnsw"] = "hnsw"
    m: int = Field(32, ge=2)  # graph neighbours per node (FAISS's M)
    ef_construction: int = Field(80, ge=1)
    ef_search: int = Field(64, ge=1)  # candidates kept per query by default (FAISS's efSearch)


@dataclass(frozen=True)
class Knob:
    """A kind's per-query search parameter: what trades speed for recall, and the default in its params model
    (`name` is both the request field and the params field). The request's `/search` field, the `STRATA_<NAME>`
    setting, `indexer eval`/`indexer build` `--<name>` flags and calibration's target are generated from it."""

    name: str
    max_request: int  # the largest value a /search request may ask for (part of the API contract)
    what: str  # one line: what it sets ("lists probed", "candidates kept")
    clamp: Callable[[Any, int], int] = lambda params, value: value  # the served value for a version's params

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        return "STRATA_" + self.name.upper()


@dataclass(frozen=True)
class KindSpec:
    """One index kind, declared in one place: what it is (name, parameters, factory string, knob) and the hooks
    through which the build, the manifest, calibration, sharding and eval treat it, so none of them names a kind.
    `impl` is its `AnnIndex` class, or "module:Class" imported when first used (the `faiss` package's classes
    import this module)."""

    name: str
    params: type[KindParams]  # its build and search parameters (recorded in the manifest's `index.params`)
    summary: str  # for `--index`'s help
    factory: Callable[[Any], str]  # the manifest's FAISS factory string for its params
    impl: str | type[AnnIndex]
    knob: Knob | None = None  # None: exact search, nothing to tune
    title: str = ""  # how messages name it ("IVF"); default: the name
    auto_from: int | None = None  # `--index auto` picks the kind of the largest auto_from <= N; None: never
    # build options (`BuildConfig` fields) only this kind takes: given, they choose it under `--index auto` and
    # are refused with another kind
    options: tuple[str, ...] = ()
    trained: bool = False  # it learns from the vectors it was built on (`--add` tracks the drift from them)
    shards: bool = False  # kept as shard files sharing one trained index (`indexer shard`, the Ray build)
    # the manifest's fields beside `params` for this kind (what the first manifests carried), and its record of
    # a calibration (the field of `IndexInfo` a `--target-recall` result goes to)
    manifest_fields: Callable[[Any], dict[str, Any]] = lambda params: {}
    calibration_field: str = "calibration"
    # how eval's table names a search at `search_params` (default: the kind and its values, "(exact)" without a knob)
    describe_as: Callable[[Mapping[str, int]], str] | None = None

    @property
    def label(self) -> str:
        return self.title or self.name

    def describe(self, search_params: Mapping[str, int]) -> str:
        if self.describe_as is not None:
            return self.describe_as(search_params)
        return " ".join([self.name, *(f"{k} {v}" for k, v in search_params.items())]) + \
            ("" if self.knob else " (exact)")

    def implementation(self) -> type[AnnIndex]:
        """The kind's `AnnIndex` class (imported on first use when given by name)."""
        if isinstance(self.impl, str):
            module, _, cls = self.impl.partition(":")
            return getattr(importlib.import_module(module), cls)  # type: ignore[no-any-return]
        return self.impl


KIND_SPECS: dict[str, KindSpec] = {}


def register_kind(spec: KindSpec) -> KindSpec:
    """Declare a kind: `KIND_SPECS`, `SEARCH_PARAMS` and `KNOBS` follow. Every kind Strata ships is registered
    below; a kind of a plugin or a test registers the same way (`unregister_kind` takes it back)."""
    if spec.params.model_fields["kind"].default != spec.name:
        raise ValueError(f"{spec.params.__name__}.kind must default to {spec.name!r}")
    KIND_SPECS[spec.name] = spec
    SEARCH_PARAMS[spec.name] = (spec.knob.name,) if spec.knob else ()
    if spec.knob is not None and spec.knob.name not in {k.name for k in KNOBS}:
        KNOBS.append(spec.knob)
    return spec


def unregister_kind(name: str) -> None:
    spec = KIND_SPECS.pop(name)
    SEARCH_PARAMS.pop(name)
    if spec.knob is not None and all(s.knob is None or s.knob.name != spec.knob.name for s in KIND_SPECS.values()):
        KNOBS.remove(spec.knob)


# The per-query search parameters each kind takes (a /search request, `indexer eval --nprobe/--ef-search`).
SEARCH_PARAMS: dict[str, tuple[str, ...]] = {}
# Every kind's knob, once each (the request fields, settings and flags generated from them)
KNOBS: list[Knob] = []

# The kinds Strata ships, each declared here once; their classes are the `faiss` package's modules of the same
# names (HNSW32 in ivf's factory: `faiss.quantizer.QUANTIZER_HNSW_M`).
for _spec in (
    KindSpec("flat", FlatParams, "exact search", lambda p: "IDMap2,Flat", "indexer.runtime.faiss.flat:FlatIndex",
             auto_from=0),
    KindSpec("ivf", IvfParams, "inverted lists, --nlist/--nprobe/--codec",
             lambda p: f"IVF{p.nlist}{'_HNSW32' if p.quantizer == 'hnsw' else ''},{p.codec}",
             "indexer.runtime.faiss.ivf:IvfIndex",
             Knob("nprobe", 1_000_000, "lists probed (clamped to nlist)",
                  clamp=lambda p, v: max(1, min(int(v), p.nlist))),
             title="IVF", auto_from=AUTO_FLAT_BELOW, options=("nlist", "nprobe", "codec", "memory_budget"),
             trained=True, shards=True, calibration_field="nprobe_calibration",
             describe_as=lambda sp: f"nprobe {sp.get('nprobe')}",
             manifest_fields=lambda p: {"nlist": p.nlist, "nlist_requested": p.nlist_requested, "nprobe": p.nprobe}),
    KindSpec("hnsw", HnswParams, "graph, --hnsw-m/--ef-construction/--ef-search", lambda p: f"IDMap2,HNSW{p.m}",
             "indexer.runtime.faiss.hnsw:HnswIndex", Knob("ef_search", 100_000, "candidates kept"), title="HNSW"),
):
    register_kind(_spec)
KINDS = tuple(KIND_SPECS)  # the kinds Strata ships (`--index`'s choices)
SHARDED_KIND = next(name for name, spec in KIND_SPECS.items() if spec.shards)  # what the Ray build builds
DEFAULT_KIND = SHARDED_KIND  # `BuildConfig.index` of a programmatic build (the CLI's default is auto)


def param_default(field: str) -> Any:
    """The declared default of build parameter `field`, from the kind whose params model has it (the CLI's and
    `BuildConfig`'s defaults of a kind's own build options)."""
    return next(s.params.model_fields[field].default for s in KIND_SPECS.values() if field in s.params.model_fields)


def parse_params(data: Any) -> KindParams:
    """`index.params` of a manifest (or a params model already) as its kind's model (`KIND_SPECS`)."""
    if isinstance(data, KindParams):
        return data
    kind = data.get("kind") if isinstance(data, dict) else None
    if kind not in KIND_SPECS:
        raise ValueError(f"unknown index kind {kind!r}: one of {', '.join(KIND_SPECS)}")
    return KIND_SPECS[kind].params.model_validate(data)


def first_manifest_params(data: dict[str, Any]) -> dict[str, Any]:
    """The `params` of a manifest written before there were kinds, from its nlist/nprobe/factory fields."""
    factory = str(data.get("factory", ""))
    codec = factory.split(",", 1)[1] if "," in factory else "SQfp16"
    return {"kind": IvfParams.model_fields["kind"].default, "nlist": data["nlist"], "codec": codec,
            "nlist_requested": data.get("nlist_requested") or data["nlist"], "nprobe": data.get("nprobe") or 1}


def served_search_params(params: KindParams, overrides: Mapping[str, int | None] | None = None) -> dict[str, int]:
    """The search parameters a version of `params` serves by default: its knob's value in `params`, or the
    override given for it (`STRATA_<KNOB>`), clamped by the kind; {} for exact search."""
    knob = KIND_SPECS[params.kind].knob
    if knob is None:
        return {}
    value = (overrides or {}).get(knob.name) or getattr(params, knob.name)
    return {knob.name: knob.clamp(params, int(value))}


def check_search_params(kind: str, search_params: Mapping[str, int | None] | None) -> dict[str, int]:
    """The search parameters of `search_params` that are set, checked against what `kind` takes (`IndexParamError` with
    the reason otherwise: asking a flat index for nprobe is a mistake worth hearing about, not a silent no-op)."""
    given = {k: int(v) for k, v in (search_params or {}).items() if v is not None}
    for name, value in given.items():
        if name not in SEARCH_PARAMS[kind]:
            takes = ", ".join(SEARCH_PARAMS[kind]) or "none (it searches exactly)"
            raise IndexParamError(f"'{name}' is not a search parameter of this version's {kind} index; it takes "
                                  f"{takes}")
        if value < 1:
            raise IndexParamError(f"'{name}' must be >= 1, not {value}")
    return given


def choose_kind(requested: str, n_vectors: int) -> str:
    """`--index`: the kind asked for, or for `auto` the kind of the largest `auto_from` <= `n_vectors` (flat below
    `AUTO_FLAT_BELOW` vectors, IVF from it on)."""
    if requested == AUTO:
        auto = [(s.auto_from, s.name) for s in KIND_SPECS.values() if s.auto_from is not None]
        return max(a for a in auto if a[0] <= n_vectors)[1]
    if requested not in KIND_SPECS:
        raise IndexParamError(f"--index must be one of auto, {', '.join(KIND_SPECS)}; not {requested!r}")
    return requested


class AnnIndex(ABC):
    """A vector index of one kind: inner product on L2-normalised vectors, int64 ids (FAISS ids; the store maps
    them to external int or string ids). Search answers are (scores, ids), each (n, k), id -1 where there is
    no hit. Selectors (`prepare`'s `IdFilter`, the overlay's `Exclusion`) act inside the search, never by
    dropping hits afterwards."""

    kind: ClassVar[str]
    params: KindParams

    @classmethod
    def params_for(cls, options: Mapping[str, Any], n_vectors: int, dim: int) -> KindParams:
        """A new index's parameters for `n_vectors` of `dim` dimensions from a build's options (`BuildConfig`'s
        fields by name): by default the kind's declared defaults, and its knob's value when given."""
        spec = KIND_SPECS[cls.kind]
        knob = spec.knob
        given = options.get("eval_search_params") or {}
        return spec.params(**({knob.name: given[knob.name]} if knob and knob.name in given else {}))

    @classmethod
    def split_file(cls, path: Path, outs: list[Path], progress: Callable[[int, int], None] | None = None
                   ) -> list[int]:
        """Split this kind's index file at `path` into `len(outs)` shard files (shard s: the ids with id % len(outs)
        == s) that merge back into an index answering as the original; returns each shard's vector count. Only a
        kind kept as shards (`KindSpec.shards`) implements it."""
        raise ValueError(f"a {cls.kind} index is not kept as shards: only "
                         f"{KIND_SPECS[SHARDED_KIND].label} versions are")

    @classmethod
    def train_empty(cls, sample: np.ndarray, params: KindParams, seed: int) -> Any:
        """An index of this kind at `params` trained on `sample` and holding no vectors: the template every shard of
        a distributed build is filled into (the Ray build). Only a kind kept as shards implements it."""
        raise ValueError(f"a {cls.kind} index is not kept as shards: only "
                         f"{KIND_SPECS[SHARDED_KIND].label} versions are")

    @property
    @abstractmethod
    def dim(self) -> int: ...

    @property
    @abstractmethod
    def ntotal(self) -> int: ...

    @abstractmethod
    def search(self, queries: np.ndarray, k: int, *, exclude: Any = None,
               search_params: Mapping[str, int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top k; `exclude` (`faiss.search.Exclusion`): ids to skip inside the search; `search_params`: this search's
        parameters (`SEARCH_PARAMS`), else the index's defaults."""

    @abstractmethod
    def prepare(self, ids: np.ndarray) -> Any:
        """The ids among `ids` that this index holds, as a `faiss.filtered.IdFilter` for `filtered_search`."""

    def with_codes(self, flt: Any) -> Any:
        """`flt` made faster to search again, for a filter used more than once (IVF: a few matches' codes gathered
        for exact search, `faiss.filtered.exact_pays`, or more in inverted lists of their own,
        `faiss.filtered.own_lists_pay`); the same `flt` where nothing pays."""
        return flt

    def warm_filters(self) -> None:
        """Build now what every filter's `prepare` needs once per index (IVF: its `ListLocator`); nothing here."""
        return None

    @abstractmethod
    def filtered_search(self, queries: np.ndarray, k: int, flt: Any, *, search_params: Mapping[str, int] | None = None
                        ) -> tuple[np.ndarray, np.ndarray, bool]:
        """(scores, ids, exact): top k among `flt`'s ids only; `exact` True when every match was scored."""

    @abstractmethod
    def exact_search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Exact top k over the vectors this index holds (the reference for ANN recall)."""

    @abstractmethod
    def stored_vectors(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids, float32 vectors) held."""

    @abstractmethod
    def vectors_of(self, ids: np.ndarray) -> np.ndarray:
        """The float32 vectors held under `ids`, one row each in their order (as the index's codes hold them);
        KeyError for an id it does not hold."""

    @abstractmethod
    def sample_stored(self, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """(ids, vectors) of `n` stored vectors drawn uniformly without replacement (seeded)."""

    @abstractmethod
    def add(self, vectors: np.ndarray, ids: np.ndarray) -> None: ...

    @abstractmethod
    def remove(self, ids: np.ndarray) -> int:
        """Remove the vectors stored under `ids`; returns how many were removed."""

    @abstractmethod
    def memory_bytes(self) -> int: ...

    @abstractmethod
    def save(self, path: Path) -> None: ...

    # -- the kind's one search parameter, for calibration and reporting --------------------------------------------
    def knob(self) -> tuple[str, int, int] | None:
        """(name, smallest, largest) of the parameter that trades speed for recall; None: exact search."""
        return None

    def set_default(self, name: str, value: int) -> int:
        """Make `value` this index's default for search parameter `name`; returns what was set (clamped)."""
        raise IndexParamError(f"a {self.kind} index has no search parameter '{name}'")

    def defaults(self) -> dict[str, int]:
        """The search parameters used when a search gives none."""
        return {}

    def written_lists(self) -> Any:
        """Empty inverted lists for the live overlay's written vectors on this index's own coarse quantizer
        (`faiss.written.WrittenLists`, probed as this index is); None: this kind has none to share (the overlay
        trains its own)."""
        return None
