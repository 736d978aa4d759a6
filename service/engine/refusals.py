"""What a searcher refuses of a request before anything is encoded: a brought vector of another dimension, a
mode the version cannot serve, search parameters its index kind does not take, a filter that does not fit its
metadata (each distinct filter run once on the version's store, which its cache may answer)."""

from __future__ import annotations

from indexer.runtime.ann import SEARCH_PARAMS, IndexParamError, check_search_params
from indexer.runtime.filters import FilterError
from indexer.runtime.manifest import SearchMode
from indexer.runtime.version import FilterCache, FilterMatch, VectorIndex
from service.engine.batch import Job, failed
from service.engine.errors import BadFilter, BadSearchParams, BadVector, ModeUnavailable


def refusal(index: VectorIndex, dim: int, job: Job, mode: SearchMode | None, matches: dict[str, FilterMatch]
            ) -> Exception | None:
    """Why `job` gets no work from `index` (served with an encoder of `dim`), or None; its filter's matches are
    put in `matches`."""
    if mode is None:  # encode only
        return None
    if job.vectors is not None and job.vectors.shape[1] != dim:  # a swap to another encoder
        return BadVector(f"a vector of dimension {job.vectors.shape[1]}, but the served encoder has dimension "
                         f"{dim}", ["vector"])
    if mode != "dense":
        unavailable = mode_refusal(index, mode)
        if unavailable is not None:
            return unavailable
    if job.search_params:
        bad_params = _params_refusal(index, job, mode)
        if bad_params is not None:
            return bad_params
    if job.filter is not None:
        try:
            key = FilterCache.key(job.filter)
            if key not in matches:
                matches[key] = index.match(job.filter)
        except FilterError as exc:
            return BadFilter(str(exc))
        except Exception as exc:  # noqa: BLE001 (not the filter's fault as far as we know: a 500, alone)
            return failed("filter", job, exc)
    return None


def _params_refusal(index: VectorIndex, job: Job, mode: SearchMode) -> BadSearchParams | None:
    assert job.search_params
    if mode == "lexical":  # a request naming the mode is refused by its schema; this is the default mode
        verb = "tune" if len(job.search_params) > 1 else "tunes"
        return BadSearchParams(f"{' and '.join(job.search_params)} {verb} the vector search; mode 'lexical' (the "
                               f"default mode here: collection.json's, else the version's) runs none",
                               next(iter(job.search_params)))
    kind = index.manifest.index.kind
    try:
        check_search_params(kind, job.search_params)
    except IndexParamError as exc:
        bad = [k for k in job.search_params if k not in SEARCH_PARAMS[kind]] or list(job.search_params)
        return BadSearchParams(str(exc), bad[0])
    return None


def mode_refusal(index: VectorIndex, mode: SearchMode) -> ModeUnavailable | None:
    """Why this version cannot serve `mode` (lexical or hybrid), or None."""
    if index.manifest.lexical is None:
        return ModeUnavailable(f"mode {mode!r} needs a lexical index, and version {index.version} was built "
                               f"without one (before lexical retrieval, or with --no-lexical): use mode 'dense', "
                               f"or rebuild it with `indexer build`")
    return None
