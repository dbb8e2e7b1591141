"""``tokmaint bench zip2zip``: what LZW hypertokens save on a corpus and what they cost a model.

The corpus's documents are encoded with the tokenizer, concatenated and cut into contexts of
``context`` base tokens (or a document each, ``--context 0``); LZW runs over each context with
every ``--max-merge`` asked for. Token figures: base tokens, codes after LZW (``hypertokens``),
``reduction`` (1 − codes/tokens), bytes a token before and after, and LZW's encode + decode
speed against the tokenizer's encode of the same text. The hypertokens formed in the most
contexts are listed, with whether each is a token already: runs the stream merges again and
again are candidates for Ted-Tok's permanent merges. Model figures: a tiny GPT-2 is trained
here on the oldest ``train_share`` of the contexts, then fine-tuned ``finetune_steps`` more,
once on base tokens and once with hypertokens (``trainer.zip2zip``); both are scored in bits per
byte on the rest, each code's −log2 q over the bytes it stands for.

    report = run_zip2zip_bench("corpus.jsonl.gz", "tokenizer.json", Zip2zipBenchSettings(), max_merges=[3])
"""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any, Literal

import torch
from transformers import GPT2LMHeadModel

from tokenizer_service.corpus import oldest, read_corpus
from tokenizer_service.errors import CorpusError
from tokenizer_service.hub_files import bos_token_id
from tokenizer_service.lzw import LZW, contexts, merge_signal
from tokenizer_service.settings import Number, SettingsConfigDict, setting, whole
from tokenizer_service.validation import load_tokenizer
from trainer.loop import tiny_gpt2_config
from trainer.config import CAUSAL_LM_LOSS, TinyModelBenchSettings
from trainer.zip2zip import Zip2zipLM, bits_per_byte, byte_lengths, finetune


class Zip2zipBenchSettings(TinyModelBenchSettings):
    model_config = SettingsConfigDict(env_prefix="TOKMAINT_BENCH_ZIP2ZIP_")

    context: int = setting(1024, whole(0), "base tokens a context (0: a document each)")
    max_mb: float = setting(1.0, Number(float, low=0, low_open=True), "megabytes of the corpus to read (its oldest)")
    train_batch: int = setting(4, whole(1), "contexts a step")
    train_steps: int = setting(150, whole(1), "the base model's training steps, on base tokens")
    finetune_steps: int = setting(100, whole(0), "steps of each fine-tuning, with and without hypertokens")
    # The paper's hyper-encoder: one or two transformer layers, or mean pooling (no parameters).
    layers: Literal[0, 1, 2] = setting(1, None, "the hyper-encoder's transformer layers (0: mean pooling)")
    eval_contexts: int = setting(16, whole(1), "held-out contexts scored")
    top_hypertokens: int = setting(
        20, whole(0), "hypertokens formed in the most contexts, listed (a merge signal) with whether each is a token"
    )


def run_zip2zip_bench(
    corpus: str | Path,
    tokenizer_path: str | Path,
    settings: Zip2zipBenchSettings | None = None,
    *,
    max_merges: list[int] | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    from tqdm import tqdm

    settings = settings or Zip2zipBenchSettings()
    max_merges = max_merges or [3]
    started = time.perf_counter()
    tokenizer = load_tokenizer(tokenizer_path)
    texts = [d.text for d in oldest(read_corpus(corpus, progress=progress), settings.max_mb)]
    encoding = time.perf_counter()
    ids = tokenizer.encode_batch(texts)
    encode_seconds = time.perf_counter() - encoding
    token_bytes = byte_lengths(tokenizer)
    windows = contexts(ids, context=settings.context)
    n_tokens = sum(map(len, windows))
    n_bytes = sum(token_bytes[i] for w in windows for i in w)
    cut = max(1, round(settings.train_share * len(windows)))
    train, held_out = windows[:cut], windows[cut:][: settings.eval_contexts]
    if not held_out:
        raise CorpusError(
            Path(corpus),
            f"{len(windows)} contexts of {settings.context} tokens in --max-mb "
            f"{settings.max_mb}: none left to score after --train-share",
        )

    bos = bos_token_id(tokenizer)
    rows = tokenizer.id_space + (bos is None)  # a row of its own to start texts from when the version has none
    longest = max(map(len, windows)) + 1
    torch.manual_seed(settings.seed)
    gpt = GPT2LMHeadModel(
        tiny_gpt2_config(rows, n_positions=max(256, longest), resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    )
    gpt.loss_type = CAUSAL_LM_LOSS
    base = Zip2zipLM(gpt, max_merge=1, bos_token_id=rows - 1 if bos is None else bos)
    trained = time.perf_counter()
    finetune(base, train, steps=settings.train_steps, batch=settings.train_batch, lr=settings.lr)
    plain = copy.deepcopy(base)
    finetune(plain, train, steps=settings.finetune_steps, batch=settings.train_batch, lr=settings.lr)
    base_bits = bits_per_byte(plain, held_out, token_bytes)["bits_per_byte"]

    runs = []
    for max_merge in tqdm(max_merges, disable=not progress, unit="M", desc="zip2zip"):
        lzw = LZW(base_size=rows, max_merge=max_merge)
        timing = time.perf_counter()
        encoded = [lzw.encode(w) for w in windows]
        decoded = [lzw.decode(e) for e in encoded]
        lzw_seconds = time.perf_counter() - timing
        if decoded != windows:
            raise AssertionError("LZW did not decode to the base tokens")  # a bug, never an input's fault
        codes = sum(map(len, encoded))
        hyper = Zip2zipLM(
            copy.deepcopy(base.base), max_merge=max_merge, layers=settings.layers, bos_token_id=base.bos_token_id
        )
        finetune(hyper, train, steps=settings.finetune_steps, batch=settings.train_batch, lr=settings.lr)
        runs.append(
            {
                "max_merge": max_merge,
                "tokens": n_tokens,
                "hypertokens": codes,
                "reduction": 1 - codes / n_tokens,
                "bytes_per_token": {"base": n_bytes / n_tokens, "zip2zip": n_bytes / codes},
                "bits_per_byte": {
                    "base": base_bits,
                    "zip2zip": bits_per_byte(hyper, held_out, token_bytes)["bits_per_byte"],
                },
                "lzw_seconds": lzw_seconds,
                "lzw_vs_encode": encode_seconds / lzw_seconds,
            }
        )
    first = runs[0]
    # The merge signal: runs LZW forms again and again across the contexts (at the first M).
    signal = merge_signal(tokenizer, windows, max_merge=first["max_merge"], top=settings.top_hypertokens)
    return {
        **{k: first[k] for k in ("tokens", "hypertokens", "reduction", "bytes_per_token", "bits_per_byte")},
        "max_merge": first["max_merge"],
        "context": settings.context,
        "contexts": len(windows),
        "encode_seconds": encode_seconds,
        "lzw_seconds": first["lzw_seconds"],
        "lzw_vs_encode": first["lzw_vs_encode"],
        "train_seconds": time.perf_counter() - trained,
        "top_hypertokens": signal["hypertokens"],
        "top_hypertokens_are_tokens": signal["already_tokens"],
        "runs": runs,
        "seconds": time.perf_counter() - started,
    }
