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
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tokenizer_service.bpe import BPETokenizer


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
        book = Codebook(self)
        for position, code in enumerate(codes):
            yield book.read(code, position=position)

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


class Codebook:
    """One context's hypertokens as a decoder learns them, a code at a time: what a model reads
    and generates with (``trainer.zip2zip``), and what :meth:`LZW.runs` decodes with.

    >>> book = Codebook(LZW(base_size=4, max_merge=3))
    >>> [book.read(code) for code in (0, 1, 4)], book.entries
    ([(0,), (1,), (0, 1)], [(0, 1), (1, 0)])

    After reading ``0 1 4`` the next code makes ``(0 1) + its first token``; read now, id 6 would
    be that entry itself (``new``: the run before and its own first token, LZW's KwKwK case).
    The encoder never ends a run where it could go on, so the next code never starts with a
    token that extends the last run into a known hypertoken (``continuing``):

    >>> book.new, book.continuing
    ((0, 1, 0), set())
    >>> book.read(0), book.continuing  # a code after this 0 starting with 1: the encoder read 4 = (0 1)
    ((0,), {1})
    """

    def __init__(self, lzw: LZW) -> None:
        self.lzw = lzw
        self.entries: list[tuple[int, ...]] = []  # hypertoken base_size + k -> its base ids
        self._next: dict[tuple[int, ...], set[int]] = {}  # a run -> the base ids known to extend it
        self.previous: tuple[int, ...] | None = None  # the run of the last code read

    @property
    def new(self) -> tuple[int, ...] | None:
        """The hypertoken the next code would be if it were the next new id (id
        ``base_size + len(entries)``), None when reading the next code makes no hypertoken."""
        previous = self.previous
        return previous + previous[:1] if previous is not None and len(previous) < self.lzw.max_merge else None

    @property
    def continuing(self) -> set[int]:
        """The base ids the next code cannot start with: each would have extended the last run
        into a hypertoken the encoder knew."""
        return self._next.get(self.previous, set()) if self.previous is not None else set()

    def read(self, code: int, *, position: int | None = None) -> tuple[int, ...]:
        """The base ids ``code`` stands for; the hypertoken reading it makes is learnt."""
        base = self.lzw.base_size
        if 0 <= code < base:
            run: tuple[int, ...] = (code,)
        elif code - base < len(self.entries):
            run = self.entries[code - base]
        elif code - base == len(self.entries) and self.new is not None:  # KwKwK: made by this very step
            run = self.new
        else:
            at = "" if position is None else f" at position {position}"
            raise ValueError(f"code {code}{at} names no hypertoken yet ({len(self.entries)} made so far)")
        if self.previous is not None and len(self.previous) < self.lzw.max_merge:
            self.entries.append(self.previous + run[:1])
            self._next.setdefault(self.previous, set()).add(run[0])
        self.previous = run
        return run


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
    return [joined[k : k + context] for k in range(0, len(joined), context)]


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


def merge_signal(
    tokenizer: BPETokenizer, windows: Sequence[Sequence[int]], *, max_merge: int = 3, top: int = 20
) -> dict[str, Any]:
    """The ``top`` hypertokens LZW forms in the most of ``windows`` (contexts of ``tokenizer``'s
    ids), each with its text, in how many contexts, and whether it is a token of ``tokenizer``
    already (its tokens' strings joined are one): what ``tokmaint stats hypertokens`` and
    ``bench zip2zip`` list for Ted-Tok.

    >>> from tokenizer_service.bpe import BPETokenizer
    >>> tok = BPETokenizer.train(["ab ab ab", "cd"], vocab_size=258)
    >>> signal = merge_signal(tok, [tok.encode("x y x y")] * 2, max_merge=2, top=1)
    >>> signal["hypertokens"][0]["contexts"], signal["already_tokens"]
    (2, 0)
    """
    counts = hypertoken_counts(windows, LZW(base_size=tokenizer.id_space, max_merge=max_merge))
    listed = [
        {
            "text": tokenizer.decode(list(run)),
            "contexts": n,
            "is_token": "".join(tokenizer.id_to_token[i] for i in run) in tokenizer.vocab,
        }
        for run, n in counts.most_common(top)
    ]
    return {
        "contexts": len(windows),
        "max_merge": max_merge,
        "hypertokens": listed,
        "already_tokens": sum(h["is_token"] for h in listed),
    }
