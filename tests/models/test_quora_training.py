"""In-domain Quora training: the dev split, the training split's exclusions, mined hard negatives,
and the exporter's served vectors for BERT-LC layer combinations and kept poolers — on small real files, a tiny
random BERT and the real ONNX Runtime / FAISS."""

from __future__ import annotations

import csv
import gzip

import numpy as np
import pytest
import torch

from models.data import (
    DataError,
    load_training_data,
    quora_dev,
    quora_training,
    quora_training_questions,
    read_mined,
)
from models.mine import candidates_for, duplicate_clusters, mine
from tests.models.fixtures import SENTENCES


def write_quora(path, rows):
    with gzip.open(path, "wt") as g:
        g.write("id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n")
        for r in rows:
            g.write("\t".join(map(str, r)) + "\n")
    return path


def test_training_excludes_dev_rows_and_their_qids(tmp_path):
    f = write_quora(tmp_path / "q.tsv.gz", [
        (0, 1, 2, "eval one", "eval two", 1),
        (1, 3, 4, "train a", "train b", 1),
        (2, 5, 6, "train c", "dev shares qid 6", 1),  # qid 6 is in the dev rows: dropped
        (3, 7, 8, "dev x", "dev y", 1),  # dev rows 3..4
        (4, 6, 9, "dev z", "dev w", 0),
        (5, 10, 11, "train d", "train e", 1),  # after the dev rows, still below held-out
    ])
    out = quora_training(f, start=1, stop=6, eval_rows=1, dev_rows=(3, 5))
    assert out == [("train a", "train b"), ("train d", "train e")]
    tq = quora_training_questions(f, start=1, stop=6, eval_rows=1, dev_rows=(3, 5))
    assert tq.pairs == [(3, 4), (10, 11)] and set(tq.texts) == {3, 4, 10, 11}
    with pytest.raises(DataError, match="held out"):
        quora_training_questions(f, stop=300_001)


def test_quora_dev_is_a_full_protocol_over_the_dev_rows(tmp_path):
    f = write_quora(tmp_path / "q.tsv.gz", [
        (0, 1, 2, "not dev", "not dev 2", 1),
        (1, 3, 4, "a cat sleeps", "the cat sleeps", 1),
        (2, 3, 5, "a cat sleeps", "a dog runs", 0),
        (3, 6, 7, "why is the sky blue", "is the sky blue", 1),
    ])
    dev = quora_dev(f, dev_rows=(1, 4))
    assert sorted(dev.doc_ids.tolist()) == [3, 4, 5, 6, 7]
    assert dev.query_ids.tolist() == [3, 6] and dev.gold == [{4}, {7}]

    def perfect(texts):  # each text's vector is shared by its duplicate: gold at rank 1 unless self ranks first
        key = {"a cat sleeps": 0, "the cat sleeps": 0, "a dog runs": 1, "why is the sky blue": 2,
               "is the sky blue": 2}
        return np.eye(3, dtype=np.float32)[[key[t] for t in texts]]

    assert dev.mrr_at_10(perfect) == pytest.approx(100.0)  # the query itself is excluded from its results
    with pytest.raises(DataError, match="held-out"):
        quora_dev(f, dev_rows=(299_000, 300_001))


def test_mined_file_round_trip_and_bad_lines(tmp_path):
    good = tmp_path / "m.tsv"
    good.write_text("anchor\tpositive\tnegative\tanchor_qid\nq\tp\tn\t1\n")
    assert load_training_data(str(good)) == [("q", "p", "n")]
    bad = tmp_path / "bad.tsv"
    bad.write_text("anchor\tpositive\tnegative\nq\tp\n")
    with pytest.raises(DataError, match=r"bad.tsv:2"):
        read_mined(bad)


def test_duplicate_clusters_are_transitive():
    c = duplicate_clusters([(1, 2), (2, 3), (4, 5)])
    assert c[1] == c[2] == c[3] != c[4] == c[5]
    texts = {1: "a", 2: "b", 3: "c", 4: "d", 5: "a", 6: "e", 7: "f"}
    # self, labelled duplicates (3 via 2) and a text equal to the anchor's are never candidates
    assert candidates_for(1, 2, np.array([1, 3, 5, 6, -1, 7]), texts, c) == [6, 7]


def test_encoder_mine_writes_skipped_non_duplicate_negatives(tiny_bert, tmp_path):
    from models.cli import main as encoder_cli
    from models.data import TrainingQuestions

    onnx_dir = tmp_path / "onnx"
    assert encoder_cli(["export", "--checkpoint", str(tiny_bert), "--out", str(onnx_dir),
                        "--pooling", "mean", "--quantize", "none"]) == 0
    texts = {i: s for i, s in enumerate(SENTENCES)}
    texts[5] = 'what is the "best" way to invest money'  # quotes stay literal in the TSV
    pairs = [(0, 1), (4, 11), (12, 0), (5, 3)]  # 12 joins 0's cluster: never a negative of 0 or of 1
    out = tmp_path / "mined.tsv"
    review = tmp_path / "review.txt"
    report = mine(TrainingQuestions(texts, pairs), onnx_dir, out, skip=1, take=2, depth=10, nlist=4,
                  progress=False, review=review, review_anchors=2)
    assert report.anchors == 4 and report.negatives == 8
    with open(out) as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    cluster = {0, 1, 12}
    for r in rows:
        a, p, n = int(r["anchor_qid"]), int(r["positive_qid"]), int(r["negative_qid"])
        assert (a, p) in pairs and n != a and n != p
        if a in cluster:
            assert n not in cluster
        assert int(r["candidate_rank"]) in (2, 3)  # rank 1 skipped
        assert r["negative"] == texts[n]
    assert [r["anchor"] for r in rows if r["anchor_qid"] == "5"] == [texts[5]] * 2
    assert [ex[0] for ex in read_mined(out) if ex[0].startswith("what is the")] == [texts[5]] * 2
    assert read_mined(out)[0][:2] == (texts[0], texts[1])
    assert review.read_text().count("\nA ") == 2


def test_export_layer_combination_matches_torch_and_is_parity_checked(tiny_bert, tmp_path):
    from indexer.runtime.encoder import OnnxEncoder
    from models.cli import main as encoder_cli
    from models.poolers import LayerCombination
    from models.sentence_model import SentenceModel

    out = tmp_path / "lc"
    assert encoder_cli(["export", "--checkpoint", str(tiny_bert), "--out", str(out),
                        "--pooling", "layers:0,3", "--quantize", "none"]) == 0
    import json

    meta = json.loads((out / "encoder.json").read_text())
    assert meta["pooling"] == "layers:0,3" and meta["parity_min_cosine"] >= 0.9999
    model = SentenceModel.from_checkpoint(tiny_bert, max_length=64)
    model.pooler = LayerCombination(32, 3, [0, 3])
    want = model.encode(SENTENCES)
    got = OnnxEncoder(out).encode(SENTENCES)
    np.testing.assert_allclose(got, want, atol=1e-4)
    # and it is not simply the last layer's mean
    assert np.abs(got - OnnxEncoder_mean(tiny_bert, tmp_path).encode(SENTENCES)).max() > 1e-3
    assert encoder_cli(["export", "--checkpoint", str(tiny_bert), "--out", str(tmp_path / "bad"),
                        "--pooling", "layers:0,9"]) == 2


def OnnxEncoder_mean(tiny_bert, tmp_path):
    from indexer.runtime.encoder import OnnxEncoder
    from models.cli import main as encoder_cli

    out = tmp_path / "mean"
    if not out.exists():
        assert encoder_cli(["export", "--checkpoint", str(tiny_bert), "--out", str(out),
                            "--pooling", "mean", "--quantize", "none"]) == 0
    return OnnxEncoder(out)


def test_export_keeps_a_trained_s2sent_selector(tiny_bert, tmp_path):
    from indexer.runtime.encoder import OnnxEncoder
    from models.cli import main as encoder_cli
    from models.sentence_model import SentenceModel

    model = SentenceModel.from_checkpoint(tiny_bert, pooler="s2sent", last_k=2, freq_groups=4, reduction=4)
    with torch.no_grad():
        for p in model.pooler.parameters():
            p.normal_(0, 0.5)  # a selector far from uniform, so that keeping it matters
    ckpt = model.save(tmp_path / "ckpt")
    out = tmp_path / "kept"
    assert encoder_cli(["export", "--checkpoint", str(ckpt), "--out", str(out),
                        "--pooling", "pooler", "--quantize", "none"]) == 0
    got = OnnxEncoder(out).encode(SENTENCES)
    want = SentenceModel.from_checkpoint(ckpt, max_length=64).encode(SENTENCES)  # its own pooler
    np.testing.assert_allclose(got, want, atol=1e-4)
    assert encoder_cli(["export", "--checkpoint", str(tiny_bert), "--out", str(tmp_path / "x"),
                        "--pooling", "pooler"]) == 2  # a plain HF folder has no pooler to keep


def test_a_quora_tsv_given_as_training_data_is_read_as_quora_never_its_held_out_rows(tmp_path):
    """`encoder train --data quora_duplicate_questions.tsv` read the TSV one line per sentence: every row, the
    held-out ones (id >= 300,000) included, ids and labels as text. It is now the `quora` source on that file:
    duplicate pairs of the training range only."""
    f = write_quora(tmp_path / "quora.tsv.gz", [
        (5, 1, 2, "eval one", "eval two", 1),
        (150_000, 3, 4, "train a", "train b", 1),
        (150_001, 5, 6, "train c", "train d", 1),
        (299_999, 7, 8, "dev x", "dev y", 1),
        (300_000, 9, 10, "held out question", "held out twin", 1),
        (300_001, 11, 12, "another held out", "its twin", 1),
    ])
    data = load_training_data(str(f))
    assert data == [("train a", "train b"), ("train c", "train d")]
    texts = {t for example in data for t in example}
    assert not any("held out" in t or "\t" in t for t in texts)


@pytest.mark.parametrize("row, message", [
    ("150001\t5\t6\tonly four fields", r"q.tsv:3: expected 6 tab-separated fields"),
    ("150001\t5\tsix\ttrain c\ttrain d\t1", r"q.tsv:3: id, qid1, qid2 and is_duplicate must be integers"),
])
def test_a_malformed_quora_row_names_file_and_line(tmp_path, row, message):
    """A malformed row was skipped silently (training on less than the file holds); it is a DataError naming the
    file and line, as `indexer build` reports the same file."""
    f = tmp_path / "q.tsv"
    f.write_text("id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n150000\t3\t4\ttrain a\ttrain b\t1\n"
                 f"{row}\n")
    with pytest.raises(DataError, match=message):
        quora_training(f)
    with pytest.raises(DataError, match=message):
        load_training_data(str(f))
