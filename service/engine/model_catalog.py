"""The models `/v1` serves when there are several collections: each distinct encoder once, under a stable id.

Ids (decided so that a client's stored id means one encoder's vectors):
- the default collection's encoder keeps its id of one root (`STRATA_MODEL_NAME`, else `strata-<dim>`, see
  `model_names`);
- every other distinct encoder is listed as `strata-<dim>@<collection>`, `<collection>` the first collection (by
  name) that pairs with it: two encoders of the same dimension never share an id;
- `strata-<dim>@<name>` names collection `<name>`'s encoder, whichever it is, and is always accepted: the id to pin
  when a client wants "the model of collection X" across added collections; the encoder folder names and the
  aliases of each collection (`model_names`) are accepted too.

Access: a key restricted to collections (`service.auth`) sees and uses an encoder only through a collection it may
read; `may_read` is the key's test. What a name means does not depend on the key (`_named` resolves it first): a
name whose encoder serves only collections the key may not read is `Forbidden` (403), even when a readable
collection would also answer to it as an alias (else one id could mean garden's vectors for a garden key and faq's
for an admin key). A name whose encoder a readable collection uses too — `strata-<dim>@faq` for a `read@notes` key
when notes and faq share one encoder — answers: the vectors are the same (docs/collections.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from service.engine.collection import Collection, ServedModel
from service.engine.errors import EngineError, NotReady
from service.engine.model_names import DimensionChanged, UnknownModel
from service.engine.registry import Collections


class Forbidden(EngineError):
    """The name is served, but only by collections the key may not read (the HTTP layer answers 403)."""


@dataclass(frozen=True)
class ListedModel:
    model: ServedModel  # `name` is its listed id
    collections: list[str]  # those pairing with it, by name


def listed(collections: Collections) -> list[ListedModel]:
    """Each distinct encoder of the ready collections, default collection's first."""
    default = collections.default_name()
    order = ([default] if default else []) + [n for n in collections.names() if n != default]
    groups: dict[int, tuple[ServedModel, list[str]]] = {}
    for name in order:
        collection = collections.by_name[name]
        searcher = collection.leases.current
        if searcher is None:
            continue
        key = id(searcher.encoder)
        if key not in groups:
            served = collection.served_model()
            if name != default:
                served = ServedModel(f"strata-{served.dim}@{name}", served.encoder, served.dim, served.max_length,
                                     served.pooling, served.exported_at)
            groups[key] = (served, [])
        groups[key][1].append(name)
    return [ListedModel(m, names) for m, names in groups.values()]


def resolve(collections: Collections, asked: str, may_read: Callable[[str], bool]) -> tuple[Collection, ServedModel]:
    """The collection whose encoder answers `asked`, and the model as listed; raises UnknownModel,
    DimensionChanged, Forbidden or NotReady."""
    models = listed(collections)
    if not models and collections.by_name:
        collection = collections.default() if collections.default_name() else next(iter(collections.by_name.values()))
        raise NotReady(collection.not_ready_reason())
    base, at, name = asked.partition("@")
    if at and name in collections.by_name:  # strata-<dim>@<collection>
        collection = collections.by_name[name]
        # a collection the key may not read lends its encoder through one it may read that pairs with it
        readable = [n for n in _pairing(models, name) if may_read(n)]
        if not readable:
            raise Forbidden(f"this API key may not use collection {name!r} (nor one using its encoder)")
        served = collection.served_model()
        if base == f"strata-{served.dim}":
            answers = name if may_read(name) else readable[0]
            return collections.by_name[answers], _as_listed(models, collection, served)
        if base.startswith("strata-"):
            raise DimensionChanged(asked, _dim(base), f"strata-{served.dim}@{name}", served.dim, served.encoder)
        raise UnknownModel(asked, f"strata-{served.dim}@{name}")
    # one id names one encoder whoever asks: found without the key, which is then checked (a key that may not use
    # it gets a 403, never the encoder of another collection that answers to the same name)
    try:
        collection, served = _named(collections, models, asked)
    except UnknownModel:
        readable = [m.model.name for m in models if any(may_read(n) for n in m.collections)]
        raise UnknownModel(asked, ", ".join(f"`{r}`" for r in readable).strip("`") or "no model you may use") \
            from None
    readable = [n for n in _pairing(models, collection.name) if may_read(n)]
    if not readable:
        raise Forbidden(f"the model `{asked}` is served only for collections this API key may not use")
    return collections.by_name[readable[0]], _as_listed(models, collection, served)


def _named(collections: Collections, models: list[ListedModel], asked: str) -> tuple[Collection, ServedModel]:
    """The collection whose encoder `asked` names, for every caller: a listed id, else the first collection
    (the default one first, then by name) whose encoder has that name (its folder's, or a kept version's), else
    the first that takes it as an alias (`STRATA_MODEL_ALIASES`, `["*"]` included: an alias never shadows another
    encoder's own name); raises UnknownModel, or the default collection's DimensionChanged when none takes it."""
    for m in models:
        if m.model.name == asked:
            return collections.by_name[m.collections[0]], m.model
    default = collections.default_name()
    order = ([default] if default else []) + [n for n in collections.names() if n != default]
    first_error: EngineError | None = None
    for aliases in (False, True):
        for name in order:
            collection = collections.by_name[name]
            if collection.leases.current is None:
                continue
            try:
                return collection, collection.served_model(asked, aliases=aliases)
            except (UnknownModel, DimensionChanged) as exc:
                if name == default and isinstance(exc, DimensionChanged) and first_error is None:
                    first_error = exc
    if first_error is not None:
        raise first_error
    raise UnknownModel(asked, "")


def _pairing(models: list[ListedModel], name: str) -> list[str]:
    """The collections that use collection `name`'s encoder (one loaded encoder: the same `encoder.json`), itself
    included."""
    return next((m.collections for m in models if name in m.collections), [name])


def _as_listed(models: list[ListedModel], collection: Collection, served: ServedModel) -> ServedModel:
    for m in models:
        if collection.name in m.collections:
            return m.model
    return served


def _dim(base: str) -> int:
    try:
        return int(base.removeprefix("strata-"))
    except ValueError:
        return 0
