"""Ted-Tok Table 2, SA column: the synthetic arithmetic drift, reproduced by running Ted-Tok.

Old data (appendix B): every "A+B=C" and every non-negative "A-B=C" with A, B in [0, 50]
(3,927 examples); New: the same with A, B in [0, 200] (60,702; 2,000 held out for evaluation).
Character base, vocabulary size 50, no pre-tokenizer (an example is one word). The stream is the
paper's training schedule: 1,000 epochs of Old then 1,000 epochs of New in batches of 4,096,
one Ted-Tok time step per batch; warmup 10%, Δ=300, α=0.3, β=1.2, no revisions in the last 20%.

Bytes per token follow the paper's convention: each held-out example counts one end-of-example
delimiter (one byte, one token), as the sequences a model trains on do; New then scores 1.366 on
the full set, Table 2's value. The bare ratio of "A+B=C" bytes to tokens is reported beside it.

>>> arithmetic_dataset(1)
['0+0=0', '0+1=1', '1+0=1', '1+1=2', '0-0=0', '1-0=1', '1-1=0']
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from tqdm import tqdm

from tokenizer_service.bpe import BPETokenizer, jaccard_distance
from tokenizer_service.counting import WordVocabulary
from tokenizer_service.settings import Number, Settings, SettingsConfigDict, setting, share, whole
from tokenizer_service.tedtok import TedTok, TedTokConfig
from tokenizer_service.tokenizer_json import MAX_ID_SPACE

PAPER = {
    "bytes_per_token": {"old": 1.216, "new": 1.366, "tedtok": 1.359},
    "jaccard": {"old_vs_new": 0.7013, "tedtok_vs_new": 0.2456},
}


def arithmetic_dataset(max_operand: int) -> list[str]:
    """All sums and all non-negative differences of operands in [0, max_operand]."""
    sums = [f"{a}+{b}={a + b}" for a in range(max_operand + 1) for b in range(max_operand + 1)]
    diffs = [f"{a}-{b}={a - b}" for a in range(max_operand + 1) for b in range(a + 1)]
    return sums + diffs


NEW_EXAMPLES = len(arithmetic_dataset(200))


def split_new(rng: np.random.Generator, held_out: int) -> tuple[list[str], list[str]]:
    """New's examples as (training, held out), ``held_out`` of them drawn by ``rng``.

    >>> train, held = split_new(np.random.default_rng(0), 2)
    >>> len(train) + len(held) == NEW_EXAMPLES, len(held)
    (True, 2)
    """
    new_all = arithmetic_dataset(200)
    chosen = set(rng.choice(len(new_all), held_out, replace=False).tolist())
    return [x for i, x in enumerate(new_all) if i not in chosen], [new_all[i] for i in sorted(chosen)]


class ArithmeticSettings(Settings):
    model_config = SettingsConfigDict(env_prefix="TOKMAINT_BENCH_ARITHMETIC_")

    vocab_size: int = setting(50, whole(1, MAX_ID_SPACE), "vocabulary size of Old, New and Ted-Tok")
    batch: int = setting(4096, whole(1), "examples per time step (the paper's training batch)")
    epochs: int = setting(1000, whole(1), "epochs over Old, then as many over New")
    validation: int = setting(2000, whole(1, NEW_EXAMPLES - 1), "New examples held out for evaluation")
    alpha: float = setting(0.3, share(one=False), "EMA smoothing factor α")
    beta: float = setting(1.2, Number(float, low=0, low_open=True), "margin β: add when τ_pair > β·τ_token[sink]")
    interval: int = setting(300, whole(1), "steps between revisions (Δ)")
    warmup: float = setting(0.1, share(zero=True, one=False), "share of steps before the first revision")
    freeze_last: float = setting(0.2, share(zero=True, one=False), "share of final steps without revisions")
    batch_size: int = setting(1, whole(1), "adds+deletes per revision (K)")
    seed: int = setting(0, whole(0), "seed of the held-out split and the batch order")

    def tedtok_config(self, total_steps: int) -> TedTokConfig:
        """Ted-Tok's configuration for a schedule of ``total_steps`` time steps: these settings'
        EMA, margin, interval and revision size, warm-up and freeze as shares of the steps (its
        keywords by the same names).

        >>> ArithmeticSettings(interval=5).tedtok_config(100).warmup_steps
        10
        """
        return TedTokConfig.for_schedule(
            total_steps, **self.model_dump(include={"alpha", "beta", "interval", "batch_size", "warmup", "freeze_last"})
        )


def run_arithmetic(settings: ArithmeticSettings | None = None, *, progress: bool = True) -> dict[str, Any]:
    """Run the SA reproduction and return the benchmark's JSON-ready result."""
    settings = settings or ArithmeticSettings()
    rng = np.random.default_rng(settings.seed)
    old_data = arithmetic_dataset(50)
    new_train, new_eval = split_new(rng, settings.validation)

    train: dict[str, Any] = dict(vocab_size=settings.vocab_size, byte_level=False)
    old = BPETokenizer.train(old_data, **train)
    new = BPETokenizer.train(new_train, **train)

    words = WordVocabulary()
    old_ids, new_ids = words.ids(old_data), words.ids(new_train)
    schedule = [(old_ids, -(-len(old_ids) // settings.batch)), (new_ids, -(-len(new_ids) // settings.batch))]
    total = sum(settings.epochs * steps for _, steps in schedule)
    config = settings.tedtok_config(total)
    tedtok = TedTok(old, config=config, words=words, lineage="arithmetic")
    started = time.perf_counter()
    with tqdm(total=total, desc="ted-tok SA", unit="step", disable=not progress) as bar:
        for ids, _ in schedule:
            for _ in range(settings.epochs):
                order = rng.permutation(ids)
                for start in range(0, len(order), settings.batch):
                    batch = order[start : start + settings.batch]
                    tedtok.observe_words(batch, np.ones(len(batch)))
                    bar.update()
                    if bar.n % 500 == 0:
                        assert tedtok.last_counts is not None  # observe_words has just counted this step
                        bar.set_postfix(bpt=f"{tedtok.last_counts.bytes_per_token:.3f}", version=tedtok.version)
    evolved = tedtok.tokenizer
    tokenizers = (("old", old), ("new", new), ("tedtok", evolved))
    return {
        "bytes_per_token": {name: tok.bytes_per_token(new_eval, delimited=True) for name, tok in tokenizers},
        "bytes_per_token_bare": {name: tok.bytes_per_token(new_eval) for name, tok in tokenizers},
        "convention": "bytes_per_token counts one end-of-example delimiter per example (one byte, one token), as "
        "the paper's training sequences; bytes_per_token_bare divides the bare 'A+B=C' bytes",
        "jaccard": {"old_vs_new": jaccard_distance(old, new), "tedtok_vs_new": jaccard_distance(evolved, new)},
        "revisions": len(tedtok.revisions),
        "steps": total,
        "seconds": time.perf_counter() - started,
        "paper": PAPER,
    }
