"""Tiny language models for the tests: the trainer's own GPT-2 configuration, smaller, and a Llama."""

import torch
from transformers import GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

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


def tiny_llama(vocab_size: int, *, seed: int | None = 0, **config) -> LlamaForCausalLM:
    """A Llama of one layer, two heads (two key-value heads), width 16, an MLP of 32 and 64
    positions, its input and output embeddings untied (GPT-2's are tied): ``config``, other values;
    its weights drawn after ``torch.manual_seed(seed)`` (None: not seeded).

    >>> model = tiny_llama(10, num_hidden_layers=2)
    >>> model.lm_head.weight.shape, len(model.model.layers)
    (torch.Size([10, 16]), 2)
    """
    if seed is not None:
        torch.manual_seed(seed)
    sizes = {
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "hidden_size": 16,
        "intermediate_size": 32,
        "max_position_embeddings": 64,
        "tie_word_embeddings": False,
    }
    return LlamaForCausalLM(LlamaConfig(vocab_size=vocab_size, **{**sizes, **config}))
