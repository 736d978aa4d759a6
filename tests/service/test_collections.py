"""Collections over HTTP on real servers (uvicorn on 127.0.0.1, real ONNX encoders, FAISS indexes built by
`indexer build`, SQLite write logs): one process serves several index roots under STRATA_COLLECTIONS_DIR, each with
its own encoder, versions, swaps and writes; new folders are served without a restart; keys are scoped per
collection; `/v1` serves each distinct encoder once.

Three collections: `faq` and `notes` built with the MiniLM encoder (mean pooling: one encoder, loaded once),
`garden` with a tiny random BERT (CLS pooling, another dimension)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from indexer.quora import read_rows
from indexer.runtime.layout import IndexRoot
from tests.conftest import QUORA_LIKE_WORDS, REPO, Server, start_server, stop_server

DOCS = 120
ALL, GARDEN_READ, FAQ_ADMIN = "all-admin-key-0123", "garden-read-key-0123", "faq-admin-key-0123"
NOTES_READ = "notes-read-key-0123"


def indexer_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "indexer.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=600, env=os.environ | {"OMP_NUM_THREADS": "1"})


def build(root: Path, data: Path, model: Path) -> str:
    r = indexer_cli("build", "--root", str(root), "--data", str(data), "--model", str(model), "--index", "flat",
                    "--threads", "1", "--keep", "5", "--default-mode", "dense", "--no-eval")
    assert r.returncode == 0, r.stderr
    return IndexRoot(root).current_version() or ""


def write_jsonl(path: Path, docs: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    return path


@pytest.fixture(scope="module")
def corpora(tmp_path_factory: pytest.TempPathFactory, quora_file: Path) -> dict[str, Path]:
    """faq and notes: distinct Quora questions (rows < 300,000); garden: sentences in the tiny BERT's vocabulary."""
    tmp = tmp_path_factory.mktemp("collections-data")
    texts: list[str] = []
    for row in read_rows(quora_file):
        for text in (row.question1, row.question2):
            if text and text not in texts:
                texts.append(text)
        if len(texts) >= 2 * DOCS:
            break
    words = QUORA_LIKE_WORDS
    garden = [" ".join(words[(i * 7 + j * 3) % len(words)] for j in range(6)) for i in range(DOCS)]
    return {
        "faq": write_jsonl(tmp / "faq.jsonl", [{"id": i, "text": t} for i, t in enumerate(texts[:DOCS])]),
        "notes": write_jsonl(tmp / "notes.jsonl", [{"id": f"n{i}", "text": t} for i, t in enumerate(texts[DOCS:])]),
        "garden": write_jsonl(tmp / "garden.jsonl", [{"id": f"g{i}", "text": t, "bed": i % 3}
                                                     for i, t in enumerate(garden)]),
    }


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory, corpora: dict[str, Path], minilm_mean: Path,
             tiny_exported: Path) -> Path:
    d = tmp_path_factory.mktemp("collections-template")
    models = {"faq": minilm_mean, "notes": minilm_mean, "garden": tiny_exported}
    for name, data in corpora.items():
        build(d / name, data, models[name])
    return d


@pytest.fixture()
def cdir(template: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "collections"
    shutil.copytree(template, dst, symlinks=True)
    return dst


def serve(tmp: Path, cdir: Path, **env: str) -> Server:
    return start_server(tmp, {"STRATA_COLLECTIONS_DIR": str(cdir), "STRATA_WATCH_INTERVAL_S": "0.3",
                              "STRATA_THREADS": "1", "STRATA_WORKERS": "2", "STRATA_DEFAULT_COLLECTION": "faq"} | env)


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def top(c: httpx.Client, name: str, query: str, **kw: Any) -> dict[str, Any]:
    r = c.post(f"/collections/{name}/search", json={"query": query, "top_k": 3}, **kw)
    assert r.status_code == 200, r.text
    return r.json()


def wait_for(check: Any, timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError("timed out")


def test_collections_with_different_encoders_are_searched_written_and_swapped_independently(
        cdir: Path, corpora: dict[str, Path], minilm_mean: Path, tmp_path: Path) -> None:
    faq_docs = [json.loads(line) for line in corpora["faq"].read_text().splitlines()]
    srv = serve(tmp_path, cdir)
    try:
        with srv.client() as c:
            listed = c.get("/collections").json()
            assert listed["default"] == "faq"
            by_name = {x["name"]: x for x in listed["collections"]}
            assert sorted(by_name) == ["faq", "garden", "notes"]
            assert by_name["faq"]["documents"] == by_name["notes"]["documents"] == by_name["garden"]["documents"] \
                == DOCS
            assert by_name["faq"]["encoder"] == by_name["notes"]["encoder"] == minilm_mean.name
            assert by_name["garden"]["pooling"] == "cls" and by_name["faq"]["pooling"] == "mean"
            assert by_name["garden"]["dim"] != by_name["faq"]["dim"]
            assert by_name["faq"]["index_kind"] == "flat" and by_name["faq"]["ready"]
            assert c.get("/collections/garden").json()["name"] == "garden"
            # each searched in its own index: an exact text of faq is faq's top hit, and not in notes or garden
            probe = faq_docs[5]["text"]
            assert top(c, "faq", probe)["hits"][0]["text"] == probe
            assert probe not in [h["text"] for h in top(c, "notes", probe)["hits"]]
            assert top(c, "garden", "dog cat")["hits"][0]["id"].startswith("g")
            # the routes without /collections/ serve STRATA_DEFAULT_COLLECTION
            assert c.post("/search", json={"query": probe, "top_k": 1}).json()["hits"][0]["text"] == probe
            # unknown and invalid names
            r = c.post("/collections/nope/search", json={"query": "x"})
            assert r.status_code == 404 and "nope" in r.json()["detail"] and "garden" in r.json()["detail"]
            r = c.get("/collections/Bad%20Name")
            assert r.status_code == 404 and "is not a collection name" in r.json()["detail"]
            # /v1: one model per distinct encoder
            models = [m["id"] for m in c.get("/v1/models").json()["data"]]
            dim_faq, dim_garden = by_name["faq"]["dim"], by_name["garden"]["dim"]
            assert models == [f"strata-{dim_faq}", f"strata-{dim_garden}@garden"]
            assert by_name["garden"]["model"] == f"strata-{dim_garden}@garden"
            for model, dim in ((models[0], dim_faq), (models[1], dim_garden), (f"strata-{dim_faq}@notes", dim_faq)):
                r = c.post("/v1/embeddings", json={"model": model, "input": ["dog cat"]})
                assert r.status_code == 200, r.text
                assert len(r.json()["data"][0]["embedding"]) == dim
            assert c.post("/v1/embeddings", json={"model": f"strata-{dim_faq}@garden", "input": "x"}).status_code \
                == 410

            # writes: garden's acknowledged write is served by garden only
            r = c.put("/collections/garden/documents", json={"documents": [
                {"id": "g-new", "text": "blue horse road guitar sky", "metadata": {"bed": 9}}]})
            assert r.status_code == 200, r.text
            hits = top(c, "garden", "blue horse road guitar sky")["hits"]
            assert hits[0]["id"] == "g-new"
            assert "g-new" not in [h["id"] for h in top(c, "faq", "blue horse road guitar sky")["hits"]]
            r = c.post("/collections/faq/documents/delete", json={"ids": [faq_docs[5]["id"]]})
            assert r.status_code == 200 and r.json()["deleted"] == 1
            # each collection's writes go to its own log (`writes/log.sqlite` in its root); notes took none
            assert (cdir / "garden" / "writes" / "log.sqlite").is_file()
            assert (cdir / "faq" / "writes" / "log.sqlite").is_file()
            assert not (cdir / "notes" / "writes" / "log.sqlite").exists()

            # swaps: a new faq version (one more document) is swapped in; garden keeps its version
            garden_version = c.get("/collections/garden").json()["version"]
            faq_version = c.get("/collections/faq").json()["version"]
            extra = corpora["faq"].parent / "faq2.jsonl"
            write_jsonl(extra, [*faq_docs, {"id": 10_000, "text": "Which collection answers this new question?"}])
            new_version = build(cdir / "faq", extra, minilm_mean)
            assert new_version != faq_version
            r = c.post("/collections/faq/admin/reload")
            assert r.status_code == 200 and r.json()["index_version"] == new_version, r.text
            assert c.get("/collections/faq").json()["version"] == new_version
            assert c.get("/collections/garden").json()["version"] == garden_version
            # the delete is replayed onto faq's new version; garden's write is still served
            assert faq_docs[5]["text"] not in [h["text"] for h in top(c, "faq", faq_docs[5]["text"])["hits"]]
            metrics = c.get("/metrics").text
            assert re.search(r'strata_collection_swaps_total\{collection="faq",result="swapped"\} 1', metrics)
            assert not re.search(r'strata_collection_swaps_total\{collection="garden",result="swapped"\}', metrics)
            assert f'strata_collection_index_size{{collection="garden"}} {DOCS + 1}' in metrics
            assert 'strata_collection_searches_total{collection="garden",mode="dense"}' in metrics
            ready = c.get("/ready").json()
            assert ready["ready"] and ready["collections"]["faq"]["index_version"] == new_version
            assert {s["name"] for s in c.get("/stats").json()["collections"]} == {"faq", "garden", "notes"}
        log = srv.log.read_text()
        # faq and notes (and faq's new version) share one loaded MiniLM encoder: one ONNX session for the process
        name = re.escape(minilm_mean.name)
        loads = re.findall(rf'"service.engine.encoders", "msg": "loaded encoder \S*/{name} ', log)
        assert len(loads) == 1, log
    finally:
        srv.proc.send_signal(signal.SIGKILL)
        srv.proc.wait(timeout=30)
    # acknowledged writes survive a SIGKILL, each in its own collection
    srv = serve(tmp_path, cdir)
    try:
        with srv.client() as c:
            assert top(c, "garden", "blue horse road guitar sky")["hits"][0]["id"] == "g-new"
            assert faq_docs[5]["text"] not in [h["text"] for h in top(c, "faq", faq_docs[5]["text"])["hits"]]
            assert "g-new" not in [h["id"] for h in top(c, "notes", "blue horse road guitar sky")["hits"]]
    finally:
        stop_server(srv)


def test_new_collection_folders_are_served_without_a_restart(cdir: Path, template: Path, tmp_path: Path) -> None:
    shutil.move(str(cdir / "notes"), str(tmp_path / "notes-later"))
    (cdir / "Not A Name").mkdir()
    (cdir / "empty").mkdir()
    srv = serve(tmp_path, cdir)
    try:
        with srv.client() as c:
            assert [x["name"] for x in c.get("/collections").json()["collections"]] == ["faq", "garden"]
            assert c.get("/collections/notes").status_code == 404
            shutil.copytree(template / "notes", cdir / "notes", symlinks=True)
            wait_for(lambda: c.get("/collections/notes").status_code == 200 and
                     c.get("/collections/notes").json()["ready"])
            assert top(c, "notes", "how can I learn python")["hits"]
        log = srv.log.read_text()
        assert "Not A Name" in log and "is not a collection name" in log
        assert "is not an index root" in log and "empty" in log
    finally:
        stop_server(srv)


def test_keys_are_scoped_per_collection(cdir: Path, minilm_mean: Path, tmp_path: Path) -> None:
    keys = (f"{ALL}:admin,{GARDEN_READ}:read@garden,{FAQ_ADMIN}:admin@faq,{FAQ_ADMIN}:read@notes,"
            f"{NOTES_READ}:read@notes")
    srv = serve(tmp_path, cdir, STRATA_API_KEYS=keys)
    try:
        with srv.client() as c:
            g, f, a = auth(GARDEN_READ), auth(FAQ_ADMIN), auth(ALL)
            names = lambda h: [x["name"] for x in c.get("/collections", headers=h).json()["collections"]]  # noqa: E731
            assert names(a) == ["faq", "garden", "notes"]
            assert names(g) == ["garden"]
            assert names(f) == ["faq", "notes"]
            assert c.get("/collections", headers={}).status_code == 401
            # garden's key: 403 on every route of faq, the default collection's routes included
            for method, path, body in (("GET", "/collections/faq", None),
                                       ("POST", "/collections/faq/search", {"query": "x"}),
                                       ("PUT", "/collections/faq/documents", {"documents": []}),
                                       ("POST", "/collections/faq/admin/reload", None),
                                       ("POST", "/search", {"query": "x"}), ("POST", "/encode", {"texts": ["x"]})):
                r = c.request(method, path, json=body, headers=g)
                assert r.status_code == 403, (path, r.text)
                assert "collection 'faq'" in r.json()["detail"]
            assert top(c, "garden", "dog cat", headers=g)["hits"]
            # read only: no writes on its own collection either
            r = c.put("/collections/garden/documents", json={"documents": [{"id": "g1", "text": "x"}]}, headers=g)
            assert r.status_code == 403 and "admin" in r.json()["detail"]
            # faq's admin key writes faq, reads notes, and nothing of garden
            r = c.put("/collections/faq/documents", json={"documents": [{"id": 7, "text": "a written one"}]},
                      headers=f)
            assert r.status_code == 200, r.text
            assert c.post("/collections/notes/search", json={"query": "x"}, headers=f).status_code == 200
            assert c.put("/collections/notes/documents", json={"documents": [{"id": "n1", "text": "x"}]},
                         headers=f).status_code == 403
            assert c.post("/collections/garden/search", json={"query": "x"}, headers=f).status_code == 403
            # /v1: each key sees the encoders of its collections only
            all_models = [m["id"] for m in c.get("/v1/models", headers=a).json()["data"]]
            garden_model = next(m for m in all_models if m.endswith("@garden"))
            faq_model = next(m for m in all_models if "@" not in m)
            assert [m["id"] for m in c.get("/v1/models", headers=g).json()["data"]] == [garden_model]
            assert [m["id"] for m in c.get("/v1/models", headers=f).json()["data"]] == [faq_model]
            r = c.post("/v1/embeddings", json={"model": faq_model, "input": "x"}, headers=g)
            assert r.status_code == 403 and r.json()["error"]["message"]
            assert c.get(f"/v1/models/{faq_model}", headers=g).status_code == 403
            assert c.post("/v1/embeddings", json={"model": garden_model, "input": "x"}, headers=g).status_code == 200
            # faq's key reads notes, which shares faq's encoder: the encoder is usable through either
            assert c.post("/v1/embeddings", json={"model": faq_model, "input": "x"}, headers=f).status_code == 200
            assert c.post("/v1/embeddings", json={"model": garden_model, "input": "x"}, headers=f).status_code == 403
            # a read@notes key: every id of notes' encoder answers, faq's own included (faq uses that encoder too,
            # docs/collections.md), with notes' vectors; garden's ids stay refused naming why
            n = auth(NOTES_READ)
            want = c.post("/v1/embeddings", json={"model": "strata-384@notes", "input": "x"}, headers=a).json()
            for model in (faq_model, "strata-384@faq", "strata-384@notes", minilm_mean.name):
                r = c.post("/v1/embeddings", json={"model": model, "input": "x"}, headers=n)
                assert r.status_code == 200, (model, r.text)
                assert r.json()["data"] == want["data"], model
                assert c.get(f"/v1/models/{model}", headers=n).status_code == 200, model
            r = c.post("/v1/embeddings", json={"model": garden_model, "input": "x"}, headers=n)
            assert r.status_code == 403 and "'garden'" in r.json()["error"]["message"], r.text
    finally:
        stop_server(srv)


@pytest.mark.parametrize(("env", "args", "message"), [
    ({"STRATA_INDEX_ROOT": "/tmp"}, (), "are both set"),
    ({}, ("sharded",), "sharded (Ray) backend serves one index root"),
    ({"STRATA_API_KEYS": "somekey-0123:read@Bad"}, (), "is not a collection name"),
    # keys asked for, none given: never an open API
    ({"STRATA_API_KEYS_FILE": "/dev/null"}, (), "STRATA_API_KEYS_FILE /dev/null holds no API key"),
    ({"STRATA_API_KEYS": " , "}, (), "STRATA_API_KEYS holds no API key"),
    # the keys file's `KEY admin@faq,read@notes` written in the variable: `read@notes` is no key of its own
    ({"STRATA_API_KEYS": "faqadmin-0123:admin@faq,read@notes"}, (),
     "STRATA_API_KEYS entry 2: 'read@notes' is a scope, not an API key"),
])
def test_settings_that_cannot_go_together_exit_2_with_the_reason(tmp_path: Path, env: dict[str, str],
                                                                  args: tuple[str, ...], message: str) -> None:
    r = subprocess.run([sys.executable, "-m", "service", *args], cwd=REPO, capture_output=True, text=True,
                       timeout=120, env=os.environ | {"STRATA_COLLECTIONS_DIR": str(tmp_path)} | env)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr and "Traceback" not in r.stderr


def test_a_keys_file_grants_scopes_per_collection(tmp_path: Path) -> None:
    """`KEY grant,...` lines: several grants per key, merged across lines; admin implies read; a key without `@`
    reaches every collection; a bad grant names its file and line."""
    from service.auth import ADMIN, READ, KeyConfigError, load_keys
    from service.settings import Settings

    keys = tmp_path / "keys"
    keys.write_text("# team keys\nfaqadmin-0123 admin@faq,read@notes\nfaqadmin-0123 read@garden\n"
                    "everyone-0123\nops-key-0123 admin\n")
    grants = load_keys(Settings(api_keys_file=keys))
    faq = grants["faqadmin-0123"]
    assert faq.may(ADMIN, "faq") and faq.may(READ, "faq") and faq.may(READ, "notes") and faq.may(READ, "garden")
    assert not faq.may(ADMIN, "notes") and not faq.may(READ, "other") and faq.restricted
    assert grants["everyone-0123"].may(READ, "anything") and not grants["everyone-0123"].may(ADMIN, "anything")
    assert grants["ops-key-0123"].may(ADMIN, "anything")
    keys.write_text("good-key-0123 read@faq\nbad-key-01234 write@faq\n")
    with pytest.raises(KeyConfigError, match=r"keys:2: 'write@faq'"):
        load_keys(Settings(api_keys_file=keys))


def test_a_scope_the_server_does_not_know_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    """`key:ADMIN` or `key:adm` made a read-only key without a word (an unknown scope adds nothing, by design)."""
    from service.auth import ADMIN, load_keys
    from service.settings import Settings

    with caplog.at_level("WARNING", logger="service.auth"):
        grants = load_keys(Settings(api_keys="typo-key-0123:ADMIN,good-key-0123:admin"))
    assert not grants["typo-key-0123"].may(ADMIN, "faq") and grants["good-key-0123"].may(ADMIN, "faq")
    assert [r.getMessage() for r in caplog.records] == [
        "STRATA_API_KEYS entry 1: scope 'ADMIN' is not one this server knows (read, admin): the key may read only"]


def test_no_part_of_a_key_is_logged_or_named_in_an_error(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    """Keys are secrets: a warning or a refusal names the entry by its position (or the file's line), never any
    characters of the key (the first four shortened a key's search by 4 characters for whoever reads the log)."""
    from service.auth import KeyConfigError, load_keys
    from service.settings import Settings

    with caplog.at_level("WARNING", logger="service.auth"):
        load_keys(Settings(api_keys="Zq7wSECRET-0123:adm"))
    with pytest.raises(KeyConfigError) as short:
        load_keys(Settings(api_keys="Zq7wSECRET-0123:admin,Zq7w"))
    said = [r.getMessage() for r in caplog.records] + [str(short.value)]
    assert len(said) == 2 and not [line for line in said if "Zq7w" in line], said
    assert "entry 1" in said[0] and "entry 2" in said[1]


def test_a_comment_or_a_word_that_is_no_scope_never_widens_a_collection_grant(tmp_path: Path,
                                                                                caplog: pytest.LogCaptureFixture
                                                                                ) -> None:
    """`KEY read@faq  # the faq team`: the comment's words were taken for scopes, and an unknown scope gives read on
    every collection, so the faq team's key read them all. A comment after a line's grants is a comment; a word
    that is no scope beside collection grants adds nothing (said at startup); alone it still gives read."""
    from service.auth import ADMIN, READ, load_keys
    from service.settings import Settings

    keys = tmp_path / "keys"
    keys.write_text("faq-reader-0123 read@faq  # the faq team, read only\n"
                    "faq-admin-0123 admin@faq,Admin\n"
                    "hash#in-key-0123 admin\t# a key may hold a # not after a space\n"
                    "typo-only-0123 ADMIN\n")
    with caplog.at_level("WARNING", logger="service.auth"):
        grants = load_keys(Settings(api_keys_file=keys))
    assert set(grants) == {"faq-reader-0123", "faq-admin-0123", "hash#in-key-0123", "typo-only-0123"}
    reader, admin = grants["faq-reader-0123"], grants["faq-admin-0123"]
    assert reader.may(READ, "faq") and not reader.may(READ, "garden") and not reader.may(ADMIN, "faq")
    assert admin.may(ADMIN, "faq") and not admin.may(READ, "garden")
    assert grants["hash#in-key-0123"].may(ADMIN, "garden")
    assert grants["typo-only-0123"].may(READ, "garden") and not grants["typo-only-0123"].may(ADMIN, "garden")
    said = [r.getMessage() for r in caplog.records]
    assert said == [f"{keys}:2: scope 'Admin' is not one this server knows (read, admin): it adds nothing to the "
                    "entry's collection grants",
                    f"{keys}:4: scope 'ADMIN' is not one this server knows (read, admin): the key may read only"], said
    grants = load_keys(Settings(api_keys="faq-key-0123:read@faq,faq-key-0123:adm"))  # an entry of its own: reads
    assert grants["faq-key-0123"].may(READ, "garden")


def test_keys_asked_for_and_none_given_never_serve_an_open_api(tmp_path: Path) -> None:
    """A keys file with no key in it (a secret not written yet, every line commented out) served an open API:
    refused, naming the setting; an empty STRATA_API_KEYS (as compose passes an unset one) is unset."""
    from service.auth import KeyConfigError, load_keys
    from service.settings import Settings

    keys = tmp_path / "keys"
    keys.write_text("# faq-reader-0123 read@faq\n\n   \n")
    with pytest.raises(KeyConfigError, match=f"STRATA_API_KEYS_FILE {keys} holds no API key"):
        load_keys(Settings(api_keys_file=keys))
    assert load_keys(Settings(api_keys="")) == {} and load_keys(Settings()) == {}
    assert set(load_keys(Settings(api_keys="ops-key-0123:admin", api_keys_file=keys))) == {"ops-key-0123"}


def test_a_scope_is_never_taken_for_a_key(tmp_path: Path) -> None:
    """`KEY:admin@faq,read@notes` (the keys file's grants, in the variable) made `read@notes` a key of its own, one
    anybody could guess, reading every collection: refused naming the entry, as a bad grant is; likewise a line
    of the keys file that is a scope alone."""
    from service.auth import KeyConfigError, load_keys
    from service.settings import Settings

    for variable in ("faqadmin-0123:admin@faq,read@notes", "faqadmin-0123:admin,admin@garden",
                     "faqadmin-0123:read, read@notes"):
        with pytest.raises(KeyConfigError, match=r"STRATA_API_KEYS entry 2: '(read|admin)@\w+' is a scope, not an"):
            load_keys(Settings(api_keys=variable))
    keys = tmp_path / "keys"
    keys.write_text("faqadmin-0123 admin@faq\nread@notes\n")
    with pytest.raises(KeyConfigError, match=r"keys:2: 'read@notes' is a scope, not an API key"):
        load_keys(Settings(api_keys_file=keys))
    # a key that merely holds an @ or a scope's word is a key
    grants = load_keys(Settings(api_keys="admin@example.org-key:admin,read-only-key-0123"))
    assert set(grants) == {"admin@example.org-key", "read-only-key-0123"}


@pytest.fixture(scope="module")
def cls_384(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 1-layer random BERT of hidden size 384 exported with CLS pooling: 384 dimensions like `minilm_mean`,
    other vectors (what the scenario needs of faq's encoder; a second export of all-MiniLM-L6-v2 cost ~20 s)."""
    from models.export import export_encoder
    from tests.tiny_bert import make_tiny_bert

    tmp = tmp_path_factory.mktemp("models")
    out = tmp / "tiny-cls-384"
    export_encoder(make_tiny_bert(tmp / "ckpt", layers=1, hidden=384), out, pooling="cls")
    return out


def test_one_model_id_means_one_encoder_for_every_key(template: Path, corpora: dict[str, Path], minilm_mean: Path,
                                                      cls_384: Path, tmp_path: Path) -> None:
    """The scenario as found: collections `garden` (mean) and `faq` (cls), STRATA_DEFAULT_COLLECTION=faq,
    the key `gardenkey1:read@garden`. `strata-384` was garden's vectors for that key and faq's for an admin key
    (`resolve()` fell through to garden, which takes the same id as an alias): now it names faq's encoder for
    everyone, and the garden key gets a 403. A lone surrogate in `model` is a 404 for every key (it was a 500)."""
    cdir = tmp_path / "collections"
    shutil.copytree(template / "notes", cdir / "garden", symlinks=True)  # built with minilm_mean (mean pooling)
    build(cdir / "faq", corpora["faq"], cls_384)
    admin, garden_key = "adminkey-0123", "gardenkey1"
    srv = serve(tmp_path, cdir, STRATA_API_KEYS=f"{admin}:admin,{garden_key}:read@garden")
    try:
        with srv.client() as c:
            a, g = auth(admin), auth(garden_key)
            ids = [m["id"] for m in c.get("/v1/models", headers=a).json()["data"]]
            assert ids == ["strata-384", "strata-384@garden"]  # the default collection's encoder keeps the plain id
            assert [m["id"] for m in c.get("/v1/models", headers=g).json()["data"]] == ["strata-384@garden"]

            def vector(model: str, headers: dict[str, str]) -> list[float]:
                r = c.post("/v1/embeddings", json={"model": model, "input": "how do I water tomatoes",
                                                   "encoding_format": "float"}, headers=headers)
                assert r.status_code == 200, r.text
                return r.json()["data"][0]["embedding"]

            faq_vec, garden_vec = vector("strata-384", a), vector("strata-384@garden", a)
            assert faq_vec != garden_vec  # two encoders (cls and mean pooling), same dimension
            assert vector("strata-384@faq", a) == faq_vec
            assert vector("strata-384@garden", g) == garden_vec
            r = c.post("/v1/embeddings", json={"model": "strata-384", "input": "x"}, headers=g)
            assert r.status_code == 403 and r.json()["error"]["message"], r.text  # never garden's vectors
            assert c.get("/v1/models/strata-384", headers=g).status_code == 403
            assert c.get("/v1/models/strata-384", headers=a).json()["id"] == "strata-384"
            # the encoder folder's name is an alias of the encoder it names, for every key
            assert vector(minilm_mean.name, g) == garden_vec and vector(minilm_mean.name, a) == garden_vec
            assert c.post("/v1/embeddings", json={"model": cls_384.name, "input": "x"},
                          headers=g).status_code == 403
            for key in (a, g):
                for asked in ("\ud800", "strata-384\udfff"):
                    r = c.post("/v1/embeddings", content=json.dumps({"model": asked, "input": "x"}),
                               headers=key | {"Content-Type": "application/json"})
                    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found", r.text[:300]
            # a filter past the limits is refused on a collection's route as on /search, before any search
            deep: dict[str, Any] = {"bed": 1}
            for _ in range(17):
                deep = {"or": [deep]}
            r = c.post("/collections/garden/search", json={"query": "x", "filter": deep}, headers=g)
            assert r.status_code == 422 and "deeper than 16 levels" in r.text
    finally:
        stop_server(srv)
    # STRATA_MODEL_ALIASES='["*"]' (any name answers) never shadows an encoder's own name: each folder name still
    # answers with its own encoder, not the default collection's; only a name no encoder has falls to the alias
    srv = serve(tmp_path, cdir, STRATA_MODEL_ALIASES='["*"]')
    try:
        with srv.client() as c:
            def embed(model: str) -> tuple[str, list[float]]:
                r = c.post("/v1/embeddings", json={"model": model, "input": "how do I water tomatoes"})
                assert r.status_code == 200, r.text
                return r.json()["model"], r.json()["data"][0]["embedding"]

            garden, faq = embed("strata-384@garden"), embed("strata-384")
            assert garden[1] != faq[1]
            assert embed(minilm_mean.name) == garden and embed(cls_384.name) == faq
            assert embed("text-embedding-3-small") == faq  # the alias: the default collection's encoder
    finally:
        stop_server(srv)


def test_a_collection_has_a_config_of_its_own(cdir: Path, tmp_path: Path) -> None:
    """collection.json: a bad one at startup leaves that collection unserved (the others are) until fixed; the
    admin route and the CLI change it with validation, atomically, applied without a restart; its defaults yield
    to the request's; its limits and access only narrow."""
    from indexer.runtime.collection_config import CONFIG_FILE, fingerprint

    (cdir / "garden" / CONFIG_FILE).write_text('{"mode": "fuzzy"}')
    keys = f"{ALL}:admin,{GARDEN_READ}:read@garden,{FAQ_ADMIN}:admin@faq,{FAQ_ADMIN}:read@notes"
    srv = serve(tmp_path, cdir, STRATA_API_KEYS=keys)
    try:
        with srv.client() as c:
            a, f = auth(ALL), auth(FAQ_ADMIN)
            names = lambda h: [x["name"] for x in c.get("/collections", headers=h).json()["collections"]]  # noqa: E731
            # garden's bad file: garden alone is not served, and every answer about it names the file and field
            assert names(a) == ["faq", "notes"]
            r = c.post("/collections/garden/search", json={"query": "dog"}, headers=a)
            assert r.status_code == 404 and str(cdir / "garden" / CONFIG_FILE) in r.json()["detail"]
            assert "mode: Input should be" in r.json()["detail"]
            ready = c.get("/ready").json()
            assert ready["ready"] and "not served" in ready["collections"]["garden"]["reason"]
            assert str(cdir / "garden" / CONFIG_FILE) in srv.log.read_text()
            assert top(c, "faq", "how", headers=a)["hits"]
            # fixed on disk: served at the next look, with its limit
            (cdir / "garden" / CONFIG_FILE).write_text('{"max_top_k": 2}')
            r = wait_for(lambda: (r := c.post("/collections/garden/search", json={"query": "dog", "top_k": 3},
                                              headers=a)).status_code != 404 and r)
            assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "top_k"], r.text
            assert "limit of 2" in r.json()["detail"][0]["msg"]
            # PUT: a bad value or one the served (flat) version cannot apply is a 422 at the field; nothing written
            r = c.put("/collections/notes/config", json={"max_top_k": 0}, headers=a)
            assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "max_top_k"
            r = c.put("/collections/notes/config", json={"search": {"nprobe": 8}}, headers=a)
            assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "search"], r.text
            assert "flat index" in r.json()["detail"][0]["msg"]
            assert not (cdir / "notes" / CONFIG_FILE).exists()
            assert c.put("/collections/notes/config", json={}, headers=f).status_code == 403  # read@notes only
            # a good one applies from the next request: the default mode, under the request's own
            r = c.put("/collections/notes/config", json={"mode": "lexical", "access": {"read": "admin"}}, headers=a)
            assert r.status_code == 200, r.text
            assert json.loads((cdir / "notes" / CONFIG_FILE).read_text()) == {"mode": "lexical",
                                                                              "access": {"read": "admin"}}
            assert c.get("/collections/notes/config", headers=a).json() == r.json()
            assert top(c, "notes", "how", headers=a)["mode"] == "lexical"
            r = c.post("/collections/notes/search", json={"query": "how", "mode": "dense"}, headers=a)
            assert r.json()["mode"] == "dense"
            # access only narrows: reading notes now needs admin, which faq's key has only on faq
            assert c.post("/collections/notes/search", json={"query": "x"}, headers=f).status_code == 403
            assert names(f) == ["faq"] and names(a) == ["faq", "garden", "notes"]
            # the CLI: validated against the served version (exit 2 naming file and field), then applied live
            faq_file = cdir / "faq" / CONFIG_FILE
            bad = indexer_cli("collection", "--root", str(cdir / "faq"), "--set", "search.ef_search=9")
            assert bad.returncode == 2 and str(faq_file) in bad.stderr and "search" in bad.stderr, bad.stderr
            ok = indexer_cli("collection", "--root", str(cdir / "faq"), "--set", "access.write=none",
                             "--set", f'access.keys=["{fingerprint(FAQ_ADMIN)}"]')
            assert ok.returncode == 0 and json.loads(ok.stdout)["access"]["write"] == "none", ok.stderr
            wait_for(lambda: c.post("/search", json={"query": "x"}, headers=a).status_code == 403)
            r = c.post("/collections/faq/search", json={"query": "x"}, headers=a)
            assert r.status_code == 403 and "access.keys" in r.json()["detail"]
            assert top(c, "faq", "how", headers=f)["hits"]
            for path in ("/documents", "/collections/faq/documents"):
                r = c.put(path, json={"documents": [{"id": 1, "text": "x"}]}, headers=f)
                assert r.status_code == 403 and "takes no writes" in r.json()["detail"], r.text
    finally:
        stop_server(srv)
