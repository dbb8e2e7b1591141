"""``tokmaint bench bytelevel``: ByteSampler's Tables 3-5 at our scale, with a small model trained
here on the oldest ``train_share`` of a corpus and scored on random substrings of the rest (most
of which start and end inside a word).

For each substring, its first ``prefix_bytes`` bytes (whole characters) are the prompt and the
next character the target:

* ``tokens_per_prefix``: the positions the model evaluates to score the prompt exactly
  (``bytesampler``: the inner nodes of its Valid Covering Tree) against its plain tokenization's
  length (``plain``) — the paper's Table 3 (24.24 against 23.51, +3.1%).
* ``next_char_accuracy`` (Table 5): the most likely next character by byte-level conditioning
  (greedy bytes until a character is whole) against naive tokenization of the prompt (the most
  likely next token's first character, the prompt tokenised as it stands).
* ``bits_per_char`` (Table 4): −log2 of the target's probability: byte-level (P(prompt·c) /
  P(prompt)) and naive (the tokens that begin with c, after the prompt tokenised as it stands);
  ``plain``: the model's own loss of the canonical token that holds the target, at the token
  boundary before it, over that token's characters (the paper divides by the corpus's mean
  characters a token instead; a random position falls in long tokens more often, which that
  conversion does not undo).

    report = run_bytelevel_bench("data/git-commits-sample.jsonl.gz", BytelevelBenchSettings())
"""

from __future__ import annotations

import math
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.corpus import oldest, read_corpus
from tokenizer_service.errors import CorpusError
from tokenizer_service.hub_files import BOS_TOKENS
from tokenizer_service.settings import SettingsConfigDict, setting, whole
from trainer.byte_level import LN2, ByteLevelModel, fit_text
from trainer.lifelong import SAMPLE, TinyModel
from trainer.config import TinyModelBenchSettings


class BytelevelBenchSettings(TinyModelBenchSettings):
    model_config = SettingsConfigDict(env_prefix="TOKMAINT_BENCH_BYTELEVEL_")

    vocab_size: int = setting(1024, whole(258, 1 << 16), "vocabulary of the tokenizer trained on them")
    epochs: int = setting(2, whole(1), "passes of the model over its documents")
    seq_len: int = setting(128, whole(2), "tokens per document, at most, in training")
    samples: int = setting(200, whole(1), "random substrings of the held-out documents scored")
    prefix_bytes: int = setting(100, whole(1), "bytes of each substring's prompt, whole characters (the paper's 100)")


def _greedy_char(model: ByteLevelModel, prompt: bytes) -> str:
    """The most likely next character after ``prompt``: the most likely byte, and after a UTF-8
    lead byte the most likely ones that complete it."""
    out = b""
    for _ in range(4):
        out += bytes([int(np.argmax(model.next_byte(prompt + out)))])
        try:
            return out.decode("utf-8")
        except UnicodeDecodeError:
            continue
    return out.decode("utf-8", errors="replace")


@torch.no_grad()
def _token_log_probs(model: ByteLevelModel, ids: list[int]) -> np.ndarray:
    """The model's next-token ln p after ``[bos] + ids``."""
    device = next(model.model.parameters()).device
    logits = model.model(input_ids=torch.tensor([[model.bos_token_id, *ids]], device=device)).logits[0, -1].double()
    return torch.log_softmax(logits, dim=-1).cpu().numpy()


def _naive(model: ByteLevelModel, prompt: str, target: str) -> tuple[str, float]:
    """Naive tokenization of the prompt: the next token's first character, greedily, and ln of the
    probability of the tokens that begin with ``target``."""
    vocab = model.vocab
    log_probs = _token_log_probs(model, vocab.tokenizer.encode(prompt))
    best = vocab.token_bytes.get(int(np.argmax(log_probs)), b"")
    predicted = best.decode("utf-8", errors="ignore")[:1]
    starting = [t for t in vocab.starting_with(target.encode("utf-8")) if t < len(log_probs)]
    return predicted, float(np.logaddexp.reduce(log_probs[starting])) if starting else -math.inf


def _plain(model: ByteLevelModel, text: str, prompt_bytes: int) -> float:
    """The token-level figure: ln p of the canonical token that holds the prompt's next character,
    after the tokens before it, over that token's characters. A random character falls in a token
    as often as the token is long, so the mean of this over random positions is the model's ln p
    a character of the text, as the byte-level figure's mean is."""
    ids = model.vocab.tokenizer.encode(text)
    ends = np.cumsum([len(model.vocab.token_bytes[i]) for i in ids])
    j = int(np.searchsorted(ends, prompt_bytes, side="right"))  # tokens that end within the prompt
    chars = len(model.vocab.token_bytes[ids[j]].decode("utf-8", errors="ignore")) or 1
    return float(_token_log_probs(model, ids[:j])[ids[j]]) / chars


def _draw(rng: random.Random, texts: list[str], prefix_bytes: int, model: ByteLevelModel) -> tuple[str, int, str, str]:
    """A random substring: its text, where it starts (a character), the prompt (the longest run
    of whole characters within ``prefix_bytes`` bytes) and the character after it; drawn again
    while it does not fit the model's context with a character to spare."""
    while True:
        text = rng.choice(texts)
        start = rng.randrange(len(text))
        sizes = np.cumsum([len(c.encode("utf-8")) for c in text[start : start + prefix_bytes + 1]])
        chars = int(np.searchsorted(sizes, prefix_bytes, side="right"))  # whole characters within the bytes
        if start + chars < len(text):
            prompt, target = text[start : start + chars], text[start + chars]
            if fit_text([model], text[start : start + chars + 8]) == text[start : start + chars + 8]:
                return text, start, prompt, target


def run_bytelevel_bench(
    corpus: str | Path | None = None, settings: BytelevelBenchSettings | None = None, *, progress: bool = False
) -> dict[str, Any]:
    from tqdm import tqdm

    settings = settings or BytelevelBenchSettings()
    started = time.perf_counter()
    path = Path(corpus) if corpus else SAMPLE
    docs = oldest(read_corpus(path, progress=progress), settings.max_mb)
    cut = round(settings.train_share * len(docs))
    train, held_out = [d.text for d in docs[:cut]], [d.text for d in docs[cut:]]
    long_enough = [t for t in held_out if len(t.encode("utf-8")) > settings.prefix_bytes + 4]
    if not train or not long_enough:
        raise CorpusError(
            path,
            f"no held-out document of more than {settings.prefix_bytes + 4} bytes in "
            f"--max-mb {settings.max_mb} with --train-share {settings.train_share}",
        )
    tokenizer = BPETokenizer.train(train, vocab_size=settings.vocab_size, special_tokens=[BOS_TOKENS[0]])
    tiny = TinyModel(tokenizer, lr=settings.lr, seed=settings.seed)
    batches = [train[k : k + settings.train_batch] for k in range(0, len(train), settings.train_batch)]
    trained = time.perf_counter()
    for texts in tqdm(batches * settings.epochs, disable=not progress, unit="step", desc="training"):
        tiny.step(texts, settings.seq_len)
    train_seconds = time.perf_counter() - trained
    model = tiny.byte_model()
    model.model.eval()

    rng = random.Random(settings.seed)
    tokens = {"bytesampler": 0, "plain": 0}
    correct = {"bytesampler": 0, "naive": 0}
    log_probs = {"bytesampler": 0.0, "naive": 0.0, "plain": 0.0}
    for _ in tqdm(range(settings.samples), disable=not progress, unit="prefix", desc="scoring"):
        text, start, prompt, target = _draw(rng, long_enough, settings.prefix_bytes, model)
        before = model.prefix(prompt)
        tokens["bytesampler"] += before.model_tokens
        tokens["plain"] += len(tokenizer.encode(prompt))
        log_probs["bytesampler"] += model.prefix(prompt + target).log_prob - before.log_prob
        correct["bytesampler"] += _greedy_char(model, prompt.encode("utf-8")) == target
        predicted, log_p = _naive(model, prompt, target)
        correct["naive"] += predicted == target
        log_probs["naive"] += log_p
        log_probs["plain"] += _plain(model, text[start : start + len(prompt) + 64], len(prompt.encode("utf-8")))
    n = settings.samples
    per_prefix = {name: count / n for name, count in tokens.items()}
    return {
        "tokens_per_prefix": per_prefix,
        "overhead": per_prefix["bytesampler"] / per_prefix["plain"] - 1,
        "next_char_accuracy": {name: count / n for name, count in correct.items()},
        "bits_per_char": {
            "bytesampler": -log_probs["bytesampler"] / LN2 / n,
            "naive": -log_probs["naive"] / LN2 / n,
            "plain": -log_probs["plain"] / LN2 / n,
        },
        "samples": n,
        "vocab_size": len(tokenizer),
        "train_documents": len(train),
        "train_seconds": train_seconds,
        "seconds": time.perf_counter() - started,
    }
