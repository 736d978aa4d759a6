"""The requests each client method sends, built once for the sync and the async client (which differ only in
how they send them): routes, bodies, batching to the server's limits."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from strata_client.types import DocId, Document, Found, StoredDocument

# the server's limits (service/schemas/): larger inputs are split into several requests
MAX_TEXTS = 64  # texts per /encode, queries per /search
MAX_TEXT_CHARS = 2000  # characters per text the API takes (a built corpus's documents may be longer)
MAX_WRITE_DOCS = 128  # documents per PUT /documents
MAX_DELETE_IDS = 1000  # ids per POST /documents/delete
MAX_GET_IDS = 1000  # ids per POST /documents/get
MAX_SCROLL_LIMIT = 1000  # documents per POST /documents/scroll page


# how the server reads an integer id in a path (`service.engine.reading`): "17", not "-0" nor "007"
_INT = re.compile(r"0|-?[1-9][0-9]*")


def text_ids_asked(ids: Sequence[str]) -> list[DocId]:
    """The ids to ask for when an integration's ids are strings (LangChain's, LlamaIndex's): each string, and for
    those an integer id prints as, that integer too (a corpus built with integer ids: its hits' ids are their
    decimal strings)."""
    return [*ids, *(int(i) for i in ids if _INT.fullmatch(i) and -(1 << 63) <= int(i) < (1 << 63))]


def text_ids_found(ids: Sequence[str], found: Found) -> list[StoredDocument]:
    """One document per string id asked (the string id's first, else the integer's it spells), in the order
    asked; ids no document has left out."""
    by_key = {(type(d.id), d.id): d for d in found.documents}
    out, seen = [], set()
    for i in dict.fromkeys(ids):
        doc = by_key.get((str, i)) or (by_key.get((int, int(i))) if _INT.fullmatch(i) else None)
        if doc is not None and (type(doc.id), doc.id) not in seen:
            seen.add((type(doc.id), doc.id))
            out.append(doc)
    return out


def spelled_ints(ids: Sequence[Any]) -> list[str]:
    """The string ids among `ids` that spell an integer: those a delete must look up (`ints_meant`)."""
    return [i for i in ids if isinstance(i, str) and _INT.fullmatch(i)]


def ints_meant(spelled: Sequence[str], found: Found) -> list[int]:
    """The integer ids meant by decimal strings no string id has (`found`: `get_many(text_ids_asked(spelled))`):
    deleting a hit's `Document.id` / `node_id` of a corpus built with integer ids deletes its document."""
    return [d.id for d in text_ids_found(spelled, found) if isinstance(d.id, int)]


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    json: Any = None
    params: dict[str, str] | None = None
    answers: tuple[int, ...] = (200,)  # statuses whose body is the answer (/ready: 503 too)
    retry: bool = True


def route(collection: str | None, path: str) -> str:
    """The route on `collection`, or on the default collection when None (the routes without /collections/)."""
    return path if collection is None else f"/collections/{quote(collection, safe='')}{path}"


def chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


def search_body(texts: list[str], single: bool, *, top_k: int | None, filter: dict[str, Any] | None, mode: str | None,
                fusion: str | None, k: float | None, alpha: float | None, nprobe: int | None,
                ef_search: int | None, passages: bool | None = None, snippets: bool | None = None
                ) -> dict[str, Any]:
    body: dict[str, Any] = {"query": texts[0]} if single else {"queries": texts}
    # top_k None: left out, so the server's default applies (10, or the collection's max_top_k when lower)
    optional = {"top_k": top_k, "filter": filter, "mode": mode, "fusion": fusion, "k": k, "alpha": alpha,
                "nprobe": nprobe, "ef_search": ef_search, "passages": passages, "snippets": snippets}
    body |= {name: value for name, value in optional.items() if value is not None}
    return body


def search_calls(collection: str | None, query: str | list[str], **options: Any) -> tuple[list[str], list[Call]]:
    single = isinstance(query, str)
    texts: list[str] = [query] if isinstance(query, str) else list(query)
    if not texts:
        raise ValueError("no queries given")
    path = route(collection, "/search")
    calls = [Call("POST", path, search_body(part, single, **options)) for part in chunks(texts, MAX_TEXTS)]
    return texts, calls


def encode_calls(texts: list[str]) -> list[Call]:
    if not texts:
        raise ValueError("no texts given")
    return [Call("POST", "/encode", {"texts": part}) for part in chunks(texts, MAX_TEXTS)]


def embeddings_calls(texts: list[str], model: str) -> list[Call]:
    """A collection's encoder is reached through /v1/embeddings by its model id (/encode serves the default)."""
    if not texts:
        raise ValueError("no texts given")
    return [Call("POST", "/v1/embeddings", {"input": part, "model": model, "encoding_format": "float"})
            for part in chunks(texts, MAX_TEXTS)]


def upsert_calls(collection: str | None, documents: Iterable[Any], batch_size: int) -> list[Call]:
    docs = [Document.of(d).to_json() for d in documents]
    if not docs:
        raise ValueError("no documents given")
    size = _batch(batch_size, MAX_WRITE_DOCS)
    return [Call("PUT", route(collection, "/documents"), {"documents": part}) for part in chunks(docs, size)]


def delete_calls(collection: str | None, ids: Iterable[DocId], batch_size: int) -> list[Call]:
    if isinstance(ids, str | int):
        raise TypeError("ids is a list of ids (a single id goes in a list: [id])")
    wanted = list(ids)
    if not wanted:
        raise ValueError("no ids given")
    size = _batch(batch_size, MAX_DELETE_IDS)
    return [Call("POST", route(collection, "/documents/delete"), {"ids": part}) for part in chunks(wanted, size)]


def get_calls(collection: str | None, ids: Iterable[DocId], with_vector: bool) -> list[Call]:
    if isinstance(ids, str | int):
        raise TypeError("ids is a list of ids (a single id goes in a list: [id], or use get(id))")
    wanted = list(ids)
    if not wanted:
        raise ValueError("no ids given")
    return [Call("POST", route(collection, "/documents/get"), {"ids": part, "with_vector": with_vector})
            for part in chunks(wanted, MAX_GET_IDS)]


def count_call(collection: str | None, filter: dict[str, Any] | None) -> Call:
    return Call("POST", route(collection, "/documents/count"), {} if filter is None else {"filter": filter})


def scroll_call(collection: str | None, limit: int, cursor: str | None, filter: dict[str, Any] | None,
                with_vector: bool) -> Call:
    if not 1 <= limit <= MAX_SCROLL_LIMIT:
        raise ValueError(f"limit must be 1..{MAX_SCROLL_LIMIT} (the server's limit per page)")
    body: dict[str, Any] = {"limit": limit, "with_vector": with_vector}
    body |= {k: v for k, v in (("cursor", cursor), ("filter", filter)) if v is not None}
    return Call("POST", route(collection, "/documents/scroll"), body)


def _batch(size: int, limit: int) -> int:
    if not 1 <= size <= limit:
        raise ValueError(f"batch_size must be 1..{limit} (the server's limit per request)")
    return size


def ready_call() -> Call:
    return Call("GET", "/ready", answers=(200, 503), retry=False)


def reload_call(collection: str | None, force: bool) -> Call:
    return Call("POST", route(collection, "/admin/reload"), params={"force": "true"} if force else None,
                retry=False)


def create_collection_call(name: str, encoder: str | None, settings: dict[str, Any] | None) -> Call:
    body: dict[str, Any] = {"name": name}
    body |= {k: v for k, v in (("encoder", encoder), ("settings", settings)) if v is not None}
    return Call("POST", "/collections", body, answers=(201,), retry=False)  # a second try would be a 409


def delete_collection_call(name: str) -> Call:
    return Call("DELETE", route(name, ""), retry=False)


def headers(api_key: str | None) -> dict[str, str]:
    from strata_client import __version__

    out = {"User-Agent": f"strata-client/{__version__}"}
    if api_key:
        out["Authorization"] = f"Bearer {api_key}"
    return out
