"""Fixtures for the training-side tests: a tiny random BERT (built with transformers, tiny vocab written here)
and a tiny STS set, so every test runs real components in seconds."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

WORDS = (
    "the a an is are was how what why who when where do does can i you we to of in on for and or not "
    "python learn quickly best way invest money india sky blue sea green grass man woman playing guitar "
    "question answer good great dog cat runs sleeps eats food car drives road child rides horse"
).split()

SENTENCES = [
    "a man is playing a guitar",
    "a woman is playing a guitar",
    "the dog runs on the grass",
    "a cat sleeps on the road",
    "how do i learn python quickly",
    "what is the best way to invest money",
    "why is the sky blue",
    "the sea is green",
    "a child rides a horse",
    "a man drives a car",
    "the cat eats food",
    "where can i invest money in india",
    "who is playing the guitar",
    "the dog sleeps",
    "a woman rides a horse on the road",
    "is the grass green",
]


def make_tiny_bert(folder: Path, layers: int = 3, hidden: int = 32, seed: int = 0) -> Path:
    import torch
    from tokenizers import BertWordPieceTokenizer
    from transformers import BertConfig, BertModel, BertTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, *"abcdefghijklmnopqrstuvwxyz0123456789.,?!'"]
    (folder / "vocab.txt").write_text("\n".join(dict.fromkeys(vocab)) + "\n")
    # built from a `tokenizers` WordPiece model: `BertTokenizerFast(vocab_file=...)` ignores the file under
    # transformers 5 (a 5-token vocabulary: every word [UNK], so texts of one length encoded alike)
    wordpiece = BertWordPieceTokenizer(str(folder / "vocab.txt"), lowercase=True)
    tokenizer = BertTokenizerFast(tokenizer_object=wordpiece._tokenizer, unk_token="[UNK]", pad_token="[PAD]",
                                  cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]", model_max_length=64,
                                  do_lower_case=True)
    assert tokenizer.unk_token_id not in tokenizer("how do i learn python")["input_ids"]
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=2,
        intermediate_size=hidden * 2,
        max_position_embeddings=64,
    )
    BertModel(config).eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


def tiny_sts():
    """A small STS set over the test vocabulary (scores invented but fixed), for dev evaluation in tests."""
    from models.sts import StsSet

    sts = StsSet("tiny-dev")
    for i in range(0, len(SENTENCES) - 1):
        sts.add(SENTENCES[i], SENTENCES[i + 1], float((i * 7) % 5))
    return sts


def shared_data() -> Path:
    from models.data import data_dir

    root = data_dir()
    if not (root / "sts").is_dir():
        pytest.skip(f"shared data not found at {root} (set STRATA_DATA_DIR to the shared data folder)")
    return root
