"""Tiny language models for the tests: the trainer's own GPT-2 configuration, smaller."""

import torch
from transformers import GPT2LMHeadModel

from trainer.loop import tiny_gpt2_config


def tiny_model(vocab_size: int, *, seed: int | None = 0, **config) -> GPT2LMHeadModel:
    """A GPT-2 of one layer, two heads, width 16 and 64 positions, its bos and eos id 0
    (``config``: other values), its weights drawn after ``torch.manual_seed(seed)`` (None: not
    seeded).

    >>> tiny_model(10, n_embd=8).transformer.wte.weight.shape
    torch.Size([10, 8])
    """
    if seed is not None:
        torch.manual_seed(seed)
    sizes = {"n_layer": 1, "n_embd": 16, "n_positions": 64, "bos_token_id": 0, "eos_token_id": 0}
    return GPT2LMHeadModel(tiny_gpt2_config(vocab_size, **{**sizes, **config}))
