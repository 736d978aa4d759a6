"""The HTTP API's request and response bodies, one module per router: `search`, `encode`, `documents` (the writes),
`admin` (reload), `health` (/ready), `stats` (/stats), `collections` (/collections), `openai` (/v1, in OpenAI's
shapes); and what several share (`common`: a text and its limits, a brought vector's, a swap's refusal, the error
body). Limits are part of the API contract (docs/http-api.md); unknown fields are refused.

May import: pydantic, `indexer.runtime` (the limits the runtime enforces: top_k, filters, metadata). Nothing of the
engine or the routers."""
