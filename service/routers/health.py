from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from service.auth import ANY_KEY
from service.deps import CollectionsDep, MetricsDep, SettingsDep
from service.engine import Collections, Manifest, Status
from service.schemas.common import SwapRefusal
from service.schemas.compaction import CompactionState
from service.schemas.health import (
    CollectionReady,
    EncoderAdaptation,
    ModeFigures,
    Ready,
    ReadyEvaluation,
    TrainingProgress,
)
from service.training_status import read_json, swap_outcome

# Any valid key; the default STRATA_PUBLIC_PATHS opens all four to probes and scrapers without one.
router = APIRouter(tags=["operations"], dependencies=[ANY_KEY])


@router.get("/health")
async def health() -> dict[str, str]:
    """Liveness: the process answers."""
    return {"status": "ok"}


def training_progress(path: Path | None, status: Status) -> TrainingProgress | None:
    """The background training's status file, or None when there is none or it cannot be read (it is rewritten
    atomically, so a read sees a whole file or the previous one); with the outcome of the API's swap to what it
    built."""
    if path is None:
        return None
    chain = read_json(path)
    if chain is None:
        return None
    r = status.refused
    refused = (r.version, r.reason, r.at.timestamp()) if r else None
    since = status.since.timestamp() if status.since else None
    try:
        return TrainingProgress.model_validate(swap_outcome(chain, status.version, since, refused))
    except ValueError:
        return None


def evaluation(manifest: Manifest) -> ReadyEvaluation | None:
    """The gate's MRR@10 and the report's figures by mode (`indexer.report`); a version evaluated in full before
    it was published (older builds, --add, compact) reads as a report done."""
    mrr = manifest.gate_mrr_at_10()
    if mrr is None:
        return None
    r = manifest.report
    modes = manifest.eval_modes or ({"dense": manifest.eval} if manifest.eval is not None else {})
    return ReadyEvaluation(
        state="done" if r is None else r.state, mrr_at_10=mrr,
        modes={k: ModeFigures.model_validate(f.model_dump()) for k, f in modes.items()},
        started_at=r.started_at if r else None, finished_at=r.finished_at if r else None,
        seconds=r.seconds if r else None, error=r.error if r else None)


def _compaction(collections: Collections, name: str) -> CompactionState:
    return CompactionState.of(collections.by_name[name].compactor.report())


def _refusal(s: Status) -> SwapRefusal | None:
    r = s.refused
    return SwapRefusal(version=r.version, kind=r.kind, reason=r.reason, at=r.at) if r else None


def _no_default(collections: Collections, per: dict[str, Status], listed: dict[str, CollectionReady] | None) -> Ready:
    """/ready without a default collection served: not ready when STRATA_DEFAULT_COLLECTION names one that is not
    served (deleted, never there, or refused: the routes without /collections/NAME answer 404), else ready when any
    collection serves."""
    wanted = collections.settings.default_collection
    if wanted is not None:
        f = collections.folder
        why = collections.refused.get(wanted) or (f"none in {f} (create it: `POST /collections` or `indexer build "
                                                  f"--root {f / wanted}`)" if f else "no such collection")
        return Ready(ready=False, reason=f"default collection {wanted!r} (STRATA_DEFAULT_COLLECTION) is not served: "
                                         f"{why}; the routes without /collections/NAME (/search, /documents, …) "
                                         f"answer 404", collections=listed)
    ready = any(st.ready for st in per.values())
    not_served = "; ".join(f"collection {n!r} is not served: {why}" for n, why in sorted(collections.refused.items()))
    reason = None if ready else not_served or ("no collection serves yet" if per else
                                               f"no collection in {collections.folder} yet (build one with "
                                               f"`indexer build --root DIR/NAME`)")
    return Ready(ready=ready, reason=reason, collections=listed)


@router.get("/ready", response_model=Ready, responses={503: {"model": Ready}})
async def ready(collections: CollectionsDep, settings: SettingsDep) -> Response:
    """Readiness: an encoder and an index are loaded (with the index version), and why the latest swap was
    refused if it was (the previous index keeps serving); with `demo --train`, the background training's stage,
    step and ETA (serving never waits for it); for an encoder adapted to a corpus, how (`verified: false`:
    selected without dev queries); `damaged` when a file of the served version is gone from the disk (it keeps
    answering; a restart or swap would refuse it). With a collections folder: each collection's state under
    `collections`; ready when the default collection serves (when none is configured and none is named `default`:
    when any collection does; a STRATA_DEFAULT_COLLECTION not served, deleted or never there: 503 saying so)."""
    per = {name: collections.by_name[name].status() for name in collections.names()}
    listed = None if collections.folder is None else {
        name: CollectionReady(ready=st.ready, index_version=st.version, index_size=st.size, documents=st.documents,
                              passages=st.passages, reason=st.reason,
                              damaged=st.damaged, swap_refused=_refusal(st), compaction=_compaction(collections, name))
        for name, st in per.items()} | {
        name: CollectionReady(ready=False, reason=f"not served: {why}") for name, why in collections.refused.items()}
    default = collections.default_name()
    if default is None:
        body = _no_default(collections, per, listed)
        return JSONResponse(body.model_dump(mode="json", exclude_none=True), status_code=200 if body.ready else 503)
    s = per[default]
    refused = _refusal(s)
    training = training_progress(settings.training_status, s)
    if not s.ready:
        body = Ready(ready=False, reason=s.reason, swap_refused=refused, training=training, collections=listed)
        return JSONResponse(body.model_dump(mode="json", exclude_none=True), status_code=503)
    adaptation = EncoderAdaptation.model_validate(s.adaptation) if s.adaptation else None
    body = Ready(ready=True, index_version=s.version, index_size=s.size, documents=s.documents, passages=s.passages,
                 model=s.model,
                 model_name=Path(s.model).name if s.model else None,
                 model_source=s.manifest.model.source if s.manifest else None, pooling=s.pooling,
                 evaluation=evaluation(s.manifest) if s.manifest else None, damaged=s.damaged,
                 swap_refused=refused, training=training, collections=listed, adaptation=adaptation,
                 compaction=_compaction(collections, default))
    return JSONResponse(body.model_dump(mode="json", exclude_none=True))


@router.get("/metrics", response_class=Response,
            responses={200: {"content": {CONTENT_TYPE_LATEST.split(";")[0]: {"schema": {"type": "string"}}},
                             "description": "Prometheus text format"}})
async def metrics(metrics: MetricsDep) -> Response:
    """Prometheus exposition: latency histograms, request/error counters, index size and MRR@10, swaps."""
    return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)
