"""The merge graph: BPE's merge list seen as a DAG over the vocabulary (Ted-Tok section 4.1).

A merge ``(u, v) -> w`` gives edges ``u -> w`` and ``v -> w``. Base tokens (alphabet, specials)
have no parents; *sink tokens* are merged tokens that parent no merge: the only tokens Ted-Tok
may delete without breaking other merges.

>>> from tokenizer_service.bpe import BPETokenizer
>>> tok = BPETokenizer(vocab={"a": 0, "b": 1, "ab": 2, "abb": 3},
...                    merges=[("a", "b"), ("ab", "b")], pipeline={})
>>> g = MergeGraph(tok)
>>> g.parents["abb"], sorted(g.children["ab"]), sorted(g.sink_tokens)
(('ab', 'b'), ['abb'], ['abb'])
>>> sorted(g.descendants("a"))
['ab', 'abb']
"""

from __future__ import annotations

import copy
import weakref
from collections import defaultdict
from collections.abc import Iterable, Sequence
from functools import cached_property
from itertools import compress

from tokenizers import Tokenizer

from tokenizer_service.bpe import BYTE_FALLBACK_TOKENS, BPETokenizer, Merge, bpe_pieces, loaded_byte_fallback

BYTE_FALLBACK_TOKENS_SET = frozenset(BYTE_FALLBACK_TOKENS)

# Each version's unreachable tokens, found once: a version is validated as itself and again as
# the next one's parent (a second of Rust on every core at 262k tokens). A BPETokenizer never
# changes (its ``hf`` is cached as well), and its entry goes when it does.
_UNREACHABLE: weakref.WeakKeyDictionary[BPETokenizer, tuple[str, ...]] = weakref.WeakKeyDictionary()


class MergeGraph:
    """Parents, children and sinks of one tokenizer version (built once per version).

    ``parents[w]`` is the merge that actually forms ``w`` when BPE encodes w's own symbols: the
    last merge BPE performs. In classic BPE that is w's only merge; in tiktoken-style
    vocabularies (several merges per token) it is the one that wins the rank order, which is
    also the one that formed every emitted occurrence of w (merges never cross a token that is
    emitted, so inside a longer word w forms exactly as on its own). A token no merge path
    reaches (:meth:`formed_by` is None) keeps its first listed merge.
    ``producers[w]`` has every merge producing w, in rank order; ``children`` follows all of them.

    >>> tok = BPETokenizer(vocab={"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4, "abc": 5},
    ...                    merges=[("a", "b"), ("b", "c"), ("a", "bc"), ("ab", "c")], pipeline={})
    >>> MergeGraph(tok).parents["abc"]  # "abc" -> ab + c first, so (ab, c) forms it
    ('ab', 'c')
    """

    def __init__(self, tokenizer: BPETokenizer) -> None:
        self.tokenizer = tokenizer
        self.parents: dict[str, Merge] = {}
        self.producers: dict[str, list[Merge]] = defaultdict(list)
        children: dict[str, list[str]] = defaultdict(list)
        for merge, w in zip(tokenizer.merges, tokenizer.merge_outputs):  # the merges' own objects, no copies
            self.producers[w].append(merge)
            children[merge[0]].append(w)
            children[merge[1]].append(w)
        # Tuples, not sets: a set takes 216 bytes or more, and Gemma-3 has 123k parents.
        self.children: dict[str, tuple[str, ...]] = {t: tuple(dict.fromkeys(c)) for t, c in children.items()}
        ranks, formed = self.ranks, self._formed
        for w, merges in self.producers.items():
            if len(merges) == 1:
                self.parents[w] = merges[0]
                continue
            # What formed_by finds is kept: a residue removal asks about most of them again
            # (Gemma-3: 67k), and the producer's own object costs no second tuple.
            last = _formed_by(w, ranks)
            self.parents[w] = parent = _applied(merges, last)
            formed[w] = parent if parent == last else last

    @staticmethod
    def rank_table(merges: Sequence[Merge]) -> dict[Merge, int]:
        """Each merge's rank: its first position in the merge list."""
        # Backwards, so a merge listed twice keeps its first rank; no list of (rank, merge) pairs.
        return dict(zip(reversed(merges), reversed(range(len(merges)))))

    @cached_property
    def ranks(self) -> dict[Merge, int]:
        """Each merge's rank: its first position in the merge list."""
        return self.rank_table(self.tokenizer.merges)

    def formed_by(self, token: str) -> Merge | None:
        """The merge BPE performs last on the token's own symbols; None when no merge forms it.

        >>> tok = BPETokenizer(vocab={"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4, "abc": 5},
        ...                    merges=[("a", "b"), ("b", "c"), ("a", "bc")], pipeline={})
        >>> MergeGraph(tok).formed_by("ab"), MergeGraph(tok).formed_by("abc")
        (('a', 'b'), None)
        """
        formed = self._formed
        if token not in formed:  # remembered: a residue removal asks about each token in every attempt
            formed[token] = _formed_by(token, self.ranks)
        return formed[token]

    @cached_property
    def _formed(self) -> dict[str, Merge | None]:
        """What :meth:`formed_by` found so far, for the tokens it was asked about."""
        return {}

    def revised(self, tokenizer: BPETokenizer, *, removed: Iterable[str], added: Sequence[Merge]) -> "MergeGraph":
        """The graph of ``tokenizer``, derived from this one by a revision's edits (no full rebuild).

        ``removed`` tokens lose the merges that produced them; ``added`` merges are new.

        >>> tok = BPETokenizer(vocab={"a": 0, "b": 1, "ab": 2}, merges=[("a", "b")], pipeline={})
        >>> new = tok.replace_model(vocab={"a": 0, "b": 1, "ba": 2}, merges=[("b", "a")])
        >>> g = MergeGraph(tok).revised(new, removed=["ab"], added=[("b", "a")])
        >>> dict(g.parents), sorted(g.sink_tokens) == sorted(MergeGraph(new).sink_tokens)
        ({'ba': ('b', 'a')}, True)
        """
        graph = copy.copy(self)
        for derived in ("sink_tokens", "ranks", "_formed"):  # cached for the old tokenizer
            graph.__dict__.pop(derived, None)
        graph.tokenizer = tokenizer
        graph.parents = dict(self.parents)
        graph.producers = defaultdict(list, self.producers)
        graph.children = dict(self.children)
        for w in removed:
            del graph.parents[w]
            graph.children.pop(w, None)
            for u, v in graph.producers.pop(w):
                for parent in (u, v):
                    graph.children[parent] = tuple(c for c in graph.children.get(parent, ()) if c != w)
        for u, v in added:
            w = u + v
            graph.parents.setdefault(w, (u, v))
            graph.producers[w] = graph.producers.get(w, []) + [(u, v)]
            for parent in (u, v):
                held = graph.children.get(parent, ())
                graph.children[parent] = held if w in held else (*held, w)
        return graph

    @cached_property
    def sink_tokens(self) -> frozenset[str]:
        """Merged tokens that are not a parent of any merge; never base or special tokens."""
        # Set algebra on the dicts' keys, in C: a loop over every token took twice as long (~60 ms at 50k).
        with_children = compress(self.children, self.children.values())  # a removed child leaves ()
        return frozenset(self.parents.keys() & self.tokenizer.vocab.keys()).difference(
            with_children, self.tokenizer.base_tokens
        )

    def is_sink(self, token: str) -> bool:
        return token in self.parents and not self.children.get(token) and token not in self.tokenizer.base_tokens

    def descendants(self, token: str) -> set[str]:
        """Every token whose merge tree contains ``token`` (excluding itself)."""
        return self.descendants_of([token])

    def descendants_of(self, tokens: Iterable[str]) -> set[str]:
        """Every token whose merge tree contains one of ``tokens`` (one walk for them all).

        >>> tok = BPETokenizer(vocab={"a": 0, "b": 1, "ab": 2, "abb": 3}, merges=[("a", "b"), ("ab", "b")],
        ...                    pipeline={})
        >>> sorted(MergeGraph(tok).descendants_of(["ab", "abb"]))
        ['abb']
        """
        seen: set[str] = set()
        stack = [child for token in tokens for child in self.children.get(token, ())]
        while stack:
            t = stack.pop()
            if t not in seen:
                seen.add(t)
                stack.extend(self.children.get(t, ()))
        return seen


def unreachable_tokens(tokenizer: BPETokenizer | Tokenizer, *, chunk: int = 2048) -> list[str]:
    """Tokens whose own symbols do not BPE-encode to exactly that token, by id.

    Such a token can never be emitted (ByteSampler's check). Added tokens, special or not, are
    matched before BPE and are always reachable, and so are byte-fallback tokens (``<0xNN>``:
    emitted for the bytes of a character outside the vocabulary, never made of symbols). Works
    on a tokenizer loaded in ``tokenizers`` as well (a registry's checking process has only
    that). Every token is encoded, in batches of ``chunk`` tokens by the bare Rust model (no
    normalizer or pre-tokenizer: a token's own symbols, as :meth:`BPETokenizer.tokenize_word`),
    outside the GIL and on every core; only a batch that does not come back as its own ids is
    looked at token by token. A :class:`BPETokenizer`'s are found once and remembered (a loaded
    ``Tokenizer`` can be changed in place: its are found every time).

    >>> tok = BPETokenizer(vocab={"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4, "abc": 5},
    ...                    merges=[("a", "b"), ("b", "c"), ("a", "bc")], pipeline={})
    >>> unreachable_tokens(tok), unreachable_tokens(tok.hf), unreachable_tokens(tok)
    (['abc'], ['abc'], ['abc'])
    """
    if not isinstance(tokenizer, BPETokenizer):
        return _unreachable_tokens(tokenizer, chunk)
    known = _UNREACHABLE.get(tokenizer)
    if known is None:
        known = _UNREACHABLE[tokenizer] = tuple(_unreachable_tokens(tokenizer.hf, chunk))
    return list(known)  # the caller's to change


def _unreachable_tokens(hf: Tokenizer, chunk: int) -> list[str]:
    """What :func:`unreachable_tokens` finds, for a tokenizer loaded in ``tokenizers``."""
    vocab = hf.get_vocab(with_added_tokens=False)
    specials = frozenset(t.content for t in hf.get_added_tokens_decoder().values())
    if loaded_byte_fallback(hf):
        specials = specials | BYTE_FALLBACK_TOKENS_SET
    tokens = [t for t in vocab if t not in specials]
    batches = [tokens[k : k + chunk] for k in range(0, len(tokens), chunk)]
    encodings = Tokenizer(hf.model).encode_batch_fast(batches, is_pretokenized=True, add_special_tokens=False)
    differ = (
        batch for batch, encoding in zip(batches, encodings) if encoding.ids != list(map(vocab.__getitem__, batch))
    )
    return sorted(
        (t for batch in differ for t in batch if [piece.id for piece in hf.model.tokenize(t)] != [vocab[t]]),
        key=vocab.__getitem__,
    )


def merge_parents(tokenizer: BPETokenizer, tokens: Iterable[str]) -> dict[str, Merge]:
    """The merge that forms each of ``tokens`` (as ``MergeGraph.parents``), without building
    the whole graph: for a revision diff, which needs a few hundred of them.

    >>> tok = BPETokenizer(vocab={"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4, "abc": 5},
    ...                    merges=[("a", "b"), ("b", "c"), ("a", "bc"), ("ab", "c")], pipeline={})
    >>> merge_parents(tok, ["abc", "a"])
    {'abc': ('ab', 'c')}
    """
    wanted = set(tokens)
    producers: dict[str, list[Merge]] = defaultdict(list)
    # Only the few wanted merges reach Python code: the filter over all of them runs in C.
    for u, v in compress(tokenizer.merges, map(wanted.__contains__, tokenizer.merge_outputs)):
        producers[u + v].append((u, v))
    ranks = MergeGraph.rank_table(tokenizer.merges) if any(len(m) > 1 for m in producers.values()) else {}
    return {
        w: merges[0] if len(merges) == 1 else _applied(merges, _formed_by(w, ranks)) for w, merges in producers.items()
    }


def _formed_by(token: str, ranks: dict[Merge, int]) -> Merge | None:
    """The merge BPE performs last on the token's own symbols; None when no merge forms it."""
    pieces = bpe_pieces(token, ranks, until=2)
    merge = (pieces[0], pieces[1]) if len(pieces) == 2 else None
    return merge if merge in ranks else None


def _applied(producers: list[Merge], formed: Merge | None) -> Merge:
    """The producer that is ``formed``, the merge BPE applies last on the token's own symbols
    (the first listed when none is), as the producers list holds it (a graph of 500k merges holds
    no second copy of each).

    >>> _applied([("a", "bc"), ("ab", "c")], ("ab", "c")), _applied([("a", "bc"), ("ab", "c")], None)
    (('ab', 'c'), ('a', 'bc'))
    """
    return next((m for m in producers if m == formed), producers[0])
