"""Per-request search parameters on `/search`, over real HTTP from `python -m service`: `nprobe` for an IVF
version, `ef_search` for an HNSW one, and a 422 naming what the served kind takes for anything else (a flat
version takes none: it searches exactly). `/stats` reports the served kind and its parameters."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import indexer_cli, start_server, stop_server

QUERY = "How do I learn to cook?"


@pytest.fixture(scope="module")
def roots(tiny_exported: Path, quora_file: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = {}
    for name in ("flat", "ivf", "hnsw", "ivf-lexical"):  # ivf-lexical: an IVF version whose default mode is lexical
        kind = name.split("-")[0]
        root = tmp_path_factory.mktemp(f"search-params-{name}") / "root"
        r = indexer_cli("build", "--root", str(root), "--model", str(tiny_exported), "--data", str(quora_file),
                        "--rows", "300", "--threads", "1", "--no-eval", "--index", kind,
                        *(("--nlist", "8", "--nprobe", "2") if kind == "ivf" else ()),
                        *(("--default-mode", "lexical") if name == "ivf-lexical" else ()))
        assert r.returncode == 0, r.stderr
        out[name] = root
    return out


@pytest.mark.parametrize("kind, accepted, refused, takes", [
    ("flat", {}, [{"nprobe": 4}, {"ef_search": 32}], "none (it searches exactly)"),
    ("ivf", {"nprobe": 8}, [{"ef_search": 32}], "nprobe"),
    ("hnsw", {"ef_search": 16}, [{"nprobe": 4}], "ef_search"),
])
def test_search_parameters_per_kind(roots: dict[str, Path], tmp_path: Path, kind: str, accepted: dict,
                                    refused: list[dict], takes: str) -> None:
    server = start_server(tmp_path, {"STRATA_INDEX_ROOT": str(roots[kind]), "STRATA_WATCH_INTERVAL_S": "0"},
                          timeout=180)
    try:
        with server.client() as c:
            index = c.get("/stats").json()["index"]
            assert index["kind"] == kind
            assert set(index["search_params"]) == set(accepted)
            assert (index["nprobe"] is None) == (kind != "ivf")
            plain = c.post("/search", json={"query": QUERY, "top_k": 5})
            assert plain.status_code == 200, server.log.read_text()[-4000:]
            assert len(plain.json()["hits"]) == 5
            given = c.post("/search", json={"query": QUERY, "top_k": 5, **accepted})
            assert given.status_code == 200 and len(given.json()["hits"]) == 5
            for bad in refused:
                r = c.post("/search", json={"queries": [QUERY, "another"], "top_k": 5, **bad})
                assert r.status_code == 422, r.text
                detail = r.json()["detail"][0]
                name = next(iter(bad))
                assert detail["loc"] == ["body", name]
                assert f"'{name}' is not a search parameter of this version's {kind} index; it takes {takes}" \
                    in detail["msg"]
            assert c.post("/search", json={"query": QUERY, "nprobe": 0}).status_code == 422  # validation
    finally:
        stop_server(server)


def test_a_collections_own_knobs_come_between_the_request_and_the_process(quora_root: Path, tmp_path: Path) -> None:
    """collection.json's `search` (PUT /collections/NAME/config) on a real IVF version: under the request's own
    knob, over the version's calibrated nprobe (STRATA_NPROBE unset); one the served kind does not take is a 422."""
    server = start_server(tmp_path, {"STRATA_INDEX_ROOT": str(quora_root), "STRATA_WATCH_INTERVAL_S": "0"},
                          timeout=180)
    queries = [QUERY, "How can I lose weight fast?", "What is the best way to learn Python?", "Why is the sky blue?",
               "How do I get a job at Google?", "What is love?", "How do I invest in stocks?", "Is time travel real?"]

    def ids(**search_params: int) -> list[list[object]]:
        r = c.post("/search", json={"queries": queries, "top_k": 10, **search_params})
        assert r.status_code == 200, r.text
        return [[h["id"] for h in res["hits"]] for res in r.json()["results"]]

    try:
        with server.client() as c:
            assert c.get("/stats").json()["index"]["kind"] == "ivf"
            served, one_list = ids(), ids(nprobe=1)
            assert served != one_list  # the precondition: nprobe shows in the answers
            own = c.get("/stats").json()["index"]["nprobe"]  # the version's
            r = c.put("/collections/default/config", json={"search": {"ef_search": 32}})
            assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "search"], r.text
            assert c.put("/collections/default/config", json={"search": {"nprobe": 1}}).status_code == 200
            assert ids() == one_list  # the collection's nprobe, from the next request
            assert c.get("/stats").json()["index"]["nprobe"] == 1  # /stats says what searches use
            assert ids(nprobe=own) == served  # the request's own wins
            assert (quora_root / "collection.json").is_file()
    finally:
        stop_server(server)
        (quora_root / "collection.json").unlink(missing_ok=True)  # other tests serve this root too


def test_stats_reports_the_nprobe_searches_use_the_collections_own(roots: dict[str, Path], tmp_path: Path) -> None:
    """/stats' `nprobe` and `search_params` are what a search that sets none runs at: the version's (2), then
    collection.json's `search` over it and over STRATA_NPROBE (they said the version's or STRATA_NPROBE's whatever
    collection.json set), clamped to nlist as the index clamps it; unset again, STRATA_NPROBE's."""
    root = roots["ivf"]
    server = start_server(tmp_path, {"STRATA_INDEX_ROOT": str(root), "STRATA_WATCH_INTERVAL_S": "0",
                                     "STRATA_NPROBE": "3"}, timeout=180)

    def served() -> tuple[int, dict[str, int]]:
        index = c.get("/stats").json()["index"]
        return index["nprobe"], index["search_params"]

    try:
        with server.client() as c:
            assert served() == (3, {"nprobe": 3})  # STRATA_NPROBE over the manifest's 2
            nlist = c.get("/stats").json()["index"]["nlist"]
            assert 5 < nlist < 100
            for asked, used in ((5, 5), (1, 1), (100, nlist)):
                r = c.put("/collections/default/config", json={"search": {"nprobe": asked}})
                assert r.status_code == 200, r.text
                assert served() == (used, {"nprobe": used}), asked
            assert c.put("/collections/default/config", json={}).status_code == 200
            assert served() == (3, {"nprobe": 3})
    finally:
        stop_server(server)
        (root / "collection.json").unlink(missing_ok=True)  # the other tests serve this root too


@pytest.mark.parametrize("root_name, config", [
    ("ivf", {"mode": "lexical", "search": {"nprobe": 4}}),  # collection.json's default mode is lexical
    ("ivf-lexical", {"search": {"nprobe": 4}}),  # the version's default mode is lexical
])
def test_a_collections_knobs_do_not_refuse_a_search_that_runs_lexical(roots: dict[str, Path], tmp_path: Path,
                                                                      root_name: str, config: dict) -> None:
    """collection.json's `search` knobs tune the searches that run vectors; a search that runs lexical (named, or
    the default mode: collection.json's or the version's) runs none and is answered, not refused for a knob the
    request never sent. A request that names a knob for a lexical search is still a 422 at it."""
    root = roots[root_name]
    server = start_server(tmp_path, {"STRATA_INDEX_ROOT": str(root), "STRATA_WATCH_INTERVAL_S": "0"}, timeout=180)
    try:
        with server.client() as c:
            r = c.put("/collections/default/config", json=config)
            assert r.status_code == 200, r.text
            for body, mode in (({}, "lexical"), ({"mode": "lexical"}, "lexical"), ({"mode": "dense"}, "dense"),
                               ({"mode": "hybrid"}, "hybrid")):
                r = c.post("/search", json={"query": QUERY, "top_k": 5, **body})
                assert r.status_code == 200, (body, r.text)
                assert r.json()["mode"] == mode and len(r.json()["hits"]) == 5
            r = c.post("/search", json={"query": QUERY, "top_k": 5, "nprobe": 3})  # the request's own: refused
            assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "nprobe"], r.text
            assert "mode 'lexical'" in r.json()["detail"][0]["msg"]
    finally:
        stop_server(server)
        (root / "collection.json").unlink(missing_ok=True)  # the other tests serve this root too
