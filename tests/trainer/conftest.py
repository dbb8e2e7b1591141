"""Fixtures the trainer's test modules share."""

import pytest
import torch
from transformers import GPT2LMHeadModel

from tokenizer_service.bpe import BPETokenizer

TEXTS = ["the theme then 12 123 1234", "héllo hé hélène", "日本 日本語 本", "a  b   c", "don't it's we've"] * 4


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A trainer checkpoint of a tiny GPT-2 whose version has <|endoftext|> to start texts from."""
    from trainer.checkpoint import TokenizerStamp, save_checkpoint
    from trainer.loop import tiny_gpt2_config

    tokenizer = BPETokenizer.train(TEXTS, vocab_size=300, special_tokens=["<|endoftext|>"])
    torch.manual_seed(1)
    gpt = GPT2LMHeadModel(tiny_gpt2_config(tokenizer.id_space, n_embd=32))
    path = tmp_path_factory.mktemp("ckpt") / "checkpoint.pt"
    save_checkpoint(
        path,
        model=gpt,
        optimizer=torch.optim.AdamW(gpt.parameters()),
        tokenizer=TokenizerStamp("demo", 3, tokenizer.sha256),
        position={"step": 0},
        tokenizer_json=tokenizer.to_json(),
    )
    return path, gpt, tokenizer
