"""Optional OpenTelemetry tracing: one span per HTTP request, with a child span per engine step.

Off unless `STRATA_OTLP_ENDPOINT` is set. Off means free: OpenTelemetry is not even imported, and every hook is
one `enabled` check. On, the app's lifespan builds a `TracerProvider` that exports over OTLP/HTTP from a
background thread (`BatchSpanProcessor`); the standard `OTEL_*` variables still apply (`OTEL_SERVICE_NAME`,
`OTEL_TRACES_SAMPLER`, `OTEL_EXPORTER_OTLP_HEADERS`, ...).

A request's span (`AccessLog`, the outermost middleware) joins the caller's trace when the request carries a
W3C `traceparent` header, and carries the request id of the log lines (`strata.request_id`). It ends just before
the response's last body message is sent, so a client that holds its response can already find it. Its children are
`queue` (admitted until a worker takes its micro-batch), `encode`, `faiss_search` and `store_lookup`. A batch
runs many requests at once on a worker thread, outside any request's context, so the searcher only notes when
each step ended (`Timeline`) and the engine, back in the request's context, records the steps as spans of each
request of the batch (`strata.batch_texts` says how many texts shared them).

The provider is this object's, built in the lifespan and shut down (flushed) with it — never OpenTelemetry's
global one, so two apps in one process (the tests) never share spans, and nothing outlives the app.

May import: the standard library, `indexer.runtime`, `service.engine` (OpenTelemetry is imported only when on).
The HTTP edge starts and ends the request spans (`service.access`); the engine records its steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from indexer.runtime.logs import request_id
from service.engine.settings import EngineSettings

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span, Tracer

    from service.engine.searcher import Timeline

REQUEST_ID = "strata.request_id"
OTLP_EXPORTER = "opentelemetry-exporter-otlp-proto-http"


class TracingConfigError(RuntimeError):
    """Tracing is asked for but cannot be set up (the exporter package is missing)."""


def traces_url(endpoint: str) -> str:
    """The collector's traces URL: a base URL (like `OTEL_EXPORTER_OTLP_ENDPOINT`) gets `/v1/traces`."""
    endpoint = endpoint.rstrip("/")
    return endpoint if endpoint.endswith("/v1/traces") else f"{endpoint}/v1/traces"


@dataclass
class RequestSpan:
    span: Span
    token: object  # the context token to detach when the request is done
    ended: bool = False


class Tracing:
    """The app's tracer: off with neither an OTLP `endpoint` nor an `exporter` (tests pass the SDK's in-memory
    one, which replaces the OTLP exporter)."""

    def __init__(self, endpoint: str | None = None, exporter: SpanExporter | None = None) -> None:
        self.endpoint = endpoint
        self.exporter = exporter
        self.enabled = bool(self.endpoint) or exporter is not None
        self.provider: TracerProvider | None = None
        self.tracer: Tracer | None = None
        if self.enabled and exporter is None:  # fail at start-up, not at the first span
            try:
                import opentelemetry.exporter.otlp.proto.http.trace_exporter  # noqa: F401
            except ImportError as exc:
                raise TracingConfigError(f"STRATA_OTLP_ENDPOINT is set but {OTLP_EXPORTER} is not installed "
                                         f"({exc}): pip install {OTLP_EXPORTER} (it is in the `serve` extra), "
                                         "or unset STRATA_OTLP_ENDPOINT") from exc

    @classmethod
    def from_settings(cls, settings: EngineSettings, exporter: SpanExporter | None = None) -> Tracing:
        return cls(settings.otlp_endpoint, exporter)

    # -- lifecycle (the app's lifespan) ------------------------------------------------------------------------
    def start(self) -> None:
        if not self.enabled or self.provider is not None:
            return
        import os

        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

        # OTEL_SERVICE_NAME, when set, names the service; attributes given here would override it
        resource = Resource.create({} if os.environ.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: "strata"})
        provider = TracerProvider(resource=resource)
        if self.exporter is not None:  # in-memory: spans visible as soon as they end
            provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            assert self.endpoint is not None
            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=traces_url(self.endpoint))))
        self.provider = provider
        self.tracer = provider.get_tracer("strata")

    def shutdown(self) -> None:
        """Export what is queued and stop the exporter thread."""
        if self.provider is not None:
            self.provider.shutdown()
            self.provider = self.tracer = None

    # -- the request span (AccessLog) --------------------------------------------------------------------------
    def start_request(self, method: str, path: str, headers: Mapping[str, str], rid: str) -> RequestSpan | None:
        """Start the request's span and make it current; None while the provider is not started."""
        if self.tracer is None:
            return None
        from opentelemetry import context, trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        parent: Context = TraceContextTextMapPropagator().extract(headers)
        span = self.tracer.start_span(method, context=parent, kind=trace.SpanKind.SERVER,
                                      attributes={"http.request.method": method, "url.path": path, REQUEST_ID: rid})
        return RequestSpan(span, context.attach(trace.set_span_in_context(span, parent)))

    @staticmethod
    def end_request(handle: RequestSpan, method: str, route: str | None, status: int) -> None:
        """End the request's span, named by its route; a second call does nothing."""
        from opentelemetry.trace import Status, StatusCode

        if handle.ended:
            return
        handle.ended = True
        span = handle.span
        if route is not None:  # named by its route template, as OpenTelemetry's conventions ask
            span.update_name(f"{method} {route}")
            span.set_attribute("http.route", route)
        span.set_attribute("http.response.status_code", status)
        if status >= 500:  # a 4xx is the client's error, not the server span's
            span.set_status(Status(StatusCode.ERROR))
        span.end()

    @staticmethod
    def leave_request(handle: RequestSpan) -> None:
        """Detach the request's context, in the task that `start_request` attached it in."""
        from opentelemetry import context

        context.detach(handle.token)  # type: ignore[arg-type]

    # -- the engine's steps ------------------------------------------------------------------------------------
    def record_batch(self, admitted_ns: int, timeline: Timeline, attributes: dict[str, Any]) -> None:
        """The request's `queue`, `encode`, `faiss_search` and `store_lookup` spans, children of the current
        (request) span, from the times its batch noted."""
        tracer = self.tracer
        if tracer is None:
            return
        attributes = {REQUEST_ID: request_id.get() or "", **attributes}
        steps = [("queue", admitted_ns, timeline.started), ("encode", timeline.started, timeline.encoded)]
        if timeline.searched is not None and timeline.looked_up is not None:
            steps += [("faiss_search", timeline.encoded, timeline.searched),
                      ("store_lookup", timeline.searched, timeline.looked_up)]
        for name, start, end in steps:
            span = tracer.start_span(name, start_time=start, attributes=attributes)
            span.end(end_time=max(start, end))
