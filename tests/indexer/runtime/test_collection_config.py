"""A collection's own settings (`indexer.runtime.collection_config`): validation naming the field, precedence
(request > collection.json > process-wide), limits only narrower than the API's, atomic writes on a real folder."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from indexer.runtime import collection_config as cc
from indexer.runtime.filters import LIMITS
from indexer.runtime.fusion import DEFAULT_ALPHA, DEFAULT_RRF_K, Fusion
from indexer.runtime.query import Query


def test_no_file_is_every_default(tmp_path: Path) -> None:
    config = cc.load(tmp_path)
    assert config == cc.CollectionConfig()
    q = Query(["x"], 10, None, None, None, None)
    assert config.shape(q, "ivf") is q  # nothing set: the query travels as it came
    assert config.fusion_for(None, None, None) is None  # the built-in default (convex 0.5) decides


@pytest.mark.parametrize(("content", "field", "words"), [
    ("{", None, "not JSON"),
    ('{"mode": "fuzzy"}', "mode", "'dense', 'lexical' or 'hybrid'"),
    ('{"max_top_k": 101}', "max_top_k", "less than or equal to 100"),
    ('{"max_queries": 65}', "max_queries", "less than or equal to 64"),  # only ever lower than the API's
    (json.dumps({"filter": {"depth": LIMITS.depth + 1}}), "filter.depth", f"less than or equal to {LIMITS.depth}"),
    ('{"alpha": 1.5}', "alpha", "less than or equal to 1"),
    ('{"search": {"nprobe": "many"}}', "search.nprobe", "valid integer"),
    ('{"search": {"nprobe": 0}}', "search", "nprobe must be between 1 and"),
    (json.dumps({"search": {"ef_search": 10**9}}), "search", "ef_search must be between 1 and"),
    ('{"search": {"nprobes": 8}}', "search", "'nprobes' is no index kind's search parameter"),
    ('{"access": {"keys": ["secret-key-itself"]}}', "access.keys", "not a key fingerprint"),
    ('{"access": {"write": "everyone"}}', "access.write", "'admin' or 'none'"),
    ('{"moed": "dense"}', "moed", "Extra inputs"),
])
def test_a_bad_file_names_itself_and_the_field(tmp_path: Path, content: str, field: str | None, words: str) -> None:
    (tmp_path / cc.CONFIG_FILE).write_text(content)
    with pytest.raises(cc.ConfigError) as caught:
        cc.load(tmp_path)
    assert str(tmp_path / cc.CONFIG_FILE) in str(caught.value) and words in str(caught.value)
    assert caught.value.field == field


def test_precedence_request_then_collection_then_defaults() -> None:
    config = cc.CollectionConfig(mode="hybrid", fusion="rrf", rrf_k=20, alpha=0.8, search={"nprobe": 40})
    q = Query(["x"], 5, None, None, None, None)
    shaped = config.shape(q, "ivf")
    assert (shaped.mode, shaped.search_params) == ("hybrid", {"nprobe": 40})
    asked = config.shape(Query(["x"], 5, None, {"nprobe": 3}, "dense", None), "ivf")
    assert (asked.mode, asked.search_params) == ("dense", {"nprobe": 3})
    # a brought vector decides its own mode; a kind that takes no such knob leaves the collection's unapplied
    assert config.shape(q, "hnsw", brought_vector=True).mode is None
    assert config.shape(q, "flat").search_params is None
    # a search that runs lexical (named, the collection's default or the version's) searches no vectors: the
    # collection's knobs are not applied to it (the searcher would refuse them as the request's); the request's own are
    lexical = cc.CollectionConfig(mode="lexical", search={"nprobe": 40})
    assert lexical.shape(q, "ivf").search_params is None
    assert lexical.shape(Query(["x"], 5, None, None, "dense", None), "ivf").search_params == {"nprobe": 40}
    assert lexical.shape(q, "ivf", brought_vector=True).search_params == {"nprobe": 40}  # a vector runs dense
    knobs = cc.CollectionConfig(search={"nprobe": 40})
    assert knobs.shape(q, "ivf", version_mode="lexical").search_params is None
    assert knobs.shape(Query(["x"], 5, None, None, "hybrid", None), "ivf", version_mode="lexical"
                       ).search_params == {"nprobe": 40}
    assert knobs.shape(Query(["x"], 5, None, {"nprobe": 3}, None, None), "ivf", version_mode="lexical"
                       ).search_params == {"nprobe": 3}
    # fusion: each field from the request, else the collection's, else the built-in default
    assert config.fusion_for(None, None, None) == Fusion("rrf", 20, 0.8)
    # the top_k of a request that gives none: the API's default, or max_top_k when lower
    assert (cc.CollectionConfig().top_k_for(10), cc.CollectionConfig(max_top_k=3).top_k_for(10),
            cc.CollectionConfig(max_top_k=50).top_k_for(10)) == (10, 3, 10)
    assert config.fusion_for(None, None, 0.1) == Fusion("convex", 20, 0.1)  # alpha alone means convex
    assert config.fusion_for("convex", None, None) == Fusion("convex", 20, 0.8)
    assert cc.CollectionConfig().fusion_for(None, 7.0, None) == Fusion("rrf", 7.0, DEFAULT_ALPHA)
    assert cc.CollectionConfig(alpha=0.2).fusion_for(None, None, None) == Fusion("convex", DEFAULT_RRF_K, 0.2)


def test_limits_narrow_the_request() -> None:
    config = cc.CollectionConfig(max_top_k=5, filter=cc.FilterCaps(conditions=2))
    config.shape(Query(["x"], 5, {"a": 1, "b": 2}), None)
    with pytest.raises(cc.ConfigError, match="top_k 6 is over this collection's limit of 5") as caught:
        config.shape(Query(["x"], 6), None)
    assert caught.value.field == "top_k"
    with pytest.raises(cc.ConfigError, match="collection.json filter") as caught:
        config.shape(Query(["x"], 5, {"a": 1, "b": 2, "c": 3}), None)
    assert caught.value.field == "filter"


def test_max_queries_caps_a_batch_of_queries() -> None:
    config = cc.with_changes(cc.CollectionConfig(), ["max_queries=2"], [], "here")
    config.shape(Query(["a", "b"], 5), None)
    config.shape(Query(["a", "b", "c"], None), None)  # encoding (/encode, writes) is not a search
    with pytest.raises(cc.ConfigError, match="3 queries are over this collection's limit of 2") as caught:
        config.shape(Query(["a", "b", "c"], 5), None)
    assert caught.value.field == "queries"


def test_served_version_checks() -> None:
    cc.CollectionConfig(search={"nprobe": 8}).check_served("ivf", has_lexical=False)
    with pytest.raises(cc.ConfigError, match="not a search parameter of this version's flat index") as caught:
        cc.CollectionConfig(search={"nprobe": 8}).check_served("flat", has_lexical=True)
    assert caught.value.field == "search"
    with pytest.raises(cc.ConfigError, match="needs a lexical index") as caught:
        cc.CollectionConfig(mode="hybrid").check_served("flat", has_lexical=False)
    assert caught.value.field == "mode"


def test_changes_are_validated_and_written_atomically(tmp_path: Path) -> None:
    config = cc.with_changes(cc.load(tmp_path), ["mode=lexical", "search.ef_search=128", "access.write=none",
                                                 "max_top_k=20"], [], "here")
    path = cc.save(tmp_path, config)
    assert json.loads(path.read_text()) == {"mode": "lexical", "search": {"ef_search": 128},
                                            "access": {"write": "none"}, "max_top_k": 20}
    assert cc.load(tmp_path) == config
    assert [p.name for p in tmp_path.iterdir()] == [cc.CONFIG_FILE]  # no temporary file left behind
    assert oct(os.stat(path).st_mode & 0o777) == "0o644"
    back = cc.with_changes(config, [], ["mode", "search.ef_search"], "here")
    assert (back.mode, back.search) == (None, {})
    with pytest.raises(cc.ConfigError, match="here: max_top_k: Input should be a valid integer"):
        cc.with_changes(config, ["max_top_k=lots"], [], "here")
    with pytest.raises(cc.ConfigError, match="expected KEY=VALUE"):
        cc.with_changes(config, ["mode"], [], "here")


def test_fingerprints_are_not_the_key() -> None:
    fp = cc.fingerprint("admin-key-0123")
    assert len(fp) == cc.FINGERPRINT_CHARS and "admin" not in fp
    assert cc.Access(keys=[fp]).keys == [fp]


def test_the_compaction_policy_has_defaults_and_refuses_bad_values_naming_the_field(tmp_path: Path) -> None:
    policy = cc.load(tmp_path).compaction
    assert (policy.auto, policy.written_docs, policy.log_mib, policy.deleted_share, policy.index) \
        == (True, 10_000, 64.0, 0.2, "auto")
    for bad, field in (({"written_docs": 0}, "compaction.written_docs"), ({"deleted_share": 1.5},
                       "compaction.deleted_share"), ({"index": "hnsw"}, "compaction.index"),
                       ({"every": 3}, "compaction.every")):
        with pytest.raises(cc.ConfigError) as err:
            cc.parse({"compaction": bad}, "collection.json")
        assert err.value.field == field, (bad, err.value)
    changed = cc.with_changes(cc.CollectionConfig(), ["compaction.written_docs=500"], [], "--set")
    assert changed.compaction.written_docs == 500 and changed.compaction.log_mib == 64.0
    cc.save(tmp_path, changed)
    assert json.loads(cc.path_of(tmp_path).read_text()) == {"compaction": {"written_docs": 500}}
