"""One collection's documents read back: by id (`get_document`, `get_documents`), counted (`count_documents`) and
paged through (`scroll_documents`), on the version the collection serves under its write overlay
(`indexer.runtime.reading`), so a read right after an acknowledged write sees it and a deleted document is never
read back — before and after `indexer compact`, across swaps and restarts.

Each call is admitted like a search (`Scheduler.admitted`: the in-flight cap, the request timeout), leases the
served searcher for its whole run (a swap never changes the version under a page) and runs off the event loop
(SQLite reads, vectors decoded from the index). A filter is refused as a search's is (`BadFilter`: not the
version's metadata; `BadConfig`: past the collection's own filter limits)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from indexer.runtime.collection_config import CollectionConfig, FilterCaps
from indexer.runtime.filters import FilterError, check_limits
from indexer.runtime.ids import ExtId
from indexer.runtime.reading import DocumentNotFound, Documents, Page, StoredDocument
from service.engine.errors import BadConfig, BadFilter, NotReady
from service.engine.leases import Leases
from service.engine.scheduler import Scheduler

T = TypeVar("T")
_INT = re.compile(r"0|-?[1-9][0-9]*")  # how an integer id is spelled: not "-0", "007" nor "+7"


class Readable(Protocol):
    """What reading needs of a collection (`Collection`)."""

    name: str
    leases: Leases
    scheduler: Scheduler
    config: CollectionConfig

    def not_ready_reason(self) -> str: ...


def path_ids(raw: str) -> list[ExtId]:
    """The ids a URL's `{id}` may name, in the order they are tried: the string id, then the integer id it spells
    ("17" finds the string id "17", else the integer id 17; "007" and "-0" are strings only)."""
    out: list[ExtId] = [raw]
    if _INT.fullmatch(raw) and -(1 << 63) <= int(raw) < (1 << 63):
        out.append(int(raw))
    return out


async def _read(collection: Readable, call: Callable[[Documents], T], flt: object = None) -> T:
    if flt is not None and collection.config.filter != FilterCaps():
        try:
            check_limits(flt, collection.config.filter.limits())
        except FilterError as exc:
            raise BadConfig(f"{exc} (this collection's limits: collection.json filter)", ["filter"]) from None

    if collection.leases.current is None:
        raise NotReady(collection.not_ready_reason())

    def run() -> T:
        searcher = collection.leases.acquire()  # NotReady once the collection is closed
        try:
            return call(Documents(searcher.index))
        except FilterError as exc:
            raise BadFilter(str(exc)) from None
        finally:
            collection.leases.release(searcher)

    async with collection.scheduler.admitted():
        return await asyncio.to_thread(run)


async def get_document(collection: Readable, ids: Sequence[ExtId], *, with_vector: bool = False) -> StoredDocument:
    """The first of `ids` (one document's names: `path_ids`) that a live document has; DocumentNotFound."""
    found = await _read(collection, lambda docs: docs.get(ids, with_vector=with_vector))
    for doc in found:
        if doc is not None:
            return doc
    spelt = " (as a string or as an integer)" if len(ids) > 1 else ""
    raise DocumentNotFound(ids[0], f"{spelt} in collection {collection.name!r}")


async def get_documents(collection: Readable, ids: Sequence[ExtId], *, with_vector: bool = False
                        ) -> tuple[list[StoredDocument], list[ExtId]]:
    """The documents with these ids in their order (an id given twice, once), and the ids no live document has."""
    unique = list(dict.fromkeys((type(i), i) for i in ids))  # 17 and "17" are two ids
    found = await _read(collection, lambda docs: docs.get([i for _, i in unique], with_vector=with_vector))
    docs = [d for d in found if d is not None]
    return docs, [i for (_, i), d in zip(unique, found, strict=True) if d is None]


async def count_documents(collection: Readable, flt: object = None) -> int:
    return await _read(collection, lambda docs: docs.count(flt), flt)


async def scroll_documents(collection: Readable, limit: int, cursor: str | None = None, flt: object = None, *,
                           with_vector: bool = False) -> Page:
    return await _read(collection, lambda docs: docs.scroll(limit, cursor, flt, with_vector=with_vector), flt)
