"""The trainer's settings, free of torch and transformers: the command line reads them to build
its options without importing either (environment: ``TOKMAINT_TRAINER_*``, and the benchmarks'
``TOKMAINT_BENCH_APPLY_*`` and ``TOKMAINT_BENCH_ARITHMETIC_TRAIN_*``).

>>> TrainerSettings().strategy, ApplyBenchSettings().changes
('parents_mean', 100)
"""

from __future__ import annotations

from typing import Literal, Self, get_args

from pydantic import model_validator

from tokenizer_service.bench.arithmetic import ArithmeticSettings
from tokenizer_service.settings import Number, Settings, SettingsConfigDict, setting, share, whole

Strategy = Literal["parents_mean", "subtoken_mean", "hyper"]
STRATEGIES: tuple[str, ...] = get_args(Strategy)
# transformers picks a model's loss by its class name, and GPT2LMHeadModel's names none: it warns
# at the first step of every run, then uses this one (set on the model, no warning).
CAUSAL_LM_LOSS = "ForCausalLM"
# A learning rate: Adam moves each weight by about the rate a step, so past 1 a model does not
# train, it diverges (1e308 turned every loss to NaN without a word).
LEARNING_RATE = Number(float, low=0, high=1, low_open=True)


# The new rows' warm-up after a revision (trainer.new_rows): LineageFollower's defaults and the settings'.
# Five steps on 512 texts cost half of twenty on 256, and after bench lifelong's first revisions
# measured as well or better (docs/benchmarks.md, Lifelong).
WARM_STEPS, WARM_DOCS, WARM_LR = 5, 512, 1.2e-2
# ...and no more of it than this share of the training since the version before, counted in
# training steps (trainer.new_rows.warm_shape): a revision then costs the training it interrupts
# at most 2%, whatever the cadence (5 steps on 512 texts cost 68% of bench distributed's training).
REVISION_BUDGET = 0.02


class NewRowWarmUpSettings(Settings):
    """How a revision's new rows warm up alone before the model trains on (``trainer.new_rows``)."""

    warm_steps: int = setting(
        WARM_STEPS,
        whole(0),
        "steps a version's new rows train alone on the last batches before the model trains on (0: none)",
    )
    warm_docs: int = setting(WARM_DOCS, whole(1), "documents of the last batches the new rows warm up on")
    warm_lr: float = setting(WARM_LR, LEARNING_RATE, "the new rows' learning rate in their warm-up")
    revision_budget: float = setting(
        REVISION_BUDGET,
        Number(float, low=0),
        "share of the training steps since the version before that a version's warm-up may cost "
        "(0: none); it takes fewer steps and texts than --warm-steps and --warm-docs to fit",
    )


class TrainerSettings(NewRowWarmUpSettings):
    model_config = SettingsConfigDict(env_prefix="TOKMAINT_TRAINER_")

    batch_size: int = setting(8, whole(1), "documents per batch")
    seq_len: int = setting(64, whole(2), "tokens per document, at most (the rest is cut)")
    lr: float = setting(1e-3, LEARNING_RATE, "AdamW's learning rate")
    strategy: Strategy = setting("parents_mean", None, f"how new rows start: {', '.join(STRATEGIES)}")
    checkpoint_every: int = setting(100, whole(1), "steps between checkpoints (with --checkpoint-dir)")
    eval_every: int = setting(
        100, whole(0), "steps between evaluations of bits per byte on the held-out texts (and one at the end; 0: none)"
    )
    eval_docs: int = setting(
        16, whole(0), "held-out documents: the corpus's newest, kept out of training (or the first of --eval-data)"
    )
    eval_bytes: int = setting(256, whole(1), "bytes of each held-out document scored, at most (its start)")
    retry_steps: int = setting(20, whole(1), "steps before a refused version is tried again")
    seed: int = setting(0, whole(0), "the model's initial weights")


class Zip2zipSettings(Settings):
    """``tokmaint trainer zip2zip``: a model fine-tuned on a corpus's LZW-compressed contexts."""

    model_config = SettingsConfigDict(env_prefix="TOKMAINT_ZIP2ZIP_")

    max_merge: int = setting(3, whole(1, 64), "most base tokens a hypertoken (M; the paper's best trade-off: 3)")
    layers: Literal[0, 1, 2] = setting(1, None, "the hyper-encoder's transformer layers (0: mean pooling)")
    context: int | None = setting(
        None,
        whole(0),
        "base tokens a context, cut from the documents' ids concatenated "
        "(0: a document each; default: what the model reads, its "
        "positions less the one its text starts from)",
    )
    steps: int = setting(100, whole(1), "fine-tuning steps")
    batch: int = setting(4, whole(1), "contexts a step")
    lr: float = setting(3e-3, LEARNING_RATE, "AdamW's learning rate")
    max_mb: float | None = setting(
        None, Number(float, low=0, low_open=True), "megabytes of the corpus to read, its oldest (default: all of it)"
    )
    seed: int = setting(0, whole(0), "the hyper-encoder's initial weights")


class TinyModelBenchSettings(Settings):
    """What the benchmarks that train a tiny model here share: the corpus they read, the split
    and the training (each benchmark's own prefix names its variables)."""

    max_mb: float = setting(2.0, Number(float, low=0, low_open=True), "megabytes of the corpus to read (its oldest)")
    train_share: float = setting(0.8, share(one=False), "share of it (the oldest) the model trains on")
    train_batch: int = setting(16, whole(1), "documents (or contexts) a step")
    lr: float = setting(3e-3, LEARNING_RATE, "AdamW's learning rate")
    seed: int = setting(0, whole(0), "the model's weights (and what is drawn)")


class ApplyBenchSettings(Settings):
    model_config = SettingsConfigDict(env_prefix="TOKMAINT_BENCH_APPLY_")

    changes: int = setting(100, whole(1), "ids the revision changes (K)")
    repeats: int = setting(5, whole(1), "timed applications (the median is reported)")
    vocab_size: int = setting(50257, whole(3), "the model's vocabulary (GPT-2's)")

    @model_validator(mode="after")
    def _parents_left(self) -> Self:
        if self.changes > self.vocab_size - 2:
            raise ValueError(
                f"changes must leave two ids for parents: at most {self.vocab_size - 2}, got {self.changes}"
            )
        return self


class DistributedBenchSettings(Settings):
    model_config = SettingsConfigDict(env_prefix="TOKMAINT_BENCH_DISTRIBUTED_")

    ranks: int = setting(2, whole(1), "processes of one DistributedDataParallel job (gloo on CPU, NCCL on GPUs)")
    device: Literal["cpu", "cuda"] = setting("cpu", None, "where each rank trains (cuda: one GPU a rank)")
    steps: int = setting(300, whole(2), "optimizer steps of each model (the following one and the other)")
    block: int = setting(25, whole(1), "steps of one model before the other's (the two alternate)")
    versions: int = setting(3, whole(1), "versions published while the ranks train")
    batch_size: int = setting(8, whole(1), "documents a rank's batch")
    seq_len: int = setting(128, whole(2), "tokens a document, at most")
    vocab_size: int = setting(400, whole(300), "the first version's vocabulary")
    room: int = setting(256, whole(0), "embedding rows for new ids in both models (past them the following one grows)")
    seed: int = setting(0, whole(0), "the models' initial weights")
    timeout: float = setting(600.0, Number(float, low=0, low_open=True), "seconds the ranks may take in all")


class ArithmeticTrainSettings(ArithmeticSettings):
    """``bench arithmetic``'s settings (the data, the tokenizers, Ted-Tok's), a shorter schedule,
    and the models'. The defaults fit 30 minutes on two CPU cores (``trainer.arithmetic_train``
    says how they differ from the paper's)."""

    model_config = SettingsConfigDict(env_prefix="TOKMAINT_BENCH_ARITHMETIC_TRAIN_")

    # Each revision swaps one token and a run makes 21-29: at Δ = 200 the vocabulary moved until
    # step ~6,000, and the model learned the task only once it stopped (``trainer.arithmetic_train``).
    interval: int = setting(100, whole(1), "steps between revisions (Δ; paper: 300 of 16,000 steps)")
    # A step here is a batch of 256 examples, not the paper's 4,096: its counts are noisier, and
    # at the paper's margin half the revisions or more swapped near-equal tokens back and forth
    # (``trainer.arithmetic_train``).
    beta: float = setting(
        2.0,
        Number(float, low=0, low_open=True),
        "margin β: add when τ_pair > β·τ_token[sink] (paper: 1.2, with batches of 4,096)",
    )
    epochs: int = setting(60, whole(1), "epochs over Old, then as many over New (paper: 1000)")
    batch: int = setting(256, whole(1), "examples per optimizer step and Ted-Tok time step (paper: 4096)")
    seeds: int = setting(
        3, whole(1), "seeds seed, seed+1, ... (each: the held-out split, the batch order, the initial weights)"
    )
    lr: float = setting(3e-3, LEARNING_RATE, "Adam's learning rate (paper: 5e-4, constant)")
    decay: float = setting(
        0.2,
        share(zero=True, one=False),
        "share of final steps over which the learning rate falls linearly to zero (the paper's: 0, constant)",
    )
    n_embd: int = setting(
        32, whole(4), "the model's width (four heads: a multiple of 4; the paper's ~4K parameters: 12)"
    )
    window: int = setting(20, whole(1), "steps before and after a revision compared for the loss jump")
    strategy: Strategy = setting(
        "hyper",
        None,
        "how the Ted-Tok run starts the rows a revision changes (the paper: "
        "parents_mean; the loss jump is measured for each)",
    )
    workers: int = setting(2, whole(1), "runs at a time, in processes of one torch thread (1: here, torch's threads)")

    @model_validator(mode="after")
    def _model_fits(self) -> Self:
        if self.n_embd % 4:
            raise ValueError(f"n_embd must be a multiple of 4 (four heads), got {self.n_embd}")
        if self.window >= self.interval:
            raise ValueError(
                f"window must be shorter than the interval between revisions, got {self.window} >= {self.interval}"
            )
        return self
