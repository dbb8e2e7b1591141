"""A step's documents counted on two cores: the counting process (``CountingProcess``) takes the
first documents and the caller's own process counts the rest meanwhile, as large a share as keeps
both busy. The streaming job's counting, in one place.

    pool = CountingPool(own=StepCounter(tokenizer))
    pending = pool.submit(texts, tokenizer)   # the process starts on its share at once
    counts = pool.counts(pending)             # the two shares' counts, added

The counts are the same whatever the share (they are by token id, and a version's ids are the
same in both processes); the share only decides who waits. It moves by ``SHARE_STEP`` after each
step: up when the caller waited longer than ``SHARE_WAIT`` seconds for the process, down when it
did not, and never past ``SHARE_MAX``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass

from pipeline.counting_process import CountingProcess
from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.counting import StepCounter, StepCounts, add_counts

SHARE_MAX, SHARE_STEP, SHARE_WAIT = 0.5, 0.02, 0.002


@dataclass(frozen=True)
class PreparedTexts:
    """A step's texts, the process's share of them already split into words (``cut``: where
    the caller's own share starts)."""

    texts: list[str]
    cut: int


@dataclass(frozen=True)
class PendingCounts:
    """A step being counted: its texts, the version they are counted with (by sha256), the
    process's counts to come and those of the caller's own share (None: it had none)."""

    texts: list[str]
    sha256: str
    future: Future
    own: StepCounts | None


class CountingPool:
    """The counting process and the caller's own counter, sharing each step's documents."""

    def __init__(self, *, own: StepCounter) -> None:
        """``own``: the caller's counter, at the version it submits with (the job's Ted-Tok's,
        whose word cache it shares)."""
        self.own = own
        self.own_share = 0.0
        self.process = CountingProcess()

    def load(self, tokenizer: BPETokenizer, *, wait: bool = True) -> None:
        """Have the process load ``tokenizer`` before a step needs it (``CountingProcess.load``)."""
        self.process.load(tokenizer, wait=wait)

    def _cut(self, texts: list[str]) -> int:
        return len(texts) - int(len(texts) * self.own_share)

    def prepare(self, texts: Sequence[str]) -> PreparedTexts:
        """Have the process split its share of ``texts`` into words while the version they will
        be counted with is still being made; :meth:`submit` them as ``prepared`` then.

        >>> pool = CountingPool(own=StepCounter(BPETokenizer.train(["a b"], vocab_size=258)))
        >>> pool.prepare(["a", "b"])
        PreparedTexts(texts=['a', 'b'], cut=2)
        >>> pool.close()
        """
        texts = list(texts)
        cut = self._cut(texts)
        self.process.prepare(texts[:cut])
        return PreparedTexts(texts, cut)

    def submit(
        self, texts: Sequence[str] | None, tokenizer: BPETokenizer, *, prepared: PreparedTexts | None = None
    ) -> PendingCounts:
        """Count ``texts`` (or those ``prepared``) with ``tokenizer``: the process its share, the
        caller its own now. Raises ``WorkerDied`` when the process is gone."""
        if prepared is None:
            texts = list(texts or [])
            cut = self._cut(texts)
            future = self.process.submit(texts[:cut], tokenizer)
        else:
            texts, cut = prepared.texts, prepared.cut
            future = self.process.submit(None, tokenizer)
        own = self.own.count_texts(texts[cut:], neighbours=True) if cut < len(texts) else None
        return PendingCounts(texts, tokenizer.sha256, future, own)

    def counts(self, pending: PendingCounts) -> StepCounts:
        """The step's counts, both shares added; the caller's share grows when it waited here and
        shrinks when it did not. Raises ``WorkerDied`` when the process died on them."""
        waiting = time.perf_counter()
        counts = pending.future.result()
        waited = time.perf_counter() - waiting > SHARE_WAIT
        self.own_share = (
            min(SHARE_MAX, self.own_share + SHARE_STEP) if waited else max(0.0, self.own_share - SHARE_STEP)
        )
        return counts if pending.own is None else add_counts([counts, pending.own])

    def close(self) -> None:
        self.process.close()
