"""The sharded backend: the shards of a `--shards N` version served by Ray Serve deployments, searched from the
API process (`python -m service sharded`, or `STRATA_ENGINE=sharded`).

Each shard file becomes a Serve application with one `ShardSearcher` deployment (`shard_searcher`) whose replicas
hold that shard in memory. The engine encodes the queries itself (the same micro-batching, workers, caps and timeout
as the local backend), sends the vectors to every shard in parallel and merges the top k by score. Every shard holds
the same trained coarse quantizer, so each probes the same `nprobe` lists and the merge equals a search of the
merged index. Texts come from the version's `store.sqlite`. Only IVF versions are sharded (`indexer build --engine
ray --shards N` builds IVF only; `indexer shard --shards N` splits a published IVF version); a version of another
kind is refused at deploy with the reason (`Mismatch`). The lexical and hybrid modes are served as the local backend
serves them: the version's BM25 index is read in this process (memory-mapped), the dense leg comes from the shards,
and fusion runs here.

Filters are evaluated once, in the API process, on the version's store; the matching ids go to every shard with
the number of lists to probe (`filtered_nprobe` of the *whole* version's selectivity). Each shard applies
`filtered_search`'s rule to its own lists: exact when the lists holding its matches are no more than that,
else an IVF scan of that many lists with the selector. When the merged index would search exactly, every shard
does (a shard's lists are a subset); otherwise each shard scans at least what the merged index scans of it, so
the merge is never worse than the merged index's filtered search. (A Quora version has no metadata: every
filter on it is refused with a 422 naming the field.)

Writes (`PUT /documents`, deletes) take the local backend's path (`indexer.runtime.writes`: logged durably in the
root's write log before the 200, applied to the API process's overlay, `shard_writes.LiveShards`), and each written
document belongs to one shard, `id % N` of its FAISS id as the split's: every search carries the overlay's applied
seq, and each replica first applies the log's entries of its shard up to it (`shard_writes.ShardWrites`: written
vectors, tombstones skipped inside its scan), so every replica answers with every acknowledged write. Documents are
read back here (`indexer.runtime.reading`), a base document's vector from its shard's replica (`vectors_of`).

A swap deploys the candidate's shards beside the served ones (same gates as the local backend); the old
deployments are deleted once their last batch is done. There is no Serve HTTP proxy: the API process is the
HTTP server, so keys, limits, metrics and `/admin/reload` are the single-process service's. Paths must be
visible to every node at the same place (a shared file system).
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path

import numpy as np
import ray
from ray import serve

from indexer.runtime.ann import SHARDED_KIND, check_search_params
from indexer.runtime.faiss.filtered import filtered_nprobe
from indexer.runtime.faiss.training import clamp_nprobe
from indexer.runtime.filters import Node
from indexer.runtime.ids import shard_of
from indexer.runtime.lexical import LexicalError, LexicalIndex, open_lexical
from indexer.runtime.manifest import Manifest, ManifestError
from indexer.runtime.prepare_later import PrepareLater
from indexer.runtime.shard_writes import LiveShards
from indexer.runtime.store import STORE, Store
from indexer.runtime.topk import merge_top_k
from indexer.runtime.version import (
    FilterCache,
    FilterMatch,
    Hit,
    IndexLoadError,
    LexicalSearching,
    hits_from_store,
)
from indexer.runtime.writelog import log_path
from service.engine.errors import Mismatch
from service.engine.settings import EngineSettings
from service.engine.shard_calls import failure_text, gather
from service.engine.shard_searcher import ShardSearcher

log = logging.getLogger(__name__)

DEPLOY_TIMEOUT_S = 300.0  # a shard that cannot be placed (no CPUs left) refuses the swap instead of hanging it
CLOSE_TIMEOUT_S = 60.0


class ShardedIndex(LexicalSearching):
    """A version whose vectors live in shard deployments (a `searcher.VectorIndex`). The lexical side (lexical
    search, hybrid's lexical leg) is the version's BM25 index read here, in the API process, memory-mapped like
    the local backend's: BM25 scores need the whole collection's statistics, which one index has and N shards of it
    would not, and the index is small beside the vectors (its size by N: docs/scaling.md)."""

    def __init__(self, backend: RayBackend, manifest: Manifest, apps: list[str], handles: list, store: Store,
                 ntotal: int, nprobe: int, lexical: LexicalIndex | None) -> None:  # handles: list[DeploymentHandle]
        self.backend, self.manifest, self.apps, self.handles, self.store = backend, manifest, apps, handles, store
        self.lexical, self.version, self.dim, self.ntotal = lexical, manifest.version, manifest.model.dim, ntotal
        assert manifest.index.nlist is not None  # the sharded kind's lists (`KindSpec.manifest_fields`)
        self.nlist, self.doc_rows = manifest.index.nlist, store.doc_rows  # `doc_rows`: `VectorIndex`'s
        self.nprobe = clamp_nprobe(nprobe, self.nlist)
        self.filters = FilterCache()
        self._later = PrepareLater("filter-rows")  # a filter used again: its lexical postings (`prepare_rows`)
        self._refs: OrderedDict[str, tuple[object, int]] = OrderedDict()  # filter key -> (its ids' ObjectRef, bytes)
        self._refs_bytes, self._refs_lock = 0, threading.Lock()

    def match(self, flt: object, schema: dict[str, str] | None = None) -> FilterMatch:
        """The version's documents matching `flt` (raises `FilterError`; `schema`: a wider one, the overlay's);
        the shards prepare their own share."""
        key = FilterCache.key(flt)
        found = self.filters.get(key)
        if found is None:
            found = FilterMatch(self.store.filter_ids(flt, schema), key=key)
            self.filters.put(key, found)
        elif found._rows and not found.rows_tried and self.lexical is not None:  # used again, rows found
            self._later.submit(key, lambda: self._prepare_rows(key, found))
        return found

    def _prepare_rows(self, key: str, cached: FilterMatch) -> None:
        """A filter used again: its lexical rows given their own postings (`LexicalIndex.prepare_rows`, kept by
        the engine while the rows array lives), as the local backend does; tried once."""
        assert self.lexical is not None
        try:
            self.lexical.prepare_rows(cached._rows[0])
        except (MemoryError, OSError) as exc:  # no memory for them, or a mapped file's read failed
            log.warning("filter %s: its lexical rows were not prepared: %s", key[:200], exc)
        if self.filters.get(key) is cached:  # not evicted meanwhile
            self.filters.put(key, FilterMatch(cached.ids, None, cached._rows, key=key, rows_tried=True))

    def _ids_ref(self, match: FilterMatch) -> list:
        """[the ObjectRef of a filter's ids] in Ray's object store, put once per filter (bounded like the
        filter cache): a request sends the ref, not the ids (800 KB for a 1 % filter at 10M, to every shard)."""
        with self._refs_lock:
            held = self._refs.get(match.key)
            if held is not None:
                self._refs.move_to_end(match.key)
                return [held[0]]
        ref = self.backend.put(match.ids)
        with self._refs_lock:
            old = self._refs.pop(match.key, None)
            self._refs_bytes += match.ids.nbytes - (old[1] if old is not None else 0)
            self._refs[match.key] = (ref, match.ids.nbytes)
            # bounded as the filter cache is, in entries and in bytes of the object store; the shards keep their
            # prepared share, and a search after an eviction puts the ids again
            while len(self._refs) > 1 and (len(self._refs) > self.filters.max_entries
                                           or self._refs_bytes > self.filters.max_bytes):
                _, (_, size) = self._refs.popitem(last=False)
                self._refs_bytes -= size
        return [ref]

    def live(self) -> LiveShards:
        """This version under the write overlay (`Writes.attach`): the shards apply their share of the writes."""
        return LiveShards(self)

    def search(self, vectors: np.ndarray, k: int, match: FilterMatch | None = None, *,
               search_params: dict[str, int] | None = None, seq: int = 0,
               node: Node | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The merged top k of every shard's, each with the writes up to `seq` (`LiveShards`: `node` filters the
        written documents)."""
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        search_params = check_search_params(SHARDED_KIND, search_params) or None
        if match is None:  # all shards at once
            pending = [h.search.remote(vectors, k, search_params=search_params, seq=seq) for h in self.handles]
        else:
            nprobe = clamp_nprobe((search_params or {}).get("nprobe", self.nprobe), self.nlist)
            probe = filtered_nprobe(nprobe, len(match.ids), self.ntotal, self.nlist)
            ids_ref = self._ids_ref(match)
            pending = [h.search.remote(vectors, k, None, probe, filter_key=match.key, ids_ref=ids_ref, seq=seq,
                                       node=node) for h in self.handles]
        return merge_top_k(self._answers(pending, range(len(pending))), k)

    def _answers(self, pending: list, shards: Sequence[int]) -> list:
        """The answers of `shards` (`shard_calls.gather`: within `shard_timeout_s`; a failure names the shard)."""
        files = self.manifest.index.shards or []
        names = [f"shard {i} of {len(files)} ({self.manifest.version}/{files[i].file})" for i in shards]
        return gather(pending, names, self.backend.settings.shard_timeout_s)

    def vectors_of(self, ids: np.ndarray) -> np.ndarray:
        """The version's vectors under `ids`, in their order, each from the shard that holds it (`shard_of`), the
        shards asked in parallel: the codes a single index of the version holds (documents read `with_vector`)."""
        ids, out = np.asarray(ids, dtype=np.int64), np.zeros((len(ids), self.dim), dtype=np.float32)
        where = shard_of(ids, len(self.handles))
        asked = [(s, rows, h.vectors_of.remote(ids[rows])) for s, h in enumerate(self.handles)
                 if len(rows := np.flatnonzero(where == s))]
        for (_, rows, _), got in zip(asked, self._answers([p for *_, p in asked], [s for s, *_ in asked]), strict=True):
            out[rows] = got
        return out

    def hits(self, scores: np.ndarray, ids: np.ndarray, passages: bool = False, since: int | None = None
             ) -> list[list[Hit]]:
        """The version's rows (the writes are `LiveShards`', whose `hits` takes `since`)."""
        return hits_from_store(self.store, scores, ids, passages)

    def ext_ids(self, ids: list[int]) -> dict[int, int | str]:
        return self.store.ext_ids(ids)

    def close(self) -> None:
        self._later.close()  # no preparing reads a closed lexical index
        self.store.close()
        self.backend.retire(self.apps)


class RayBackend:
    name = "sharded"

    def __init__(self, settings: EngineSettings) -> None:
        self.settings = settings
        self.prefix = f"strata-{secrets.token_hex(3)}"  # this process's applications, in a cluster maybe shared
        self._lock = threading.Lock()
        self._deployed: set[str] = set()
        self._deleting: list[threading.Thread] = []
        self._started_ray = False

    @staticmethod
    def put(value: object) -> ray.ObjectRef:
        """`value` in the cluster's object store (a filter's ids, sent to the shards by reference)."""
        return ray.put(value)

    def start(self) -> None:
        """Join the cluster (`ray_address`, else $RAY_ADDRESS) or start a local Ray, and Serve without its
        HTTP proxy."""
        if not ray.is_initialized():
            address = self.settings.ray_address or os.environ.get("RAY_ADDRESS") or None
            main = threading.current_thread() is threading.main_thread()
            saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)} if main else {}
            # Ray runs its workers at nice 15 unless told otherwise; the shard replicas answer searches, so in a
            # Ray this process starts they run at the API's own priority (beside normal-priority work a nice-15
            # replica gets ~3 % of a core: one took minutes to start beside two CPU burners). A joined cluster's
            # nodes set it themselves: `RAY_worker_niceness=0 ray start ...` (docs/scaling.md).
            ray.init(address=address, _system_config=None if address else {"worker_niceness": 0})
            # ray.init makes SIGTERM exit at once; the HTTP server's handler must stay, to finish in-flight
            # requests first (Ray is shut down with the engine, and at exit anyway).
            for sig, handler in saved.items():
                signal.signal(sig, handler)
            self._started_ray = address is None
        serve.start(proxy_location="Disabled")

    def open_index(self, folder: Path) -> ShardedIndex:
        try:
            manifest = Manifest.load(folder)
        except ManifestError as exc:
            raise IndexLoadError(str(exc)) from exc
        if manifest.index.kind != SHARDED_KIND:  # `indexer build --engine ray` builds IVF only; say so if one turns up
            raise Mismatch(f"{folder} holds a {manifest.index.kind} index: the sharded backend serves IVF shards "
                           f"sharing one quantizer (`indexer build --engine ray --shards N`); serve it with the "
                           f"local backend")
        if not manifest.index.shards:
            raise Mismatch(f"{folder} is not sharded (build it with `indexer build --engine ray --shards N`)")
        for s in manifest.index.shards:
            if not (folder / s.file).is_file():
                raise IndexLoadError(f"{folder / s.file} is missing")
        try:
            store = Store(folder / STORE)
        except (FileNotFoundError, ValueError) as exc:
            raise IndexLoadError(str(exc)) from exc
        try:
            lexical = open_lexical(folder, manifest.lexical, mmap=True) if manifest.lexical is not None else None
        except LexicalError as exc:
            store.close()
            raise IndexLoadError(str(exc)) from exc
        nprobe = self.settings.nprobe or manifest.index.params.nprobe
        apps = [f"{self.prefix}-{manifest.version}-shard-{i}" for i in range(len(manifest.index.shards))]
        try:
            handles = self._deploy(apps, [ShardSearcher.options(num_replicas=self.settings.shard_replicas)
                                          .bind(str(folder / s.file), nprobe, self.settings.threads,
                                                str(log_path(self.settings.index_root)))
                                          for s in manifest.index.shards],
                                   [folder / s.file for s in manifest.index.shards])
            infos = [h.info.remote().result() for h in handles]
            ntotal = sum(n for n, _ in infos)
            dims = {d for _, d in infos}
            if dims != {manifest.model.dim}:
                raise IndexLoadError(f"{folder}/shards have dimension {sorted(dims)} but the manifest says "
                                     f"{manifest.model.dim}")
            if ntotal != manifest.index.ntotal:
                raise IndexLoadError(f"{folder}/shards hold {ntotal} vectors but the manifest says "
                                     f"{manifest.index.ntotal}")
        except BaseException:
            store.close()
            self.retire(apps)
            raise
        log.info("deployed %d shards of %s (%d replica(s) each, nprobe %d)", len(handles), manifest.version,
                 self.settings.shard_replicas, nprobe)
        return ShardedIndex(self, manifest, apps, handles, store, ntotal, nprobe, lexical)

    def _deploy(self, names: list[str], apps: list[object], paths: list[Path]) -> list:  # list[DeploymentHandle]
        """The shards' applications started together (`serve.run_many`: their replicas start side by side, not one
        shard after the other), with a deadline: a replica that fails to start (an unreadable shard) or cannot be
        placed refuses the swap."""
        with self._lock:
            self._deployed.update(names)
        runner = ThreadPoolExecutor(1, thread_name_prefix="serve-deploy")
        targets = [serve.RunTarget(app, name=name, route_prefix=None)  # type: ignore[arg-type]
                   for name, app in zip(names, apps, strict=True)]
        future = runner.submit(serve.run_many, targets)
        try:
            return future.result(timeout=DEPLOY_TIMEOUT_S)
        except FutureTimeout:
            raise RuntimeError(f"shard deployments {', '.join(names)} were not running after "
                               f"{DEPLOY_TIMEOUT_S:.0f} s") from None
        except Exception as exc:  # noqa: BLE001 (Serve wraps a failed constructor in its own error types)
            for name in names:  # which shard's replica said why
                said = [ln.split("IndexLoadError:", 1)[1].strip() for ln in failure_text(name, exc).splitlines()
                        if "IndexLoadError:" in ln]
                if said:
                    raise IndexLoadError(said[-1]) from exc
            raise IndexLoadError(f"{paths[0].parent} could not be served: {str(exc).splitlines()[0]}") from exc
        finally:
            runner.shutdown(wait=False)

    def retire(self, apps: list[str]) -> None:
        """Delete a version's shard applications in the background (a swap must not wait for it)."""
        if not apps:
            return

        def delete() -> None:
            for name in apps:
                try:
                    serve.delete(name)
                except Exception:  # noqa: BLE001 (Serve may be shut down already)
                    log.warning("could not delete shard application %s", name, exc_info=True)

        t = threading.Thread(target=delete, name="serve-delete", daemon=True)
        with self._lock:
            self._deployed.difference_update(apps)
            self._deleting.append(t)
        t.start()

    def close(self) -> None:
        """Delete this process's shard applications; a Ray instance this backend started is shut down (a
        cluster it joined is left running). Bounded in time: a dead cluster must not hang the shutdown."""
        deadline = time.monotonic() + CLOSE_TIMEOUT_S
        with self._lock:
            left = sorted(self._deployed)
        self.retire(left)
        for t in list(self._deleting):
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        if self._started_ray:
            stopper = threading.Thread(target=serve.shutdown, name="serve-shutdown", daemon=True)
            stopper.start()
            stopper.join(timeout=max(1.0, deadline - time.monotonic()))
            ray.shutdown()
