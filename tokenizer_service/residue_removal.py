"""Encoding without residues (LiteToken section 4) and a residue-free ``tokenizer.json``.

Split & re-merge, exactly as the paper: encode with the full tokenizer; split every residue
occurrence recursively into its parents (the merge BPE actually applied) until no piece is a
residue; then, within each word, re-merge with the merges whose product is not a residue, in
rank order. It is lossless and never emits a residue.

The residue-free export is a standard BPE ``tokenizer.json``: residues leave the vocabulary,
merges that produce one go, and a surviving token whose merges needed a residue is rewired to
the merge of surviving tokens that BPE now reaches on its own bytes. A residue that some
surviving token cannot be formed without stays in the vocabulary as *scaffolding* (reported in
``ResidueRemoval.scaffolding``), so every surviving token stays reachable, which ``validate``
checks against the parent. Freed ids stay **holes**: every other
token keeps its id, so a model's embedding and output rows stay where they were, and no text
can ever encode to a hole (a placeholder token could be typed in). The removal is an ordinary
revision diff (``removed`` entries with their parents).

>>> from tokenizer_service.bpe import BPETokenizer
>>> tok = BPETokenizer(vocab={"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4, "abc": 5},
...                    merges=[("a", "b"), ("b", "c"), ("ab", "c")],
...                    pipeline={"pre_tokenizer": {"type": "WhitespaceSplit"}})
>>> lite = SplitRemerge(tok, ["ab"])
>>> [tok.id_to_token[i] for i in lite.encode("ab abc")]
['a', 'b', 'abc']
>>> removal = residue_free_tokenizer(tok, ["ab"])
>>> removal.tokenizer.merges, removal.rewired, removal.tokenizer.encode("ab abc")
((('b', 'c'), ('a', 'bc')), ['abc'], [0, 1, 5])
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, compress
from operator import itemgetter

from tokenizers import Encoding

from schemas.revision import DiffEntry
from tokenizer_service.bpe import BPETokenizer, Merge, bpe_pieces
from tokenizer_service.merge_graph import MergeGraph


@dataclass(frozen=True)
class LiteEncoding:
    """One document encoded three ways' worth: original ids, split size, split & re-merged ids."""

    original: list[int]
    split_tokens: int
    ids: list[int]


def _checked_residues(tokenizer: BPETokenizer, residues: Iterable[str]) -> frozenset[str]:
    """The residues as a set, refused with reasons if one is a base or special token or unknown."""
    residues = frozenset(residues)
    protected = residues & tokenizer.base_tokens
    if protected:
        raise ValueError(f"base or special tokens cannot be residues: {sorted(protected)[:5]}")
    unknown = residues - tokenizer.vocab.keys()
    if unknown:
        raise ValueError(f"residues not in the vocabulary: {sorted(unknown)[:5]}")
    return residues


class RanksWithout:
    """A merge's rank, as :func:`bpe.bpe_pieces` looks it up, with some merges left out: a view,
    where a copy of the table would take ~20 MB for every 500k merges.

    >>> ranks = RanksWithout({("a", "b"): 0, ("b", "c"): 1}, [("a", "b")])
    >>> ranks.get(("a", "b")), ranks.get(("b", "c")), bpe_pieces("abc", ranks)
    (None, 1, ['a', 'bc'])
    """

    def __init__(self, ranks: Mapping[Merge, int], left_out: Iterable[Merge]) -> None:
        self.ranks = ranks
        self.left_out = frozenset(left_out)

    def get(self, merge: Merge) -> int | None:
        return None if merge in self.left_out else self.ranks.get(merge)


class SplitRemerge:
    """Split & re-merge encoding on top of a tokenizer and a residue set (cached per word)."""

    def __init__(self, tokenizer: BPETokenizer, residues: Iterable[str], *, graph: MergeGraph | None = None) -> None:
        self.tokenizer = tokenizer
        self.graph = graph or MergeGraph(tokenizer)
        self.residues = _checked_residues(tokenizer, residues)
        self.residue_ids = frozenset(tokenizer.vocab[t] for t in self.residues)
        # Re-merging uses every merge whose product is not a residue, at its rank.
        self.ranks = RanksWithout(
            self.graph.ranks, compress(tokenizer.merges, map(self.residues.__contains__, tokenizer.merge_outputs))
        )
        self._split: dict[str, list[str]] = {}
        self._words: dict[tuple[int, ...], tuple[int, list[int]]] = {}

    def split(self, token: str) -> list[str]:
        """A token's pieces once every residue is split into its parents, recursively.

        >>> tok = BPETokenizer(vocab={"a": 0, "b": 1, "ab": 2, "abb": 3}, merges=[("a", "b"), ("ab", "b")],
        ...                    pipeline={})
        >>> SplitRemerge(tok, ["ab", "abb"]).split("abb")
        ['a', 'b', 'b']
        """
        if token not in self.residues:
            return [token]
        pieces = self._split.get(token)
        if pieces is None:
            u, v = self.graph.parents[token]
            pieces = self._split[token] = self.split(u) + self.split(v)
        return pieces

    def encode_word(self, ids: Sequence[int]) -> tuple[int, list[int]]:
        """(number of tokens after the split, re-merged ids) for one word's original ids."""
        key = tuple(ids)
        cached = self._words.get(key)
        if cached is None:
            id_to_token, vocab = self.tokenizer.id_to_token, self.tokenizer.vocab
            pieces = [p for i in key for p in self.split(id_to_token[i])]
            cached = self._words[key] = (len(pieces), [vocab[p] for p in bpe_pieces(pieces, self.ranks)])
        return cached

    def encode_batch(self, texts: Sequence[str]) -> list[LiteEncoding]:
        """Encode with the full tokenizer (Rust), then split & re-merge the words with residues."""
        return self.apply(self.tokenizer.hf.encode_batch(list(texts), add_special_tokens=False))

    def apply(self, encodings: Sequence[Encoding]) -> list[LiteEncoding]:
        """Split & re-merge full-tokenizer encodings (``tokenizers.Encoding``: ids and word ids)."""
        out, residue_set = [], self.residue_ids
        for enc in encodings:
            ids = enc.ids
            if residue_set.isdisjoint(ids):
                out.append(LiteEncoding(original=ids, split_tokens=len(ids), ids=ids))
                continue
            words, new_ids, n_split, start = enc.word_ids, [], 0, 0
            while start < len(ids):
                end = start + 1
                while end < len(ids) and words[start] is not None and words[end] == words[start]:
                    end += 1
                word = ids[start:end]
                if any(i in residue_set for i in word):
                    size, remerged = self.encode_word(word)
                    n_split += size
                    new_ids.extend(remerged)
                else:
                    n_split += len(word)
                    new_ids.extend(word)
                start = end
            out.append(LiteEncoding(original=ids, split_tokens=n_split, ids=new_ids))
        return out

    def encode(self, text: str) -> list[int]:
        return self.encode_batch([text])[0].ids


@dataclass(frozen=True)
class ResidueRemoval:
    """The residue-free tokenizer, its diff entries and what the export had to do.

    ``scaffolding``: residues kept because some surviving token cannot be formed without them
    (BPE would end in three or more pieces); ``rewired``: surviving tokens whose merge changed.
    """

    tokenizer: BPETokenizer
    entries: list[DiffEntry]
    removed: list[str]
    scaffolding: list[str]
    rewired: list[str]


def residue_free_tokenizer(
    tokenizer: BPETokenizer, residues: Iterable[str], *, graph: MergeGraph | None = None
) -> ResidueRemoval:
    """Remove the residues from the vocabulary and rewire the merges that needed them.

    Tokens are decided shortest first, so every merge that can act inside a token's bytes is
    settled before the token is. A surviving token keeps each of its merges whose parents
    survive, at its rank; if BPE on its bytes (with the settled merges) now ends in two pieces
    that no kept merge joins, a merge of those pieces is added just before the token's first
    rank. If it ends in three or more pieces no merge can form it: the residues in its merge
    tree stay, as scaffolding, and the export is redone. Tokens that no merge reached before
    (whole-word entries of ``ignore_merges`` vocabularies) keep what they had.
    """
    graph = graph or MergeGraph(tokenizer)
    residues = _checked_residues(tokenizer, residues)
    order = sorted(graph.producers, key=lambda t: (len(t), _first_rank(graph, t)))
    removed = set(residues)
    while True:
        merges, stuck, rewired = _rewire(graph, order, removed)
        if not stuck:
            break
        removed -= {t for w in stuck for t in _topmost_removed(graph, w, removed)}
    vocab = {t: i for t, i in tokenizer.vocab.items() if t not in removed}
    old = tokenizer.vocab
    entries = [
        DiffEntry(
            id=old[t],
            kind="removed",
            old_token=t,
            new_token=None,
            parents=[old[graph.parents[t][0]], old[graph.parents[t][1]]],
        )
        for t in sorted(removed, key=lambda t: old[t])
    ]
    return ResidueRemoval(
        tokenizer=tokenizer.replace_model(vocab=vocab, merges=merges),
        entries=entries,
        removed=sorted(removed, key=lambda t: old[t]),
        scaffolding=sorted(residues - removed, key=lambda t: old[t]),
        rewired=rewired,
    )


def _first_rank(graph: MergeGraph, token: str) -> int:
    """The rank of the first merge producing ``token`` (producers are kept in rank order)."""
    return graph.ranks[graph.producers[token][0]]


def _rewire(graph: MergeGraph, order: list[str], removed: set[str]) -> tuple[list[Merge], list[str], list[str]]:
    """One export attempt: (merges in rank order, tokens no merge can form, rewired tokens).

    BPE on a token's bytes forms exactly the tokens of its merge tree, so a token whose tree
    holds no removed token, and whose bytes hold no rewired token (whose new merge could fire
    inside it), encodes as before and keeps its merges unchecked: Python BPE runs on the
    removed tokens' descendants only (Gemma-3: 262k tokens, three attempts).
    """
    affected = graph.descendants_of(removed)
    ranks, producers = graph.ranks, graph.producers
    kept: dict[Merge, float] = {}  # merge -> rank key; a rewired merge sits just before its token's first
    stuck: list[str] = []
    rewired: list[str] = []
    rewired_set: set[str] = set()  # the rewired tokens again, and their lengths, for _holds_any
    rewired_lengths: set[int] = set()
    # Tokens that keep all their merges unchecked, put in ``kept`` together once the next length
    # starts: BPE on a token stops at two pieces, so it only looks up merges of shorter tokens.
    unchecked: list[str] = []
    length = 0
    for w in order:
        if len(w) != length:
            _keep_all(kept, unchecked, producers, ranks)
            unchecked.clear()
            length = len(w)
        if w in removed:
            continue
        if w in affected:
            survivors = [(u, v) for u, v in producers[w] if u not in removed and v not in removed]
        elif rewired and _holds_any(w, rewired_set, rewired_lengths):
            survivors = producers[w]  # every child of a removed token is affected: all its merges survive
        else:
            unchecked.append(w)
            continue
        pieces = bpe_pieces(w, kept, until=2)
        reached = len(pieces) == 2 and (pieces[0], pieces[1]) in survivors
        if not reached and graph.formed_by(w) is not None:
            if len(pieces) != 2:
                stuck.append(w)
                continue
            kept[(pieces[0], pieces[1])] = _first_rank(graph, w) - 0.5
            rewired.append(w)
            rewired_set.add(w)
            rewired_lengths.add(len(w))
        for merge in survivors:
            kept.setdefault(merge, ranks[merge])
    _keep_all(kept, unchecked, producers, ranks)
    # Every key's rank is its own (a rewired token's comes from its first merge): the order in
    # which they were put in does not matter.
    return [m for m, _ in sorted(kept.items(), key=itemgetter(1))], stuck, rewired


def _keep_all(
    kept: dict[Merge, float],
    tokens: Sequence[str],
    producers: Mapping[str, Sequence[Merge]],
    ranks: Mapping[Merge, int],
) -> None:
    """Keep every merge of ``tokens`` at its rank, in one pass in C (a merge makes one token only,
    so none is in ``kept`` yet).

    >>> kept = {}
    >>> _keep_all(kept, ["ab"], {"ab": [("a", "b")], "bc": [("b", "c")]}, {("a", "b"): 0, ("b", "c"): 1})
    >>> kept
    {('a', 'b'): 0}
    """
    merges = list(chain.from_iterable(map(producers.__getitem__, tokens)))
    kept.update(zip(merges, map(ranks.__getitem__, merges)))


def _holds_any(word: str, texts: set[str], lengths: set[int]) -> bool:
    """Whether one of ``texts`` (their lengths in ``lengths``) occurs inside ``word``, shorter than it.

    >>> _holds_any("abcd", {"bc", "xyz"}, {2, 3}), _holds_any("abcd", {"xyz"}, {3})
    (True, False)
    """
    return any(word[i : i + n] in texts for n in lengths if n < len(word) for i in range(len(word) - n + 1))


def _topmost_removed(graph: MergeGraph, token: str, removed: set[str]) -> set[str]:
    """The removed tokens of ``token``'s merge tree nearest its top (none below another one).

    >>> from tokenizer_service.bpe import BPETokenizer
    >>> tok = BPETokenizer(vocab={"a": 0, "b": 1, "ab": 2, "abb": 3, "aabb": 4},
    ...                    merges=[("a", "b"), ("ab", "b"), ("a", "abb")], pipeline={})
    >>> sorted(_topmost_removed(MergeGraph(tok), "aabb", {"ab", "abb"}))
    ['abb']
    """
    found, stack = set(), list(graph.parents.get(token, ()))
    while stack:
        t = stack.pop()
        if t in removed:
            found.add(t)
        else:
            stack.extend(graph.parents.get(t, ()))
    return found
