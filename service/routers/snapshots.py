"""A collection's snapshots (admin scope): `POST /collections/{name}/snapshots` makes one of the served version and
the write log up to now (201), `GET /collections/{name}/snapshots` lists them, `GET …/snapshots/{snapshot}`
downloads one (streamed, its sha256 in `X-Snapshot-Sha256`), `DELETE …/snapshots/{snapshot}` deletes it;
`POST /collections/{name}/snapshots/upload` restores an uploaded one as a new collection (with
`STRATA_COLLECTIONS_DIR`), like `indexer snapshot restore` into a new root (docs/operations.md#snapshots)."""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Request, Response
from fastapi.responses import FileResponse
from starlette.requests import ClientDisconnect

from service.auth import ADMIN_NAMED, NAMED_PATH
from service.deps import CollectionDep, CollectionsDep, SettingsDep
from service.engine import (
    NAME_PATTERN,
    SnapshotConflict,
    SnapshotError,
    SnapshotTooLarge,
    encoders_known,
    restore_upload,
)
from service.routers.collections import describe
from service.schemas.collections import CollectionInfo, SnapshotList, SnapshotOut

router = APIRouter(prefix="/collections", tags=["snapshots"],
                   responses={404: {"description": "no collection, or no snapshot, of that name"}})

Snap = Annotated[str, Path(description="a snapshot's name, as its creation answered")]
# the collection an upload creates (no collection of that name is served yet: not `CollectionDep`)
Name = Annotated[str, Path(description=f"the new collection's name ({NAME_PATTERN})")]


@router.post("/{name}/snapshots", status_code=201, dependencies=[NAMED_PATH, ADMIN_NAMED], response_model=SnapshotOut)
async def create_snapshot(collection: CollectionDep) -> SnapshotOut:
    info = await collection.snapshots.create()
    return SnapshotOut(**info.to_json())


@router.get("/{name}/snapshots", dependencies=[NAMED_PATH, ADMIN_NAMED], response_model=SnapshotList)
async def list_snapshots(collection: CollectionDep) -> SnapshotList:
    return SnapshotList(snapshots=[SnapshotOut(**s.to_json()) for s in collection.snapshots.list()])


@router.get("/{name}/snapshots/{snapshot}", dependencies=[NAMED_PATH, ADMIN_NAMED], response_class=FileResponse,
            responses={200: {"content": {"application/x-tar": {}}, "description": "the archive, streamed"}})
async def download_snapshot(snapshot: Snap, collection: CollectionDep) -> FileResponse:
    snapshots = collection.snapshots
    path, info = snapshots.path(snapshot), snapshots.info(snapshot)
    headers = {"X-Snapshot-Sha256": info.sha256} if info is not None else {}
    return FileResponse(path, media_type="application/x-tar", filename=path.name, headers=headers)


@router.delete("/{name}/snapshots/{snapshot}", status_code=204, dependencies=[NAMED_PATH, ADMIN_NAMED])
async def delete_snapshot(snapshot: Snap, collection: CollectionDep) -> Response:
    await collection.snapshots.delete(snapshot)
    return Response(status_code=204)


@router.post("/{name}/snapshots/upload", status_code=201, dependencies=[ADMIN_NAMED], response_model=CollectionInfo,
             responses={409: {"description": "a collection of that name exists"},
                        413: {"description": "over STRATA_MAX_SNAPSHOT_BYTES"},
                        415: {"description": "a multipart form: the archive is sent as the body itself"},
                        501: {"description": "the sharded backend (it serves one root: no collections folder)"},
                        422: {"description": "the archive is damaged or truncated, or its encoder is not here"}},
             openapi_extra={"requestBody": {"required": True, "content": {
                 "application/x-tar": {"schema": {"type": "string", "format": "binary"}}}}})
async def upload_snapshot(name: Name, request: Request, collections: CollectionsDep,
                          settings: SettingsDep) -> CollectionInfo:
    """Restore an uploaded snapshot (the body: the archive, streamed) as the new collection `name` of
    `STRATA_COLLECTIONS_DIR`, checked whole before it is renamed into place, then serve it at once."""
    collections.check_backend("restore a snapshot as a new collection")
    if collections.folder is None:  # as POST /collections answers: no folder to make a collection in
        raise SnapshotConflict("restoring a snapshot over HTTP creates a collection: it needs STRATA_COLLECTIONS_DIR "
                               "(or restore it with `indexer snapshot restore ARCHIVE --root DIR`)")
    if not re.fullmatch(NAME_PATTERN, name):
        raise SnapshotError(f"{name[:80]!r} is not a collection name ({NAME_PATTERN})")
    if request.headers.get("content-type", "").lower().startswith("multipart/"):  # Qdrant's upload is a form
        raise HTTPException(415, detail="the snapshot is sent as the request body itself (Content-Type: "
                                        "application/x-tar; curl --data-binary @FILE), not in a multipart form "
                                        "(curl -F)")
    if name in collections.by_name or name in collections.refused:
        raise SnapshotConflict(f"collection {name!r} exists: a snapshot is restored as a new collection")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > settings.max_snapshot_bytes:  # refused before a byte is written
        raise SnapshotTooLarge(f"the uploaded snapshot is {int(declared):,} bytes, over "
                               f"{settings.max_snapshot_bytes:,} (STRATA_MAX_SNAPSHOT_BYTES)")
    try:
        await restore_upload(collections.folder, name, request.stream(), settings.max_snapshot_bytes,
                             encoders_known(collections, settings.model_dir, settings.models_dir))
    except ClientDisconnect:  # nothing was restored, and no one reads the answer: a refusal, not a server error
        raise SnapshotError("the upload was cut short: the client disconnected before the archive's end") from None
    await collections.discover()
    return describe(collections, collections.get(name))
