"""What the client sends and gets back, as dataclasses (the server's JSON, typed). `raw` keeps the whole answer
for fields a newer server adds."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

DocId = int | str  # kept as given: 17 and "17" are two documents
Mode = Literal["dense", "lexical", "hybrid"]
Fusion = Literal["rrf", "convex"]


@dataclass(frozen=True)
class Document:
    """A document to upsert: `metadata` values are strings, numbers and bools (filterable), lists and objects."""

    id: DocId
    text: str
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "text": self.text, "metadata": self.metadata}

    @classmethod
    def of(cls, doc: Document | Mapping[str, Any] | tuple[Any, ...]) -> Document:
        """A Document from itself, a dict `{"id", "text", "metadata"?}` or a tuple `(id, text[, metadata])`."""
        if isinstance(doc, Document):
            return doc
        if isinstance(doc, Mapping):
            unknown = set(doc) - {"id", "text", "metadata"}
            if unknown or not {"id", "text"} <= set(doc):
                raise TypeError(f"a document is {{'id', 'text', 'metadata'?}}; got keys {sorted(doc)}")
            return cls(doc["id"], doc["text"], dict(doc.get("metadata") or {}))
        if isinstance(doc, tuple) and len(doc) in (2, 3):
            return cls(doc[0], doc[1], dict(doc[2]) if len(doc) == 3 and doc[2] else {})
        raise TypeError(f"a document is a strata_client.Document, a dict or an (id, text[, metadata]) tuple, "
                        f"not {type(doc).__name__}")


@dataclass(frozen=True)
class Passage:
    """A version built with passages: the passage of a hit (`Hit.text` is its text, `document[start:end]`)."""

    index: int  # its number in the document, from 0
    start: int
    end: int
    count: int  # the document's passages
    snippet: str  # HTML: a window of the passage, the query's terms in <mark>, the rest escaped

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Passage:
        return cls(int(d["index"]), int(d["start"]), int(d["end"]), int(d["count"]), str(d.get("snippet", "")))


@dataclass(frozen=True)
class Hit:
    id: DocId
    text: str
    score: float
    metadata: dict[str, Any]
    passage: Passage | None = None  # a version built with passages: the passage that matched; None: whole documents

    @property
    def snippet(self) -> str | None:
        """The passage's highlighted snippet (HTML), or None on a version of whole documents."""
        return None if self.passage is None else self.passage.snippet

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Hit:
        passage = d.get("passage")
        return cls(d["id"], d["text"], float(d["score"]), dict(d.get("metadata") or {}),
                   Passage.from_json(passage) if passage else None)


@dataclass(frozen=True)
class SearchResult:
    """One query's answer: `hits` best first; `mode` the mode that ran; `truncated`: the query was cut to the
    model's max_length tokens, or (a version of passages) fewer than top_k documents came back though more may
    match; `stages`: where the server's time went (ms)."""

    query: str
    hits: list[Hit]
    truncated: bool
    mode: Mode
    index_version: str
    took_ms: float
    stages: dict[str, float]
    raw: dict[str, Any] = field(repr=False, compare=False)

    def __iter__(self):  # noqa: ANN204 - `for hit in client.search(...)`
        return iter(self.hits)

    def __len__(self) -> int:
        return len(self.hits)

    @property
    def ids(self) -> list[DocId]:
        return [h.id for h in self.hits]


def search_results(queries: list[str], body: dict[str, Any]) -> list[SearchResult]:
    common = {"mode": body["mode"], "index_version": body["index_version"], "took_ms": float(body["took_ms"]),
              "stages": dict(body.get("stages") or {}), "raw": body}
    if "results" in body:
        return [SearchResult(query=r["query"], hits=[Hit.from_json(h) for h in r["hits"]],
                             truncated=bool(r["truncated"]), **common) for r in body["results"]]
    return [SearchResult(query=queries[0], hits=[Hit.from_json(h) for h in body["hits"]],
                         truncated=bool(body.get("truncated", False)), **common)]


@dataclass(frozen=True)
class PassageText:
    """One passage of a document read back from a version of passages: its number, `[start, end)` offsets into
    the document's text, its text, and its vector when asked for."""

    index: int
    start: int
    end: int
    text: str
    vector: list[float] | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> PassageText:
        return cls(int(d["index"]), int(d["start"]), int(d["end"]), d["text"], d.get("vector"))


@dataclass(frozen=True)
class StoredDocument:
    """A document read back as the collection serves it now (writes included): `vector` when asked for (the one
    its index holds); `passages` on a version of passages (each with its vector, when asked for)."""

    id: DocId
    text: str
    metadata: dict[str, Any]
    passages: list[PassageText] | None = None
    vector: list[float] | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> StoredDocument:
        passages = d.get("passages")
        return cls(d["id"], d["text"], dict(d.get("metadata") or {}),
                   None if passages is None else [PassageText.from_json(p) for p in passages], d.get("vector"))


@dataclass(frozen=True)
class Found:
    """`get_many`'s answer: the documents found, in the order asked, and the ids no document has."""

    documents: list[StoredDocument]
    not_found: list[DocId]

    def __iter__(self):  # noqa: ANN204 - `for doc in client.get_many(ids)`
        return iter(self.documents)

    def __len__(self) -> int:
        return len(self.documents)


@dataclass(frozen=True)
class ScrollPage:
    """One page of `scroll`: `documents` in id order, and the cursor of the next page (None: the last one)."""

    documents: list[StoredDocument]
    next_cursor: str | None

    def __iter__(self):  # noqa: ANN204
        return iter(self.documents)

    def __len__(self) -> int:
        return len(self.documents)


@dataclass(frozen=True)
class Embeddings:
    """`/encode`'s answer: L2-normalised vectors, the same the index holds, by the served version's encoder;
    `truncated` per text (cut to the model's max_length tokens), empty when the route does not say (a
    non-default collection's encoder, reached through /v1/embeddings)."""

    vectors: list[list[float]]
    dim: int
    truncated: list[bool]
    index_version: str
    took_ms: float

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Embeddings:
        return cls(d["vectors"], int(d["dim"]), list(d["truncated"]), d["index_version"], float(d["took_ms"]))


@dataclass(frozen=True)
class UpsertResult:
    """Durable (fsync'd) and searchable when returned. Over several requests (more than 128 documents), the
    counts add up and `seq`, `index_version`, `index_size` are the last request's. The counts are documents;
    `passages_written`: on a version of passages, the passage rows written (None on a version of documents)."""

    upserted: int
    created: int
    replaced: int
    seq: int
    index_version: str
    index_size: int
    took_ms: float
    passages_written: int | None = None


@dataclass(frozen=True)
class DeleteResult:
    """`missing`: ids that were not served (they stay deleted should a later version hold them). The counts are
    documents; `passages_deleted`: on a version of passages, the passage rows removed (None on one of documents)."""

    deleted: int
    missing: int
    seq: int
    index_version: str
    index_size: int
    took_ms: float
    passages_deleted: int | None = None


def merge_writes(kind: type[UpsertResult] | type[DeleteResult], answers: list[dict[str, Any]]
                 ) -> UpsertResult | DeleteResult:
    counts = ("upserted", "created", "replaced") if kind is UpsertResult else ("deleted", "missing")
    passages = "passages_written" if kind is UpsertResult else "passages_deleted"
    last = answers[-1]
    rows = [a[passages] for a in answers if a.get(passages) is not None]
    return kind(**{c: sum(int(a[c]) for a in answers) for c in counts},  # type: ignore[arg-type]
                seq=int(last["seq"]), index_version=last["index_version"], index_size=int(last["index_size"]),
                took_ms=sum(float(a["took_ms"]) for a in answers), **{passages: sum(rows) if rows else None})


@dataclass(frozen=True)
class Readiness:
    """`GET /ready`: `ready` false with the `reason` while no index serves (a 503 is an answer here, not an
    error); `collections` per collection when the server serves a folder of them."""

    ready: bool
    reason: str | None
    index_version: str | None
    index_size: int | None
    model: str | None
    collections: dict[str, dict[str, Any]]
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Readiness:
        return cls(bool(d.get("ready")), d.get("reason"), d.get("index_version"), d.get("index_size"),
                   d.get("model"), dict(d.get("collections") or {}), dict(d))


@dataclass(frozen=True)
class Stats:
    """`GET /stats`: `windows` (the last 1 and 5 minutes of /search: latency percentiles, requests/s), `index`
    (the served version's manifest figures), `collections` (per collection)."""

    ready: bool
    auth_required: bool
    uptime_s: float
    windows: list[dict[str, Any]]
    index: dict[str, Any] | None
    collections: list[dict[str, Any]] | None
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Stats:
        return cls(bool(d["ready"]), bool(d.get("auth_required")), float(d["uptime_s"]), list(d["windows"]),
                   d.get("index"), d.get("collections"), dict(d))


@dataclass(frozen=True)
class CollectionInfo:
    """One collection of `GET /collections`: its size, encoder, `/v1` model id, index kind and version."""

    name: str
    default: bool
    ready: bool
    reason: str | None
    documents: int | None
    version: str | None
    model: str | None
    dim: int | None
    index_kind: str | None
    default_mode: str | None
    fields: dict[str, str] | None  # the documents' metadata fields and their types
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> CollectionInfo:
        return cls(d["name"], bool(d["default"]), bool(d["ready"]), d.get("reason"), d.get("documents"),
                   d.get("version"), d.get("model"), d.get("dim"), d.get("index_kind"), d.get("default_mode"),
                   d.get("fields"), dict(d))


@dataclass(frozen=True)
class ReloadResult:
    outcome: Literal["swapped", "unchanged"]
    index_version: str | None
    candidate: str | None
