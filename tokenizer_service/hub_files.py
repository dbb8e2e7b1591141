"""The files a Hugging Face tokenizer folder holds beside ``tokenizer.json``, made from a version:
``tokenizer_config.json`` (the fast tokenizer class, the special tokens, the longest input) and
``special_tokens_map.json``. ``tokmaint trainer export`` writes them into a model folder, and
the registry serves them for every version (``registry.api.routes.hub``), so that
``AutoTokenizer.from_pretrained`` loads a version as it is.

>>> tok = BPETokenizer.train(["ab ab"], vocab_size=258, special_tokens=["<|endoftext|>"])
>>> tokenizer_config(tok, model_max_length=1024)["bos_token"], special_tokens_map(tok)
('<|endoftext|>', {'bos_token': '<|endoftext|>', 'eos_token': '<|endoftext|>'})
"""

from __future__ import annotations

from typing import Any

from tokenizer_service.bpe import BPETokenizer

# The special tokens a text starts from, in the order they are preferred (GPT-2, Llama-3, Llama-2,
# Gemma): the first of a version's special tokens found here is its bos.
BOS_TOKENS = ("<|endoftext|>", "<|begin_of_text|>", "<s>", "<bos>", "<|bos|>")
# What transformers itself takes for "no limit" when a folder names no model_max_length.
NO_LENGTH_LIMIT = int(1e30)


def _special_ids(tokenizer: BPETokenizer) -> dict[str, int]:
    """The special tokens' ids, from the added tokens: a family may hold them outside the model's
    vocabulary (Qwen's ``<|endoftext|>``)."""
    return {t["content"]: t["id"] for t in tokenizer.pipeline.get("added_tokens", []) if t.get("special")}


def bos_token_id(tokenizer: BPETokenizer) -> int | None:
    """The id a model of this version starts its text from: its special token that begins (or
    ends) texts, None when it has none.

    >>> bos_token_id(BPETokenizer.train(["ab"], vocab_size=258, special_tokens=["<|endoftext|>"]))
    0
    >>> bos_token_id(BPETokenizer.train(["ab"], vocab_size=258)) is None
    True
    """
    ids = _special_ids(tokenizer)
    return next((ids[t] for t in BOS_TOKENS if t in ids), None)


def special_tokens_map(tokenizer: BPETokenizer, *, bos_id: int | None = None) -> dict[str, str]:
    """The bos and eos (one token, as GPT-2's ``<|endoftext|>``): the token at ``bos_id``, or the
    version's own (:func:`bos_token_id`); empty when there is none."""
    bos_id = bos_token_id(tokenizer) if bos_id is None else bos_id
    by_id = {i: t for t, i in _special_ids(tokenizer).items()}
    special = by_id.get(bos_id, tokenizer.id_to_token.get(bos_id)) if bos_id is not None else None  # none: a hole
    return {"bos_token": special, "eos_token": special} if special else {}


def tokenizer_config(
    tokenizer: BPETokenizer, *, model_max_length: int | None = None, bos_id: int | None = None
) -> dict[str, Any]:
    """``tokenizer_config.json``: the fast tokenizer over ``tokenizer.json`` as it is (no clean-up
    of spaces: decoding gives the text back), its special tokens, and the longest input
    (``model_max_length``; transformers' "no limit" when None)."""
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": NO_LENGTH_LIMIT if model_max_length is None else model_max_length,
        "clean_up_tokenization_spaces": False,
        **special_tokens_map(tokenizer, bos_id=bos_id),
    }
