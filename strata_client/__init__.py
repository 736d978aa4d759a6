"""A Python client for Strata's HTTP API, sync (`Client`) and async (`AsyncClient`), on httpx alone.

Owns: the routes, bodies and limits of the API as a client sees them (batching inputs to the server's per-request
limits), retries of refused requests (429/503, honouring Retry-After, bounded in attempts and time), typed
results (dataclasses) and one exception per refusal carrying the server's reason. The LangChain and LlamaIndex
integrations are `strata_client.langchain` and `strata_client.llamaindex` (extras `langchain`, `llamaindex`).

May import: httpx, the standard library, and in the integration modules their framework. Never `service`,
`indexer` or `models`: the client is installed and used without the server (checked by import-linter)."""

from __future__ import annotations

__version__ = "0.1.0"

from strata_client.aio import AsyncClient
from strata_client.client import Client
from strata_client.errors import (
    APIError,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    GatewayTimeoutError,
    NotFoundError,
    NotImplementedByServer,
    PermissionDeniedError,
    RateLimitError,
    RequestTooLargeError,
    ServiceUnavailableError,
    StrataError,
    TransportError,
    ValidationError,
)
from strata_client.retry import NO_RETRY, RetryPolicy
from strata_client.types import (
    CollectionInfo,
    DeleteResult,
    Document,
    Embeddings,
    Found,
    Hit,
    Passage,
    PassageText,
    Readiness,
    ReloadResult,
    ScrollPage,
    SearchResult,
    Stats,
    StoredDocument,
    UpsertResult,
)

__all__ = [
    "APIError", "AsyncClient", "AuthenticationError", "BadRequestError", "Client", "CollectionInfo", "ConflictError",
    "DeleteResult", "Document", "Embeddings", "Found", "GatewayTimeoutError", "Hit", "NO_RETRY", "NotFoundError",
    "NotImplementedByServer", "Passage", "PassageText", "PermissionDeniedError", "RateLimitError", "Readiness",
    "ReloadResult", "RequestTooLargeError", "RetryPolicy", "ScrollPage", "SearchResult", "ServiceUnavailableError",
    "Stats", "StoredDocument", "StrataError", "TransportError", "UpsertResult", "ValidationError", "__version__",
]
