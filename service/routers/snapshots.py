"""A collection's snapshots (admin scope): `POST /collections/{name}/snapshots` makes one of the served version and
the write log up to now (201), `GET /collections/{name}/snapshots` lists them, `GET …/snapshots/{snapshot}`
downloads one (streamed, its sha256 in `X-Snapshot-Sha256`), `DELETE …/snapshots/{snapshot}` deletes it. A restore
is `indexer snapshot restore` into a new root (docs/operations.md#snapshots)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response
from fastapi.responses import FileResponse

from service.auth import ADMIN_NAMED
from service.collection_schemas import SnapshotList, SnapshotOut
from service.deps import CollectionsDep
from service.routers.collections import Name

router = APIRouter(prefix="/collections", tags=["snapshots"],
                   responses={404: {"description": "no collection, or no snapshot, of that name"}})

Snap = Annotated[str, Path(description="a snapshot's name, as its creation answered")]


@router.post("/{name}/snapshots", status_code=201, dependencies=[ADMIN_NAMED], response_model=SnapshotOut)
async def create_snapshot(name: Name, collections: CollectionsDep) -> SnapshotOut:
    info = await collections.get(name).snapshots.create()
    return SnapshotOut(**info.to_json())


@router.get("/{name}/snapshots", dependencies=[ADMIN_NAMED], response_model=SnapshotList)
async def list_snapshots(name: Name, collections: CollectionsDep) -> SnapshotList:
    return SnapshotList(snapshots=[SnapshotOut(**s.to_json()) for s in collections.get(name).snapshots.list()])


@router.get("/{name}/snapshots/{snapshot}", dependencies=[ADMIN_NAMED], response_class=FileResponse,
            responses={200: {"content": {"application/x-tar": {}}, "description": "the archive, streamed"}})
async def download_snapshot(name: Name, snapshot: Snap, collections: CollectionsDep) -> FileResponse:
    snapshots = collections.get(name).snapshots
    path, info = snapshots.path(snapshot), snapshots.info(snapshot)
    headers = {"X-Snapshot-Sha256": info.sha256} if info is not None else {}
    return FileResponse(path, media_type="application/x-tar", filename=path.name, headers=headers)


@router.delete("/{name}/snapshots/{snapshot}", status_code=204, dependencies=[ADMIN_NAMED])
async def delete_snapshot(name: Name, snapshot: Snap, collections: CollectionsDep) -> Response:
    await collections.get(name).snapshots.delete(snapshot)
    return Response(status_code=204)
