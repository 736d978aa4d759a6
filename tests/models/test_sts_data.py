"""STS evaluation (SentEval "all" setting) and the training data builders, on the real shared data when present."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from models.data import quora_training, snli_triplets
from models.layer_search import search_layers
from models.sentence_model import SentenceModel
from models.sts import StsSet, evaluate, format_table, load_task, spearman_x100
from tests.models.fixtures import SENTENCES, shared_data, tiny_sts

# Pair counts of SOURCES.md (STS13 without SMT; STS15/16 scored pairs only).
EXPECTED = {
    "STS12": 3108,
    "STS13": 1500,
    "STS14": 3750,
    "STS15": 3000,
    "STS16": 1186,
    "STSB": 1379,
    "SICKR": 4927,
    "STSB-dev": 1500,
}



@pytest.mark.parametrize("task", sorted(EXPECTED))
def test_real_sts_files_load_with_expected_counts(task):
    root = shared_data()
    sts = load_task(task, root)
    assert len(sts) == EXPECTED[task] == len(sts.s1) == len(sts.s2)
    assert all(s and "\t" not in s for s in sts.s1[:50])
    assert 0 <= min(sts.gold) and max(sts.gold) <= 5


def test_spearman_all_setting_and_table():
    sts = StsSet("x", ["a"] * 4, ["b"] * 4, [0.0, 1.0, 2.0, 3.0])
    angles = np.array([1.2, 0.9, 0.5, 0.1])  # larger gold → smaller angle → higher cosine
    v1 = np.tile([1.0, 0.0], (4, 1))
    v2 = np.stack([np.cos(angles), np.sin(angles)], 1)
    assert spearman_x100(sts, v1, v2) == pytest.approx(100.0)
    assert spearman_x100(sts, v1, v2[::-1]) == pytest.approx(-100.0)
    table = format_table({"m": {"STSB": 80.0, "avg": 80.0}}, ["STSB"])
    assert "STS-B" in table and "80.00" in table


def test_evaluate_encodes_each_unique_sentence_once():
    seen: list[list[str]] = []

    def encode(texts):
        seen.append(list(texts))
        return np.random.default_rng(0).normal(size=(len(texts), 8))

    scores = evaluate(encode, [tiny_sts(), tiny_sts()])
    assert len(seen) == 1 and len(seen[0]) == len(set(seen[0])) == len(SENTENCES)
    assert set(scores) == {"tiny-dev", "avg"}


def test_sts_cli_on_checkpoint_prints_table(tiny_bert, capsys):
    shared_data()
    from models.cli import main

    assert main(["sts", "--checkpoint", str(tiny_bert), "--mode", "cls", "--max-pairs", "40", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert set(row) >= {"STS12", "STS16", "STSB", "SICKR", "avg"}
    assert all(-100 <= row[k] <= 100 for k in ("STS12", "STSB", "avg"))


def test_layer_search_is_pruned_and_returns_at_most_four_layers(tiny_bert):
    model = SentenceModel.from_checkpoint(tiny_bert)
    result = search_layers(model, tiny_sts(), max_layers=4, beam=2)
    assert 1 <= len(result.layers) <= 4 and all(0 <= i <= 3 for i in result.layers)
    assert result.evaluated < 2**4 - 1  # fewer than every non-empty subset of the 4 hidden-state layers
    assert result.leaderboard[0][1] == result.dev_spearman == max(s for _, s in result.leaderboard)


def test_snli_triplets_from_real_files():
    root = shared_data()
    for split, premises in (("dev", 2943), ("test", 2921)):  # premises with entailment and contradiction
        triplets = snli_triplets(root / "train" / "snli_senteval", splits=(split,))
        assert len({t[0] for t in triplets}) == premises
    assert all(len(t) == 3 and t[1] != t[2] for t in triplets)


def test_quora_training_excludes_eval_qids_and_held_out_rows(tmp_path):
    rows = [  # id qid1 qid2 q1 q2 dup
        (0, 1, 2, "eval one", "eval two", 1),
        (1, 3, 4, "eval three", "eval four", 0),
        (2, 5, 6, "train a", "train b", 1),  # kept, hard negative from row 3
        (3, 5, 7, "train a", "other c", 0),
        (4, 1, 8, "eval one", "leak", 1),  # shares qid 1 with the eval rows: dropped
        (5, 9, 10, "train d", "train e", 1),  # kept, no negative → a pair
        (6, 11, 12, "held out", "held out 2", 1),  # >= stop: never read
    ]
    f = tmp_path / "q.tsv.gz"
    with gzip.open(f, "wt") as g:
        g.write("id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n")
        for r in rows:
            g.write("\t".join(map(str, r)) + "\n")
    out = quora_training(f, start=2, stop=6, eval_rows=2)
    assert out == [("train a", "train b", "other c"), ("train d", "train e")]
    with pytest.raises(Exception, match="held out"):
        quora_training(f, stop=300_001)
