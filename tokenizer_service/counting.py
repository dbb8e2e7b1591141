"""Per-step counts: token occurrences and within-word adjacent pairs, vectorised with numpy.

Only pairs inside one pre-token (word) are counted: BPE never merges across a word boundary,
so a cross-boundary pair could never become a token. Each distinct word of a step is encoded
once (and cached for the tokenizer version) and weighted by its frequency.

>>> from tokenizer_service.bpe import BPETokenizer, ascii_to_byte_level
>>> tok = BPETokenizer(vocab={"a": 0, "b": 1, "ab": 2}, merges=[("a", "b")], pipeline={
...     "pre_tokenizer": {"type": "WhitespaceSplit"}})
>>> c = StepCounter(tok).count_texts(["ab ab ba", "aab"])
>>> dict(zip(c.token_ids.tolist(), c.token_counts.tolist()))
{0: 2.0, 1: 1.0, 2: 3.0}
>>> [(unpack_pair(k), n) for k, n in zip(c.pair_keys.tolist(), c.pair_counts.tolist())]
[((0, 2), 1.0), ((1, 0), 1.0)]
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from itertools import chain, compress, repeat
from dataclasses import dataclass, field, replace
from typing import Any, overload

import numpy as np
import numpy.ma  # noqa: F401  np.unique loads it on its first call: here, not in a job's first step (7-40 ms)
from numpy.typing import ArrayLike, NDArray

from tokenizer_service.bpe import BPETokenizer, ascii_to_byte_level

PAIR_SHIFT = 32

# Arrays by what they hold: token ids, word ids and packed pair keys are int64; counts, weights
# and statistics float64.
Int64Array = NDArray[np.int64]
Float64Array = NDArray[np.float64]
BoolArray = NDArray[np.bool_]


@overload
def pack_pair(u: int | np.integer[Any], v: int | np.integer[Any]) -> np.int64: ...
@overload
def pack_pair(u: Int64Array, v: Int64Array) -> Int64Array: ...
def pack_pair(u: Any, v: Any) -> Any:
    """One int64 key for the ordered pair (u, v).

    >>> unpack_pair(pack_pair(3, 7))
    (3, 7)
    """
    if isinstance(u, np.ndarray):
        return (u.astype(np.int64) << PAIR_SHIFT) | v
    return (np.int64(u) << PAIR_SHIFT) | np.int64(v)


@overload
def unpack_pair(key: int | np.integer[Any]) -> tuple[int, int]: ...
@overload
def unpack_pair(key: Int64Array) -> tuple[Int64Array, Int64Array]: ...
def unpack_pair(key: Any) -> Any:
    """The ordered pair (u, v) of a key made by :func:`pack_pair` (or the arrays of many keys).

    >>> [a.tolist() for a in unpack_pair(pack_pair(np.array([1, 2]), np.array([5, 6])))]
    [[1, 2], [5, 6]]
    """
    if isinstance(key, np.ndarray):
        return key >> PAIR_SHIFT, key & ((1 << PAIR_SHIFT) - 1)
    return int(key) >> PAIR_SHIFT, int(key) & ((1 << PAIR_SHIFT) - 1)


@dataclass(frozen=True)
class KeyCounts:
    """Distinct keys (sorted) with their weights: token ids and packed within-word pairs, what a
    statistics store applies for a step (``StatsStore.apply_counts``).

    >>> c = KeyCounts(np.array([1, 4]), np.array([2.0, 1.0]), np.array([pack_pair(1, 4)]), np.array([1.0]))
    >>> [unpack_pair(k) for k in c.pair_keys.tolist()], c.pair_counts.tolist()
    ([(1, 4)], [1.0])
    """

    token_ids: Int64Array
    token_counts: Float64Array
    pair_keys: Int64Array
    pair_counts: Float64Array


@dataclass(frozen=True)
class StepCounts(KeyCounts):
    """One time step's counts (its keys' weights, the fields of :class:`KeyCounts`), plus sizes."""

    n_bytes: int
    n_tokens: int
    # Adjacent tokens over whole documents, within and across words (LiteToken's neighbours):
    # only when asked for (``count_texts(neighbours=True)``).
    neighbour_keys: Int64Array | None = None
    neighbour_counts: Float64Array | None = None

    @property
    def bytes_per_token(self) -> float:
        return self.n_bytes / max(self.n_tokens, 1)


@dataclass(frozen=True)
class WordTally:
    """What a batch of documents holds for counting with any version of the same
    pre-tokenization: its distinct words (in the model's alphabet) with their counts, the
    adjacent pairs of words within its plain documents (indices into ``words``, distinct) with
    theirs, and the texts with an added token's text (encoded whole). Made beside the counts by
    :meth:`StepCounter.tally_texts`; :meth:`StepCounter.count_tally` counts it with another
    version without splitting the texts into words again (three quarters of counting them).

    >>> tok = BPETokenizer(vocab={"a": 0, "b": 1}, merges=[], pipeline={"pre_tokenizer": {"type": "WhitespaceSplit"}})
    >>> tally = StepCounter(tok).tally_texts(["a b a", "b a"])[1]
    >>> tally.words, tally.freqs.tolist(), [(tally.words[u], tally.words[v], n) for u, v, n in zip(
    ...     tally.before.tolist(), tally.after.tolist(), tally.pair_counts.tolist())]
    (['a', 'b'], [3, 2], [('a', 'b', 1), ('b', 'a', 2)])
    """

    words: list[str]
    freqs: NDArray[np.integer[Any]]
    before: NDArray[np.integer[Any]]
    after: NDArray[np.integer[Any]]
    pair_counts: NDArray[np.integer[Any]]
    # The words' counts over the plain documents only; None when every document is plain.
    plain_freqs: NDArray[np.integer[Any]] | None = None
    special: list[str] = field(default_factory=list)


def count_pairs(left: Int64Array, right: Int64Array, weights: Float64Array) -> tuple[Int64Array, Float64Array]:
    """The distinct pairs ``(left[i], right[i])`` as sorted keys (:func:`pack_pair`), and the sum
    of their ``weights``.

    Where few ids make many pairs (a small vocabulary: Ted-Tok's arithmetic), the pairs are
    counted by a bincount over every pair of ids up to the largest instead of np.unique's sort.
    Either way each pair's weights are added in the same order, so the sums are the same floats.

    >>> left, right, weights = np.array([2, 1, 2]), np.array([5, 5, 5]), np.array([1.0, 2.0, 0.5])
    >>> keys, sums = count_pairs(left, right, weights)
    >>> [unpack_pair(k) for k in keys.tolist()], sums.tolist()
    ([(1, 5), (2, 5)], [2.0, 1.5])
    """
    size = int(max(left.max(), right.max())) + 1 if len(left) else 0
    if 0 < size * size <= 8 * len(left):  # size² bins cost no more to clear and scan than n keys to sort
        dense = left * size + right
        occupied = np.flatnonzero(np.bincount(dense, minlength=size * size))
        return pack_pair(occupied // size, occupied % size), weighted_bincount(dense, weights, size * size)[occupied]
    keys, inverse = np.unique(pack_pair(left, right), return_inverse=True)
    return keys, weighted_bincount(inverse, weights, len(keys))


def unique_runs(arrays: Sequence[Int64Array]) -> tuple[Int64Array, Int64Array]:
    """``np.unique(np.concatenate(arrays), return_inverse=True)``, faster when the arrays are
    sorted each (the keys of several counts): a stable sort merges sorted runs instead of
    sorting from scratch (2-4x on a step's pairs). Any arrays give the same answer.

    >>> unique, inverse = unique_runs([np.array([1, 5, 9]), np.array([2, 5])])
    >>> unique.tolist(), inverse.tolist()
    ([1, 2, 5, 9], [0, 2, 3, 1, 2])
    """
    keys = np.concatenate(arrays)
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    first = np.ones(len(ordered), np.bool_)
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    inverse = np.empty(len(keys), np.int64)
    inverse[order] = np.cumsum(first) - 1
    return ordered[first], inverse


def weighted_bincount(x: Int64Array, weights: ArrayLike, minlength: int = 0) -> Float64Array:
    """``np.bincount(x, weights=weights, minlength=minlength)``: with weights it sums them in
    float64, which numpy's type stubs do not say (they give the unweighted count's intp).

    >>> weighted_bincount(np.array([0, 2, 2]), np.array([0.5, 1.0, 2.0])).tolist()
    [0.5, 0.0, 3.0]
    """
    # numpy's stubs: NDArray[intp] for every bincount. With weights it is float64 (the doctest).
    sums: Float64Array = np.bincount(x, weights=weights, minlength=minlength)  # type: ignore[assignment]
    return sums


def add_counts(parts: Sequence[StepCounts], weights: Sequence[float] | Float64Array | None = None) -> StepCounts:
    """Counts of several parts as one, key by key: the parts of one step (documents counted in
    different processes: exactly the step's counts, as counts are whole numbers), or, with
    ``weights``, a weighted sum (``stats_store.combine_steps``).

    >>> one = StepCounts(np.array([1, 4]), np.array([2.0, 1.0]), np.array([], np.int64), np.array([]), 3, 3)
    >>> both = add_counts([one, one])
    >>> both.token_ids.tolist(), both.token_counts.tolist(), both.n_tokens
    ([1, 4], [4.0, 2.0], 6)
    """
    factors = np.ones(len(parts)) if weights is None else np.asarray(weights, np.float64)

    def merged(keys: list[Int64Array], counts: list[Float64Array]) -> tuple[Int64Array, Float64Array]:
        unique, inverse = unique_runs(keys)
        summands = np.concatenate([f * c for f, c in zip(factors, counts)])
        return unique, weighted_bincount(inverse, summands, len(unique))

    token_ids, token_counts = merged([p.token_ids for p in parts], [p.token_counts for p in parts])
    pair_keys, pair_counts = merged([p.pair_keys for p in parts], [p.pair_counts for p in parts])
    neighbour_keys: Int64Array | None = None
    neighbour_counts: Float64Array | None = None
    if all(p.neighbour_keys is not None for p in parts):
        # Each part then has its neighbour counts too (counted with neighbours: keys and counts).
        neighbour_keys, neighbour_counts = merged(
            [p.neighbour_keys for p in parts if p.neighbour_keys is not None],
            [p.neighbour_counts for p in parts if p.neighbour_counts is not None],
        )
    return StepCounts(
        token_ids=token_ids,
        token_counts=token_counts,
        pair_keys=pair_keys,
        pair_counts=pair_counts,
        n_bytes=sum(p.n_bytes for p in parts),
        n_tokens=sum(p.n_tokens for p in parts),
        neighbour_keys=neighbour_keys,
        neighbour_counts=neighbour_counts,
    )


@dataclass(frozen=True)
class EncodingChange:
    """What a new version changes in the encoding of a word (``encoding_change``): its old
    encoding holds one of ``ids`` or an adjacent pair of ``pairs`` (packed, old ids), or the
    word is one of ``words``."""

    ids: Int64Array
    pairs: Int64Array
    words: tuple[str, ...]


def encoding_change(old: BPETokenizer, new: BPETokenizer) -> EncodingChange | None:
    """Which words encode differently under ``new`` than under ``old``, when that can be told
    from their old encodings (a Ted-Tok revision), else None (any word may).

    It can when the two differ only in their model's vocabulary and merges, the merges ``new``
    keeps lead its list in their old order and its own follow (lowest priority), and each
    token ``new`` drops or gives another id is a *sink* of ``old`` (made by a merge it drops,
    and parent of none). BPE then makes the old encoding first and goes on from it with the
    new merges, so only a word with an adjacent pair of a new merge changes; a sink once made
    stays to the end, so only a word whose encoding holds a dropped sink lost it. With
    ``ignore_merges`` a word that is a new token is one token at once.

    >>> old = BPETokenizer(vocab={"a": 0, "b": 1, "c": 2, "ab": 3}, merges=[("a", "b")], pipeline={})
    >>> new = old.replace_model(vocab={"a": 0, "b": 1, "c": 2, "bc": 3}, merges=[("b", "c")])
    >>> change = encoding_change(old, new)
    >>> change.ids.tolist(), [unpack_pair(k) for k in change.pairs.tolist()]
    ([3], [(1, 2)])
    >>> encoding_change(new, old.replace_model(vocab=old.vocab, merges=[("b", "c"), ("a", "b")])) is None
    True
    """
    if old.pipeline != new.pipeline or old.model_options != new.model_options:
        return None
    # Which merges stay, looked up once and then filtered in C (compress): two Python loops
    # over the 50k merges, one for the dropped and one for the kept, took ~30 ms of a revision.
    is_kept = list(map(set(new.merges).__contains__, old.merges))
    dropped = list(compress(old.merges, map(operator.not_, is_kept)))
    ours = len(old.merges) - len(dropped)
    if new.merges[:ours] != tuple(compress(old.merges, is_kept)):
        return None
    made_by_dropped = {u + v for u, v in dropped}
    gone = [i for i, t in old.id_to_token.items() if new.id_to_token.get(i) != t]
    if any(old.id_to_token[i] not in made_by_dropped for i in gone):
        return None
    # No dropped merge's token (the gone ones among them) parents an old merge: one pass in C over
    # the merges' tokens, without a set of them all (~15 ms at 50k merges).
    if not made_by_dropped.isdisjoint(chain.from_iterable(old.merges)):
        return None
    added = new.merges[ours:]
    made_by_added = {u + v for u, v in added}
    if new.vocab.keys() - old.vocab.keys() - made_by_added:  # a new token no new merge makes
        return None
    ids = sorted(set(gone) | {old.vocab[u + v] for u, v in dropped if u + v in old.vocab})
    pairs = [pack_pair(old.vocab[u], old.vocab[v]) for u, v in added if u in old.vocab and v in old.vocab]
    words = tuple(t for t in made_by_added if t not in old.vocab) if new.ignore_merges else ()
    return EncodingChange(ids=np.array(ids, np.int64), pairs=np.unique(np.array(pairs, np.int64)), words=words)


def split_words(tokenizer: BPETokenizer, texts: Iterable[str]) -> tuple[list[str], list[int]]:
    """The texts' words back to back (raw where ``ascii_words`` applies, else in the model's
    alphabet, as a :class:`StepCounter` looks them up) and each text's number of words.

    >>> tok = BPETokenizer(vocab={"a": 0}, merges=[], pipeline={"pre_tokenizer": {"type": "WhitespaceSplit"}})
    >>> split_words(tok, ["a b a", "b"])
    (['a', 'b', 'a', 'b'], [3, 1])
    """
    words: list[str] = []
    lengths: list[int] = []
    for text in texts:
        piece = tokenizer.ascii_words(text)
        if piece is None:
            piece = tokenizer.pre_tokenize(text)
        lengths.append(len(piece))
        words += piece
    return words, lengths


class WordVocabulary:
    """Stable integer ids for distinct words (pre-tokens), shared across tokenizer versions.

    >>> w = WordVocabulary()
    >>> w.ids(["x", "y", "x"]).tolist(), w.words[1]
    ([0, 1, 0], 'y')
    """

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.words: list[str] = []

    def ids(self, words: Iterable[str]) -> Int64Array:
        index, out = self.index, []
        for w in words:
            i = index.get(w)
            if i is None:
                i = index[w] = len(self.words)
                self.words.append(w)
            out.append(i)
        return np.asarray(out, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.words)


class StepCounter:
    """Counts tokens and within-word pairs for one tokenizer version, caching word encodings.

    The cache is ragged: ``_flat[:_used]`` holds every encoded word's token ids back to back and
    ``_start``/``_len`` locate word ``i``; a step gathers them in one numpy pass. ``_flat`` has
    room past ``_used`` (doubled when full): a step's few new encodings are written into it, not
    concatenated to a copy of the whole cache (that copy was 60% of a long schedule's counting).
    """

    def __init__(self, tokenizer: BPETokenizer, words: WordVocabulary | None = None) -> None:
        self.words = words if words is not None else WordVocabulary()
        self.tokenizer = tokenizer
        self._flat = np.zeros(0, dtype=np.int64)
        self._used = 0
        self._start = np.zeros(0, dtype=np.int64)
        self._len = np.full(0, -1, dtype=np.int64)
        self._word_bytes = np.zeros(0, dtype=np.int64)
        self._ids_by_text: dict[str, int] = {}  # a word's text, raw or mapped, -> its id (word_sequences)

    def set_tokenizer(self, tokenizer: BPETokenizer) -> None:
        """Switch to a new version: word ids are kept, and so are the encodings the change
        cannot alter (``encoding_change``); the others are made again lazily."""
        change = encoding_change(self.tokenizer, tokenizer)
        self.tokenizer = tokenizer
        if change is None:
            self._len[:] = -1
            return
        live = np.flatnonzero(self._len >= 0)
        lengths = self._len[live]
        tokens = self._gather(live, lengths)
        owners = np.repeat(live, lengths)
        # Tables indexed by old id, not np.isin over every cached token (its sorts took 8-16 ms
        # a revision on a stream's cache, in the job's plan and again in its counting process).
        firsts = unpack_pair(change.pairs)[0]
        table = np.zeros(
            1 + max(int(tokens.max(initial=0)), int(change.ids.max(initial=0)), int(firsts.max(initial=0))), bool
        )
        table[change.ids] = True
        stale = table[tokens]
        if len(change.pairs) and len(tokens) > 1:
            table[:] = False
            table[firsts] = True  # a pair's first token, then the whole pair at those places only
            at = np.flatnonzero(table[tokens[:-1]] & (owners[1:] == owners[:-1]))
            stale[at[np.isin(pack_pair(tokens[at], tokens[at + 1]), change.pairs)]] = True
        self._len[owners[stale]] = -1
        index = self.words.index
        self._len[[i for w in change.words if (i := index.get(w)) is not None and i < len(self._len)]] = -1

    def _ensure_encoded(self, word_ids: Int64Array) -> None:
        n = len(self.words)
        if len(self._len) < n:
            grow = n - len(self._len)
            self._start = np.concatenate([self._start, np.zeros(grow, np.int64)])
            self._len = np.concatenate([self._len, np.full(grow, -1, np.int64)])
            tokenizer = self.tokenizer  # a byte-level word's characters are a byte each
            specials = tokenizer.special_tokens if tokenizer.byte_level else None
            new_bytes = [
                len(w) if specials is not None and w not in specials else len(tokenizer.token_bytes(w))
                for w in self.words.words[n - grow :]
            ]
            self._word_bytes = np.concatenate([self._word_bytes, np.asarray(new_bytes, np.int64)])
        missing = np.unique(word_ids[self._len[word_ids] < 0])
        if len(missing) == 0:
            return
        words = self.words.words
        encoded = self.tokenizer.tokenize_words(words[i] for i in missing.tolist())
        lengths = np.fromiter(map(len, encoded), np.int64, len(encoded))
        if self._used > 8 * max(int(self._len[self._len > 0].sum()), 1 << 16):
            self._compact()
        end = self._used + int(lengths.sum())
        if end > len(self._flat):
            grown = np.empty(max(end, 2 * len(self._flat)), np.int64)
            grown[: self._used] = self._flat[: self._used]
            self._flat = grown
        self._flat[self._used : end] = np.fromiter(chain.from_iterable(encoded), np.int64, end - self._used)
        self._start[missing] = self._used + np.concatenate([[0], np.cumsum(lengths)[:-1]])
        self._len[missing] = lengths
        self._used = end

    def _compact(self) -> None:
        """Drop encodings of earlier versions that are no longer referenced."""
        live = np.flatnonzero(self._len >= 0)
        self._flat = self._gather(live, self._len[live])
        self._used = len(self._flat)
        self._start[live] = np.concatenate([[0], np.cumsum(self._len[live])[:-1]])

    def _gather(self, word_ids: Int64Array, lengths: Int64Array) -> Int64Array:
        """Concatenate the cached encodings of ``word_ids`` (ragged gather, no Python loop)."""
        total = int(lengths.sum())
        offsets = np.repeat(self._start[word_ids] - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
        gathered: Int64Array = self._flat[offsets + np.arange(total)]
        return gathered

    def count_texts(
        self, texts: Sequence[str], *, neighbours: bool = False, words: tuple[Int64Array, Int64Array] | None = None
    ) -> StepCounts:
        """Pre-tokenize texts, count each distinct word once, weight by its frequency; with
        ``neighbours``, also the adjacent token pairs of each whole document (what
        ``encode_batch`` gives: the words' pairs plus the pairs across each word boundary),
        from the same word encodings. ``words``: the texts' :meth:`word_sequences`, made by this
        counter earlier, with any version of the same pre-tokenization (word ids outlive
        versions): a pipeline splits a step into words while its version is still being made.

        >>> tok = BPETokenizer(vocab={"a": 0, "b": 1, "ab": 2}, merges=[("a", "b")], pipeline={
        ...     "pre_tokenizer": {"type": "WhitespaceSplit"}})
        >>> c = StepCounter(tok).count_texts(["ab ba", "b"], neighbours=True)
        >>> [(unpack_pair(k), n) for k, n in zip(c.neighbour_keys.tolist(), c.neighbour_counts.tolist())]
        [((1, 0), 1.0), ((2, 1), 1.0)]
        """
        flat, lengths = self.word_sequences(texts) if words is None else words
        return self._counted(texts, flat, lengths, neighbours=neighbours)[0]

    def tally_texts(self, texts: Sequence[str]) -> tuple[StepCounts, WordTally]:
        """:meth:`count_texts` with ``neighbours``, and the texts' :class:`WordTally` from the
        same words: what a stage that counts ahead of a revision hands on, so that the counts
        can be made again with the revised version (:meth:`count_tally`) without the texts."""
        counts, split = self._counted(texts, *self.word_sequences(texts), neighbours=True)
        assert split is not None  # made with the neighbours
        word_ids, freqs, sequence, plain, before, after = split
        where = np.zeros(len(self.words), np.int64)  # a word id -> its place in the tally's words
        where[word_ids] = np.arange(len(word_ids))
        n = max(len(word_ids), 1)
        pairs, pair_counts = np.unique(where[before] * n + where[after], return_counts=True)
        names = self.words.words
        # Indices and counts are whole numbers: 4 bytes each, not 8, where they fit (a part is
        # pickled to the writer and kept in its state).
        small = np.int32 if max(int(freqs.max(initial=0)), len(word_ids)) < 2**31 else np.int64
        return counts, WordTally(
            words=[names[i] for i in word_ids.tolist()],
            freqs=freqs.astype(small),
            before=(pairs // n).astype(small),
            after=(pairs % n).astype(small),
            pair_counts=pair_counts.astype(small),
            plain_freqs=None if plain.all() else np.bincount(where[sequence], minlength=len(word_ids)).astype(small),
            special=[text for text, p in zip(texts, plain) if not p],
        )

    def _counted(
        self, texts: Sequence[str], flat: Int64Array, lengths: Int64Array, *, neighbours: bool
    ) -> tuple[StepCounts, tuple[Int64Array, Int64Array, Int64Array, NDArray[np.bool_], Int64Array, Int64Array] | None]:
        """:meth:`count_texts` of the texts split into ``flat`` and ``lengths``, and, with
        ``neighbours``, what it split them into on the way, for :meth:`tally_texts`: the distinct
        word ids and their counts, the plain documents' words, which texts are plain, and the
        word ids on either side of each of their word boundaries."""
        freqs = np.bincount(flat, minlength=len(self.words))  # word ids are dense: no sort
        word_ids = np.flatnonzero(freqs)
        counts = self.count_words(word_ids, freqs[word_ids].astype(np.float64))
        if not neighbours:
            return counts, None
        sequence, lengths, plain = self._plain_sequence(texts, flat, lengths)
        if plain.all():
            inner_keys, inner_counts = counts.pair_keys, counts.pair_counts
        else:  # the words of documents with an added token do not make their encoding
            kept_ids, kept_freqs = np.unique(sequence, return_counts=True)
            inner_keys, inner_counts = self._pairs(kept_ids, kept_freqs.astype(np.float64))
        before, after = self._adjacent(sequence, lengths)
        boundary_keys, boundary_counts = np.unique(self._boundary_keys(before, after), return_counts=True)
        counted = self._with_neighbours(
            counts,
            [(inner_keys, inner_counts), (boundary_keys, boundary_counts)],
            [text for text, p in zip(texts, plain) if not p],
        )
        return counted, (word_ids, freqs[word_ids], sequence, plain, before, after)

    def count_tally(self, tally: WordTally) -> StepCounts:
        """What :meth:`count_texts` with ``neighbours`` gives for the texts ``tally`` was made of
        (:meth:`tally_texts`, by a counter of any version of the same pre-tokenization), with this
        counter's version, from the words alone.

        >>> tok = BPETokenizer(vocab={"a": 0, "b": 1, "ab": 2}, merges=[("a", "b")], pipeline={
        ...     "pre_tokenizer": {"type": "WhitespaceSplit"}})
        >>> texts = ["ab ab ba", "aab"]
        >>> a = StepCounter(tok).count_tally(StepCounter(tok).tally_texts(texts)[1])
        >>> b = StepCounter(tok).count_texts(texts, neighbours=True)
        >>> a.token_counts.tolist() == b.token_counts.tolist(), a.neighbour_keys.tolist() == b.neighbour_keys.tolist()
        (True, True)
        """
        word_ids = self.words.ids(tally.words)
        counts = self.count_words(word_ids, tally.freqs.astype(np.float64))
        if tally.plain_freqs is None:
            inner_keys, inner_counts = counts.pair_keys, counts.pair_counts
        else:
            kept = tally.plain_freqs > 0
            inner_keys, inner_counts = self._pairs(word_ids[kept], tally.plain_freqs[kept].astype(np.float64))
        boundary_keys, inverse = np.unique(
            self._boundary_keys(word_ids[tally.before], word_ids[tally.after]), return_inverse=True
        )
        boundary_counts = weighted_bincount(inverse, tally.pair_counts.astype(np.float64), len(boundary_keys))
        return self._with_neighbours(
            counts, [(inner_keys, inner_counts), (boundary_keys, boundary_counts)], tally.special
        )

    def _plain_sequence(
        self, texts: Sequence[str], flat: Int64Array, lengths: Int64Array
    ) -> tuple[Int64Array, Int64Array, NDArray[np.bool_]]:
        """The words of the plain documents (those with no added token's text, which encoding
        matches before BPE), back to back, each text's number of them (0 for the others), and
        which texts are plain."""
        added = self.tokenizer.added_tokens
        plain = (
            np.fromiter((not any(token in text for token in added) for text in texts), bool, len(texts))
            if added
            else np.ones(len(texts), bool)
        )
        if plain.all():
            return flat, lengths, plain
        return flat[np.repeat(plain, lengths)], np.where(plain, lengths, 0), plain

    @staticmethod
    def _adjacent(sequence: Int64Array, lengths: Int64Array) -> tuple[Int64Array, Int64Array]:
        """Each word and the next in one document: the word ids on either side of every word
        boundary of ``sequence`` (documents of ``lengths`` words, back to back)."""
        follows = np.ones(len(sequence), dtype=np.bool_)
        follows[np.cumsum(lengths)[lengths > 0] - 1] = False
        return sequence[:-1][follows[:-1]], sequence[1:][follows[:-1]]

    def _boundary_keys(self, before: Int64Array, after: Int64Array) -> Int64Array:
        """The packed pairs (last token of word ``before[k]``, first token of word ``after[k]``)
        of encoded words: the pairs across a word boundary."""
        last: Int64Array = self._flat[self._start[before] + self._len[before] - 1]
        return pack_pair(last, self._flat[self._start[after]])

    def _with_neighbours(
        self, counts: StepCounts, parts: list[tuple[Int64Array, NDArray[np.number[Any]]]], special: list[str]
    ) -> StepCounts:
        """``counts`` with its neighbours: the (keys, counts) of ``parts``, within and across
        words, and every adjacent pair of the ``special`` texts (those with an added token's
        text), encoded whole."""
        special_keys = [
            pack_pair(np.asarray(ids[:-1], np.int64), np.asarray(ids[1:], np.int64))
            for text in special
            for ids in [self.tokenizer.encode(text)]
            if len(ids) > 1
        ]
        weights = np.concatenate(
            [*(np.asarray(n, np.float64) for _, n in parts), *[np.ones(len(k)) for k in special_keys]]
        )
        neighbour_keys, inverse = unique_runs([*(k for k, _ in parts), *special_keys])
        return replace(
            counts,
            neighbour_keys=neighbour_keys,
            neighbour_counts=weighted_bincount(inverse, weights, len(neighbour_keys)),
        )

    def word_sequences(self, texts: Sequence[str]) -> tuple[Int64Array, Int64Array]:
        """The word ids of the texts in order, back to back, and each text's number of words
        (what :meth:`count_texts` counts).

        Words are looked up by their text before the byte mapping where ``ascii_words`` applies
        (a new one is mapped once): unambiguous beside the model's words, as a raw word is
        ASCII and the model's ASCII words are the same text mapped or not (printable only).

        >>> tok = BPETokenizer(vocab={"a": 0, "b": 1}, merges=[], pipeline={
        ...     "pre_tokenizer": {"type": "WhitespaceSplit"}})
        >>> [a.tolist() for a in StepCounter(tok).word_sequences(["a b a", "b"])]
        [[0, 1, 0, 1], [3, 1]]
        """
        words, lengths = split_words(self.tokenizer, texts)
        return self._word_ids(words), np.array(lengths, np.int64)

    def _word_ids(self, words: list[str]) -> Int64Array:
        """The ids of words as :func:`split_words` gives them (raw ASCII, or in the model's alphabet)."""
        tokenizer, known = self.tokenizer, self._ids_by_text
        # C loops from here on, the hot path of counting; Python touches new words only.
        ids = np.fromiter(map(known.get, words, repeat(-1)), np.int64, len(words))
        new = np.flatnonzero(ids < 0)
        if len(new):
            fresh = list(dict.fromkeys(words[k] for k in new.tolist()))  # first seen first
            mapped = tokenizer.ascii_words("") is not None  # ASCII words are looked up unmapped
            model = [ascii_to_byte_level(w) if mapped and w.isascii() else w for w in fresh]
            known.update(zip(fresh, self.words.ids(model).tolist()))
            ids[new] = [known[words[k]] for k in new.tolist()]
        return ids

    def count_words(self, word_ids: Int64Array, freqs: Float64Array) -> StepCounts:
        """Counts for a multiset of known words given as (distinct ids, frequencies)."""
        word_ids = np.asarray(word_ids, np.int64)
        freqs = np.asarray(freqs, np.float64)
        self._ensure_encoded(word_ids)
        lengths = self._len[word_ids]
        tokens = self._gather(word_ids, lengths)
        weights = np.repeat(freqs, lengths)
        # Token ids are dense: a bincount by id, not np.unique's sort (a third of a small step's
        # counting). It adds each id's weights in the same order, so the sums are the same floats.
        token_ids = np.flatnonzero(np.bincount(tokens))
        token_counts = weighted_bincount(tokens, weights)[token_ids]
        pair_keys, pair_counts = self._pairs(word_ids, freqs, tokens=tokens, weights=weights)
        return StepCounts(
            token_ids=token_ids,
            token_counts=token_counts,
            pair_keys=pair_keys,
            pair_counts=pair_counts,
            n_bytes=int((self._word_bytes[word_ids] * freqs).sum()),
            n_tokens=int(weights.sum()),
        )

    def _pairs(
        self,
        word_ids: Int64Array,
        freqs: Float64Array,
        *,
        tokens: Int64Array | None = None,
        weights: Float64Array | None = None,
    ) -> tuple[Int64Array, Float64Array]:
        """The within-word pairs of encoded words (distinct ids, frequencies) and their counts."""
        lengths = self._len[word_ids]
        if tokens is None:
            tokens, weights = self._gather(word_ids, lengths), np.repeat(freqs, lengths)
        assert weights is not None  # given with the tokens (count_words), or made with them here
        # A pair starts at every position but a word's last one.
        not_last = np.ones(len(tokens), dtype=bool)
        not_last[np.cumsum(lengths)[lengths > 0] - 1] = False
        starts = np.flatnonzero(not_last)
        return count_pairs(tokens[starts], tokens[starts + 1], weights[starts])
