"""What a trainer trains on: a corpus file round and round, or the ``docs`` topic as it grows.

Both hand out batches by position, so that a checkpoint's position resumes exactly: the next
document's index in a corpus, the next offset of every partition of the topic (the pipeline's
step order, ``pipeline.stream.StepReader``, which gives the same batch for the same offsets).

>>> data = CorpusTexts(["a", "b", "c"])
>>> data.take(data.start, 2), data.take(2, 2)
((['a', 'b'], 2), (['c', 'a'], 1))
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

log = logging.getLogger("tokmaint.trainer")


class TrainingTexts(Protocol):
    start: Any  # the position of the first batch

    def take(self, position: Any, n: int, *, waiting: Callable[[], Any] | None = None) -> tuple[list[str], Any]:
        """The ``n`` texts at ``position``, and the position after them; ``waiting`` is called
        while they are awaited (a live stream with nothing new yet)."""
        ...

    def close(self) -> None: ...


def held_out_split(
    texts: list[str] | None, eval_texts: list[str] | None, *, eval_docs: int, eval_every: int
) -> tuple[list[str] | None, list[str]]:
    """The texts to train on and those held out to score the model on: the first ``eval_docs``
    of ``eval_texts`` where they are given; else, with scoring on (``eval_every``) and a corpus of
    more than twice ``eval_docs`` texts, the corpus's newest ``eval_docs``, kept out of training.
    ``texts`` None: a live topic, nothing of which is held out.

    >>> held_out_split(list("abcdefg"), None, eval_docs=2, eval_every=10)
    (['a', 'b', 'c', 'd', 'e'], ['f', 'g'])
    >>> held_out_split(list("abcdefg"), ["x", "y", "z"], eval_docs=2, eval_every=10)
    (['a', 'b', 'c', 'd', 'e', 'f', 'g'], ['x', 'y'])
    >>> held_out_split(list("abc"), None, eval_docs=2, eval_every=10)  # too few to spare any
    (['a', 'b', 'c'], [])
    """
    if eval_texts is not None:
        return texts, eval_texts[:eval_docs]
    if texts is not None and eval_every and len(texts) > 2 * eval_docs:
        return texts[: len(texts) - eval_docs], texts[len(texts) - eval_docs :]
    return texts, []


class CorpusTexts:
    """A corpus's texts, in order, round and round; a position is the next text's index."""

    start = 0

    def __init__(self, texts: list[str]) -> None:
        if not texts:
            raise ValueError("no texts to train on")
        self.texts = texts

    def take(self, position: int, n: int, *, waiting: Callable[[], Any] | None = None) -> tuple[list[str], int]:
        texts = [self.texts[(position + k) % len(self.texts)] for k in range(n)]
        return texts, (position + n) % len(self.texts)

    def close(self) -> None:
        pass


class TopicTexts:
    """The documents of the ``docs`` topic in the pipeline's step order, read from the start; a
    position is the next offset of every partition. A batch waits for documents the topic does
    not hold yet (a live stream); records that are not Documents are passed over (the pipeline
    dead-letters them)."""

    start: dict[int, int] = {}

    def __init__(self, settings: Any, *, wait: float = 1.0, poll: float = 0.5) -> None:
        """``poll``: seconds between two looks at a topic read to its end."""
        from pipeline.stream import StepReader  # kafka only where the topic is read

        self.reader, self.poll = StepReader(settings, wait=wait), poll
        self.passed_over = 0

    def take(
        self, position: dict[int, int], n: int, *, waiting: Callable[[], Any] | None = None
    ) -> tuple[list[str], dict[int, int]]:
        texts: list[str] = []
        said = False
        while len(texts) < n:
            step = self.reader.read(position, n - len(texts))
            texts += [d.text for d in step.documents]
            self.passed_over += len(step.dead)
            if not step.documents and not step.dead:  # read to the end: wait for the stream to grow
                if not said:
                    said = True
                    log.info("trainer: waiting for documents on %r", self.reader.settings.docs_topic)
                if waiting is not None:
                    waiting()
                time.sleep(self.poll)
            position = step.end
        return texts, position

    def close(self) -> None:
        self.reader.close()
