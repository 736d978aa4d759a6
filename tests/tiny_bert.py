"""A tiny random BERT checkpoint (Hugging Face format) for fast, real export tests."""

from __future__ import annotations

from pathlib import Path

WORDS = ("the a an is are was how what why who when where do does can i you we to of in on for and or not "
         "python learn quickly best way invest money india sky blue sea green grass man playing guitar "
         "question answer good great geologist be should").split()


def make_tiny_bert(folder: Path, *, layers: int = 2, hidden: int = 32, seed: int = 0) -> Path:
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, *[f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz"],
             *"abcdefghijklmnopqrstuvwxyz0123456789.,?!'"]
    (folder / "vocab.txt").write_text("\n".join(dict.fromkeys(vocab)) + "\n")
    tokenizer = BertTokenizerFast(vocab_file=str(folder / "vocab.txt"), do_lower_case=True, model_max_length=64)
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=hidden, num_hidden_layers=layers,
                        num_attention_heads=2, intermediate_size=hidden * 2, max_position_embeddings=64)
    BertModel(config).eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
