"""LZW over token ids (zip2zip, section 2.1): recurring runs of a context's tokens become
hypertokens on the fly, with no new tokenizer version.

The hyper-vocabulary starts empty in each context. ``w`` is the first id; for each next id ``c``:
when ``w+c`` is a known hypertoken of at most ``max_merge`` base tokens, ``w = w+c``; otherwise
``w`` is emitted, ``w+c`` becomes a new hypertoken when it has at most ``max_merge`` base tokens,
and ``w = c``. ``w`` is emitted at the end. Hypertoken ids follow the base vocabulary
(``base_size + k``, in creation order), and decoding restores the base ids exactly.

A worked example, base ids 0 ("to"), 1 (" be"), 2 (" or"), 3 (" not"), ``base_size=4``, M = 3:

    ids 0 1 2 3 0 1 0 1 0
    w=0   c=1: (0 1) unknown: emit 0, make 4=(0 1), w=1
          c=2: emit 1, make 5=(1 2), w=2      c=3: emit 2, make 6=(2 3), w=3
          c=0: emit 3, make 7=(3 0), w=0      c=1: (0 1) is 4: w=4
          c=0: (4 0) unknown: emit 4, make 8=(0 1 0), w=0
          c=1: (0 1) is 4: w=4                c=0: (4 0) is 8: w=8
    end: emit 8

>>> lzw = LZW(base_size=4, max_merge=3)
>>> lzw.encode([0, 1, 2, 3, 0, 1, 0, 1, 0])
[0, 1, 2, 3, 4, 8]
>>> lzw.codebook([0, 1, 2, 3, 4, 8])
[(0, 1), (1, 2), (2, 3), (3, 0), (0, 1, 0)]

Where the paper leaves a choice, this module chooses:

* the codebook is the context's own and is never pruned (the paper's default; its section 6
  names pruning as future work);
* ``max_merge`` counts base tokens, and a hypertoken longer than it is never made, so no run is
  ever split to fit it (the paper's M);
* decoding meets an id one past the newest hypertoken when the encoder used an entry it made the
  step before (LZW's ``KwKwK`` case): it is the previous run and its own first token.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class LZW:
    """LZW over the ids of a ``base_size`` vocabulary, hypertokens of at most ``max_merge`` ids."""

    base_size: int
    max_merge: int = 3

    def __post_init__(self) -> None:
        if self.base_size < 1 or self.max_merge < 1:
            raise ValueError(f"base_size and max_merge must be at least 1, got {self.base_size} and {self.max_merge}")

    def encode(self, ids: Sequence[int]) -> list[int]:
        """One context's base ids as base ids and hypertokens (the codebook starts empty).

        >>> LZW(base_size=2, max_merge=3).encode([0, 0, 0, 0, 0, 0])  # nested: 2=(0 0), 3=(0 0 0)
        [0, 2, 3]
        >>> LZW(base_size=2, max_merge=1).encode([0, 0, 0])  # M = 1: no hypertoken at all
        [0, 0, 0]
        """
        if not ids:
            return []
        made: dict[tuple[int, int], int] = {}  # (a run's id, the next base id) -> the hypertoken
        codes: list[int] = []
        next_id, top = self.base_size, self.max_merge
        w, length = ids[0], 1
        for c in ids[1:]:
            longer = made.get((w, c))
            if longer is not None:  # only runs of at most max_merge ids are ever made
                w, length = longer, length + 1
                continue
            codes.append(w)
            if length < top:
                made[(w, c)] = next_id
                next_id += 1
            w, length = c, 1
        codes.append(w)
        return codes

    def decode(self, codes: Sequence[int]) -> list[int]:
        """The base ids back, the codebook rebuilt as the encoder built it.

        >>> lzw = LZW(base_size=4)
        >>> lzw.decode(lzw.encode([0, 1, 2, 3, 0, 1, 0, 1, 0]))
        [0, 1, 2, 3, 0, 1, 0, 1, 0]
        """
        return [i for run in self.runs(codes) for i in run]

    def runs(self, codes: Sequence[int]) -> Iterator[tuple[int, ...]]:
        """The base ids of each code, in order (what a hypertoken stands for, as it is read)."""
        book: list[tuple[int, ...]] = []  # hypertoken base_size + k -> its base ids
        previous: tuple[int, ...] | None = None
        for position, code in enumerate(codes):
            if 0 <= code < self.base_size:
                run: tuple[int, ...] = (code,)
            elif code - self.base_size < len(book):
                run = book[code - self.base_size]
            elif (code - self.base_size == len(book) and previous is not None
                  and len(previous) < self.max_merge):  # KwKwK: made by the step before, used at once
                run = previous + previous[:1]
            else:
                raise ValueError(f"code {code} at position {position} names no hypertoken yet "
                                 f"({len(book)} made so far)")
            if previous is not None and len(previous) < self.max_merge:
                book.append(previous + run[:1])
            previous = run
            yield run

    def codebook(self, codes: Sequence[int]) -> list[tuple[int, ...]]:
        """The hypertokens a context's codes make, in creation order (id ``base_size + k``).

        >>> LZW(base_size=2).codebook([0, 2, 3])
        [(0, 0), (0, 0, 0)]
        """
        return self.book(list(self.runs(codes)))

    def book(self, runs: Sequence[tuple[int, ...]]) -> list[tuple[int, ...]]:
        """The hypertokens a context's runs (:meth:`runs`) make: each run but the last, short
        enough, and the next run's first token.

        >>> LZW(base_size=4).book([(0,), (1,), (0, 1), (0, 1, 0)])
        [(0, 1), (1, 0), (0, 1, 0)]
        """
        return [run + after[:1] for run, after in zip(runs, runs[1:]) if len(run) < self.max_merge]


def contexts(documents: Sequence[Sequence[int]], *, context: int = 1024) -> list[list[int]]:
    """The contexts LZW runs over: windows of ``context`` base ids cut from the documents' ids
    concatenated in corpus order (no separator; the last window may be shorter), or each document
    its own context with ``context=0``.

    >>> contexts([[1, 2, 3], [4, 5]], context=2), contexts([[1, 2, 3], [4, 5]], context=0)
    ([[1, 2], [3, 4], [5]], [[1, 2, 3], [4, 5]])
    """
    if context < 0:
        raise ValueError(f"context must be 0 (a document each) or a number of tokens, got {context}")
    if context == 0:
        return [list(d) for d in documents if len(d)]
    joined = [i for d in documents for i in d]
    return [joined[k:k + context] for k in range(0, len(joined), context)]


def hypertoken_counts(windows: Iterable[Sequence[int]], lzw: LZW) -> Counter[tuple[int, ...]]:
    """In how many contexts LZW forms each hypertoken: runs that recur across a stream's documents,
    candidates for permanent merges (Ted-Tok's adds).

    >>> hypertoken_counts([[0, 1, 0, 1], [2, 0, 1]], LZW(base_size=3, max_merge=2)).most_common(1)
    [((0, 1), 2)]
    """
    counts: Counter[tuple[int, ...]] = Counter()
    for ids in windows:
        counts.update(set(lzw.codebook(lzw.encode(ids))))
    return counts
