"""Exact byte-level probabilities of a token-level language model (ByteSampler: Hayase et al.,
"Sampling from Your Language Model One Byte at a Time"): the probability that the model's text begins with given
bytes, whatever tokens it would use to write them; the next-byte distribution; sampling bytes;
ensembles of models whose vocabularies differ (two versions of a lineage).

A token sequence T is *valid* for a tokenizer when ``encode(decode(T)) == T``: the tokenizer could
have written it. The model's probability that its text begins with the bytes x (the paper's
Eq. 3) sums, over every valid T that *covers* x (all tokens but the last decode to a strict
prefix of x; the whole decodes to bytes that begin with x), the product of the model's
next-token probabilities, from the context ``[bos]``:

    P(x) = Σ_{T covers x, T valid} Π_i p(T_i | bos, T_<i)

The covering sequences form the *Valid Covering Tree* (section 3): a trunk every sequence shares,
then a few branches. Each leaf is found by where its last token starts (k) and which token it is
(t): a valid T is the encoding of the text it decodes to, so the leaf is ``encode(x[:k] + t)``
whenever that encoding ends in t exactly where t starts, and nothing else is a leaf. k runs over
the last ``longest token`` bytes only (t must reach x's end), and t over the tokens that begin
with ``x[k:]`` (a sorted index). The check is the tokenizer's own encoding, so every pre-tokenizer
(appendix C.3), ``ignore_merges`` and merge lists out of normal form (C.4) are handled as the
tokenizer handles them. Pairwise validity (Proposition 3.1) is :func:`valid_pair`.

The tree is scored in one pass of the model (section 3.1, C.1): the trunk once, keeping its keys
and values, then every branch in one batch on top of that cache. ``model_tokens`` counts the
positions the model evaluated (one per inner node of the tree, the root's ``bos`` included):
the canonical tokenization of x alone needs ``len(encode(x))``.

    model = ByteLevelModel.load("exported-model/")       # a Hugging Face model folder
    model.prefix("def eule").log_prob                    # ln P(the text begins with b"def eule")
    model.next_byte("def eule")                          # {byte: probability}, summing to 1
"""

from __future__ import annotations

import bisect
import copy
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tokenizer_service.bpe import BPETokenizer, bpe_pieces
from tokenizer_service.errors import TokmaintError

LN2 = math.log(2)
WHITESPACE = frozenset(b" \t\n\r\x0b\x0c")
BATCH_VALUES = 1 << 23  # log-probabilities one batch of branches may hold (64 MB of float64)


class ContextFull(TokmaintError):
    """A text longer than the model reads in one context."""


class ByteVocabulary:
    """A tokenizer's tokens as bytes, indexed by prefix, with its encoder for the validity check.

    >>> vocab = ByteVocabulary(BPETokenizer.train(["ab ab abc"] * 3, vocab_size=260))
    >>> sorted(vocab.token_bytes[i] for i in vocab.starting_with(b"a"))
    [b'a', b'ab']
    >>> ids = vocab.tokenizer.vocab
    >>> vocab.valid(vocab.tokenizer.encode("ab abc")), vocab.valid([ids["a"], ids["b"]])
    (True, False)
    """

    def __init__(self, tokenizer: BPETokenizer) -> None:
        if tokenizer.pipeline.get("normalizer") or (not tokenizer.byte_level and tokenizer.space_symbol):
            raise TokmaintError(
                "byte-level probabilities need a tokenizer whose tokens spell the text byte for "
                "byte (byte-level BPE, or character BPE, without a normalizer); this one rewrites "
                "the text first"
            )
        self.tokenizer = tokenizer
        self.token_bytes: dict[int, bytes] = {i: tokenizer.token_bytes(t) for i, t in tokenizer.id_to_token.items()}
        ordered = sorted((b, i) for i, b in self.token_bytes.items() if b)
        self._sorted_bytes = [b for b, _ in ordered]
        self._sorted_ids = [i for _, i in ordered]
        self.longest = max(map(len, self._sorted_bytes))
        # GPT-2's pre-tokenizer never runs a pre-token across a space that follows a byte that is
        # no whitespace (only a pre-token's first character may be a space): texts that share
        # what comes before such a space share its encoding, and only the rest is encoded anew.
        self._splits_at_spaces = tokenizer.plain_gpt2_pre_tokenizer and not any(
            any(c.isspace() for c in t) for t in tokenizer.added_tokens
        )
        self._heads: dict[bytes, list[int] | None] = {}
        self.pairs: PairValidity | None = None  # valid_pair's, made when first asked

    def starting_with(self, prefix: bytes) -> list[int]:
        """The ids of the tokens whose bytes begin with ``prefix`` (all of them for b"")."""
        lo = bisect.bisect_left(self._sorted_bytes, prefix)
        hi = lo
        while hi < len(self._sorted_bytes) and self._sorted_bytes[hi].startswith(prefix):
            hi += 1
        return self._sorted_ids[lo:hi]

    def decode(self, ids: Sequence[int]) -> bytes:
        return b"".join(self.token_bytes[i] for i in ids)

    def encode(self, texts: list[bytes]) -> list[list[int] | None]:
        """Each text's encoding (None where the bytes are not UTF-8 text: no valid sequence
        decodes to them)."""
        strings, where = [], []
        for k, text in enumerate(texts):
            try:
                strings.append(text.decode("utf-8"))
                where.append(k)
            except UnicodeDecodeError:
                pass
        encoded: list[list[int] | None] = [None] * len(texts)
        for k, ids in zip(where, self.tokenizer.encode_batch(strings)):
            encoded[k] = ids
        return encoded

    def split_point(self, data: bytes, *, at_most: int) -> int:
        """A position c ≤ ``at_most`` of ``data`` such that every text that begins with
        ``data[:c + 1]`` is encoded as ``data[:c]``'s encoding followed by the rest's; 0 when there
        is none (or the pre-tokenizer is not GPT-2's).

        >>> vocab = ByteVocabulary(BPETokenizer.train(["ab ab abc"] * 3, vocab_size=260))
        >>> vocab.split_point(b"ab ab  ab", at_most=8), vocab.split_point(b"ab ab  ab", at_most=4)
        (5, 2)
        >>> vocab.split_point(b"ab  ab", at_most=5), vocab.split_point(b" ab", at_most=2)  # not after a space
        (2, 0)
        >>> vocab.split_point("a ab\u00a0 ab".encode(), at_most=7)  # nor after a no-break space
        1
        """
        if not self._splits_at_spaces:
            return 0
        c = data.rfind(b" ", 1, at_most + 1)
        # The character before must be ASCII and no whitespace: a no-break or ideographic space
        # before the space would join it in one pre-token.
        while c > 0 and (data[c - 1] >= 0x80 or data[c - 1] in WHITESPACE):
            c = data.rfind(b" ", 1, c)
        return max(c, 0)

    def head(self, data: bytes) -> list[int] | None:
        """``data``'s encoding (None for bytes that are not text), the last few kept: the trees of
        one text's prefixes share theirs."""
        if data not in self._heads:
            if len(self._heads) > 64:
                self._heads.clear()
            self._heads[data] = self.encode([data])[0]
        return self._heads[data]

    def writings(self, texts: list[bytes]) -> list[list[tuple[int, ...]]]:
        r"""How the tokenizer writes each of ``texts``: its encoding; for bytes that end inside a
        character, the tokens up to that end in the encodings of the character's completions
        (:func:`completions`) that have a token boundary there, each once (none: no text begins
        so); for other bytes that are not text, none.

        >>> vocab = ByteVocabulary(BPETokenizer.train(["ab é"] * 3, vocab_size=258))
        >>> vocab.writings([b"ab", b"\xc3", b"\xff"])  # é is two byte tokens here: \xc3 is written alone
        [[(256,)], [(127,)], []]
        """
        jobs: list[tuple[int, bytes, int | None]] = []  # (text, bytes to encode, where the text ends in them)
        for k, text in enumerate(texts):
            partial = _incomplete_end(text)
            if partial == 0:
                jobs.append((k, text, None))
            elif partial > 0:
                jobs.extend((k, text + w, len(text)) for w in completions(text[len(text) - partial :]))
        found: list[dict[tuple[int, ...], None]] = [{} for _ in texts]  # ordered sets
        for (k, _, end), ids in zip(jobs, self.encode([data for _, data, _ in jobs])):
            if ids is None:
                continue
            if end is None:
                found[k][tuple(ids)] = None
                continue
            ends = np.cumsum([len(self.token_bytes[i]) for i in ids]).tolist()
            if end in ends:
                found[k][tuple(ids[: ends.index(end) + 1])] = None
        return [list(f) for f in found]

    def valid(self, ids: Sequence[int]) -> bool:
        """True when the tokenizer could have written ``ids``: ``encode(decode(ids)) == ids``, or
        for tokens that end inside a character, so for some completion of it (:meth:`writings`)."""
        return tuple(ids) in self.writings([self.decode(ids)])[0]


def _incomplete_end(data: bytes) -> int:
    r"""How many bytes at the end of ``data`` begin a character they do not finish: 0 for UTF-8
    text, -1 for bytes that are not text otherwise.

    >>> _incomplete_end("é".encode()), _incomplete_end("aé".encode()[:2]), _incomplete_end(b"\xff")
    (0, 1, -1)
    """
    try:
        data.decode("utf-8")
        return 0
    except UnicodeDecodeError as exc:
        if exc.reason == "unexpected end of data" and exc.end == len(data):
            return len(data) - exc.start
        return -1


def completions(partial: bytes) -> list[bytes]:
    r"""The bytes that finish the character ``partial`` begins: every value of its next byte (at
    most 64), the bytes after it the lowest that make a character.

    >>> len(completions(b"\xc3")), completions(b"\xe6\x97")[:2], len(completions(b"\xf0"))
    (64, [b'\x80', b'\x81'], 48)
    """
    lead = partial[0]
    size = 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
    # The second byte's range where the lead narrows it (no overlong forms, no surrogates, no
    # code point past U+10FFFF); 0x80-0xBF otherwise.
    low, high = (
        {0xE0: (0xA0, 0xBF), 0xED: (0x80, 0x9F), 0xF0: (0x90, 0xBF), 0xF4: (0x80, 0x8F)}.get(lead, (0x80, 0xBF))
        if len(partial) == 1
        else (0x80, 0xBF)
    )
    rest = bytes([0x80] * (size - len(partial) - 1))
    return [bytes([b]) + rest for b in range(low, high + 1)]


class PairValidity:
    """Proposition 3.1 for one version: whether the tokenizer writes two tokens' bytes as exactly
    these two tokens, decided from the merges at their boundary rather than by encoding. A
    sequence is valid when each of its pairs is (for BPE within a pre-token; a pre-tokenizer's
    split can depend on more than two tokens, which is why :func:`covering_tree` checks each leaf
    whole).

    The pre-tokenizer first: the pair's text must be the two tokens as two pre-tokens (each its
    own encoding), or one pre-token. In one pre-token, BPE's merge trajectories at the boundary
    decide: undo the later-made of the two tokens' last merges, step by step, and the pair is
    invalid as soon as a merge across the boundary would have come first (van Antwerpen and
    Neubeck's check). Each token's last merge and its place in the order are the merge list's
    normal form (appendix C.4): the merge BPE applies last on the token's own bytes
    (``MergeGraph.parents``), placed no earlier than the merges that make its two parts.

    >>> vocab = ByteVocabulary(BPETokenizer.train(["ab ab abc"] * 3, vocab_size=260))
    >>> pairs, ids = PairValidity(vocab), vocab.tokenizer.vocab
    >>> pairs(ids["ab"], ids["Ġab"]), pairs(ids["a"], ids["b"]), pairs(ids["Ġab"], ids["c"]), pairs(ids["ab"], ids["c"])
    (True, False, False, True)
    """

    def __init__(self, vocab: ByteVocabulary) -> None:
        from tokenizer_service.merge_graph import MergeGraph

        self.vocab = vocab
        tokenizer = vocab.tokenizer
        self.parents = MergeGraph(tokenizer).parents
        self.ranks = MergeGraph.rank_table(tokenizer.merges)
        self._keys: dict[str, tuple[float, float] | None] = {}
        hf = tokenizer.hf
        # Text the pre-tokenizer sees as it is (no normalizer, no added tokens in the way):
        # otherwise the pair is encoded.
        self._direct = hf.normalizer is None
        self._pre_tokenizer = hf.pre_tokenizer

    def __call__(self, left: int, right: int) -> bool:
        vocab, tokenizer = self.vocab, self.vocab.tokenizer
        a, b = tokenizer.id_to_token[left], tokenizer.id_to_token[right]
        try:
            text = (vocab.token_bytes[left] + vocab.token_bytes[right]).decode("utf-8")
        except UnicodeDecodeError:
            text = None
        if text is None or not self._direct or a in tokenizer.added_tokens or b in tokenizer.added_tokens:
            return vocab.valid([left, right])
        pieces = [text] if self._pre_tokenizer is None else [p for p, _ in self._pre_tokenizer.pre_tokenize_str(text)]
        if pieces == [a, b]:  # two pre-tokens: each must be written alone as itself
            return tokenizer.tokenize_words([a, b]) == [[left], [right]]
        if pieces != [a + b]:
            return False
        if tokenizer.ignore_merges and a + b in tokenizer.vocab:  # a whole pre-token in the vocabulary: taken as is
            return False
        return self._boundary_holds(a, b)

    def _key(self, token: str) -> tuple[float, float] | None:
        """Where the merge that makes ``token`` comes in the normal form's order (its rank, moved
        after the merges of its parts where it came before them), (-1, -1) for a base token; None
        when BPE alone never makes it from its own bytes."""
        if token not in self._keys:
            merge = self.parents.get(token)
            if merge is None:
                key: tuple[float, float] | None = (-1, -1)
            elif bpe_pieces(token, self.ranks) != [token]:
                key = None
            else:
                left, right = self._key(merge[0]), self._key(merge[1])
                rank = self.ranks[merge]
                key = None if left is None or right is None else (max(rank, left[0], right[0]), rank)
            self._keys[token] = key
        return self._keys[token]

    def _boundary_holds(self, a: str, b: str) -> bool:
        """True when BPE on a's and b's symbols ends as [a, b]: no merge across the boundary fires
        before the merges inside them."""
        ka, kb = self._key(a), self._key(b)
        if ka is None or kb is None:
            return False
        limit, inclusive = None, False  # a crossing merge that comes before the limit wins
        while True:
            rank = self.ranks.get((a, b))
            if rank is not None:
                crossing = (max(rank, ka[0], kb[0]), rank)
                if limit is None or crossing < limit or (inclusive and crossing == limit):
                    return False
            if ka > kb:  # a's last merge came later: undo it, keep its right part
                limit, inclusive = ka, False
                a = self.parents[a][1]
                ka = self._key(a)
            elif kb == (-1, -1):  # both are base tokens: nothing left to undo
                return True
            else:  # undo b's last merge, keep its left part (a tie goes to the left)
                limit, inclusive = kb, True
                b = self.parents[b][0]
                kb = self._key(b)


def valid_pair(vocab: ByteVocabulary, left: int, right: int) -> bool:
    """Proposition 3.1's check of one pair (:class:`PairValidity`, made once a vocabulary).

    >>> vocab = ByteVocabulary(BPETokenizer.train(["ab ab abc"] * 3, vocab_size=260))
    >>> valid_pair(vocab, vocab.tokenizer.vocab["ab"], vocab.tokenizer.vocab["Ġab"])
    True
    """
    if vocab.pairs is None:
        vocab.pairs = PairValidity(vocab)
    return vocab.pairs(left, right)


@dataclass(frozen=True)
class CoveringTree:
    """The Valid Covering Tree of ``prefix``: its leaves (token sequences, ``bos`` not included)
    and, with ``extended``, the leaves of every one-byte extension of it instead (grouped by the
    byte after ``prefix`` for the next-byte distribution)."""

    prefix: bytes
    leaves: tuple[tuple[int, ...], ...]
    extended: bool = False

    @cached_property
    def parents(self) -> tuple[tuple[int, ...], ...]:
        """The leaves' parents (their sequences but the last token), distinct and sorted."""
        return tuple(sorted({leaf[:-1] for leaf in self.leaves}))

    @cached_property
    def trunk(self) -> tuple[int, ...]:
        """The tokens every covering sequence shares, from the root (fully determined).

        >>> CoveringTree(b"", ((1, 2, 3), (1, 2, 4, 5), (1, 2, 4, 6))).trunk
        (1, 2)
        """
        if not self.parents:
            return ()
        return self.parents[0][: _common(self.parents[0], self.parents[-1])]  # the sorted ends' is everyone's

    @cached_property
    def branches(self) -> tuple[tuple[int, ...], ...]:
        """The parents no other parent continues: the paths the model reads past the trunk.

        >>> CoveringTree(b"", ((1, 2, 3), (1, 2, 4, 5), (1, 2, 4, 6), (1, 2, 4, 5, 7))).branches
        ((1, 2, 4, 5),)
        """
        parents = self.parents
        return tuple(p for p, after in zip(parents, parents[1:] + (None,)) if after is None or after[: len(p)] != p)

    @cached_property
    def inner_nodes(self) -> int:
        """How many contexts the leaves need a next-token distribution of (the root ``[bos]``
        included): the positions the model evaluates.

        >>> CoveringTree(b"", ((1, 2, 3), (1, 2, 4, 5), (1, 2, 4, 6))).inner_nodes
        4
        """
        if not self.leaves:
            return 0
        parents = self.parents
        return 1 + sum(len(p) - _common(p, before) for p, before in zip(parents, ((),) + parents[:-1]))


def _common(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    """The length of the common start of a and b."""
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def covering_tree(vocab: ByteVocabulary, prefix: bytes, *, extended: bool = False) -> CoveringTree:
    """The Valid Covering Tree of ``prefix`` (``extended``: of ``prefix`` and one more byte, any).

    A leaf is the encoding of ``prefix[:k] + t`` for a token t that begins with ``prefix[k:]``,
    when that encoding ends in t, starting at k; ``extended`` also asks t to reach one byte past
    ``prefix`` (k may then be ``len(prefix)``).

    >>> tok = BPETokenizer.train(["ab ab abc"] * 3, vocab_size=260)
    >>> vocab = ByteVocabulary(tok)
    >>> sorted(vocab.decode(leaf) for leaf in covering_tree(vocab, b"ab a").leaves)  # Ġa, Ġab, Ġabc
    [b'ab a', b'ab ab', b'ab abc']
    >>> after = [vocab.decode(leaf)[4:] for leaf in covering_tree(vocab, b"ab a", extended=True).leaves]
    >>> # After Ġa: every ASCII byte, the 51 lead bytes of longer characters; Ġab, Ġabc.
    >>> len(after), sorted(after)[32:35]
    (183, [b' ', b' ab', b' abc'])
    """
    n = len(prefix)
    top = n + 1 if extended else n
    candidates: list[tuple[int, int]] = []  # (k, t)
    for k in range(max(0, top - vocab.longest), top):
        rest = prefix[k:]
        for t in vocab.starting_with(rest):
            if not extended or len(vocab.token_bytes[t]) > n - k:
                candidates.append((k, t))
    # What every candidate shares up to a split point is encoded once (ByteVocabulary.split_point).
    c = vocab.split_point(prefix, at_most=max(0, top - vocab.longest))
    head = vocab.head(prefix[:c]) if c else []
    if head is None:  # no text: nothing valid decodes to it
        return CoveringTree(prefix, (), extended)
    tails = [prefix[c:k] + vocab.token_bytes[t] for k, t in candidates]
    leaves = []
    for (k, t), tail, writings in zip(candidates, tails, vocab.writings(tails)):
        for ids in writings:
            if ids[-1] == t and len(tail) - len(vocab.token_bytes[t]) == k - c and vocab.decode(ids) == tail:
                leaves.append(tuple(head) + ids)
    return CoveringTree(prefix, tuple(leaves), extended)


@dataclass(frozen=True)
class PrefixProbability:
    """ln P(the model's bytes begin with ``prefix``) over its Valid Covering Tree, that of its
    canonical tokenization alone, and the positions the model evaluated."""

    prefix: bytes
    log_prob: float
    log_prob_canonical: float
    model_tokens: int
    leaves: int

    @property
    def bits_per_byte(self) -> float:
        return -self.log_prob / LN2 / max(1, len(self.prefix))

    @property
    def bits_per_byte_canonical(self) -> float:
        return -self.log_prob_canonical / LN2 / max(1, len(self.prefix))


class ByteLevelModel:
    """A causal LM and the tokenizer version it was trained with, as a model of bytes."""

    def __init__(self, model: torch.nn.Module, tokenizer: BPETokenizer, *, bos_token_id: int) -> None:
        self.model = model.eval()
        self.vocab = ByteVocabulary(tokenizer)
        self.bos_token_id = bos_token_id
        config = model.config
        self.max_positions: int = getattr(config, "n_positions", None) or config.max_position_embeddings

    @classmethod
    def load(cls, path: str | Path, *, device: str | None = None) -> "ByteLevelModel":
        """A Hugging Face model folder (``tokmaint trainer export``'s) or a trainer checkpoint
        (``trainer.export.load_model``)."""
        from trainer.export import load_model

        model, tokenizer, _ = load_model(path, device=device)
        return cls(model, tokenizer, bos_token_id=model.config.bos_token_id)

    # ----- the model over a tree ------------------------------------------------------------
    @torch.no_grad()
    def leaf_log_probs(self, tree: CoveringTree) -> np.ndarray:
        """ln P of each leaf of ``tree`` (in its order): the model's plain softmax over its whole
        vocabulary along the leaf, from ``[bos]``.

        The longest branch (the spine: the trunk and on) is read once and its keys and values
        kept. Every other branch is read on that cache cropped to where it leaves the spine, the
        branches that leave it at the same place in one right-padded batch (a causal model's
        padding only follows what is read). Of each position's distribution only the
        probabilities of the tokens that follow there in the tree are kept."""
        if not tree.leaves:
            return np.zeros(0)
        deepest = max(map(len, tree.leaves))
        if deepest > self.max_positions:
            raise ContextFull(f"the text needs {deepest} positions, more than the model's {self.max_positions}")
        device = next(self.model.parameters()).device
        parents = tree.parents
        # The tokens whose probability is needed after each context: the leaves' last tokens
        # after their parents, and the parents' own tokens along them (walked as a trie: sorted,
        # each parent adds what it does not share with the one before).
        needed: dict[tuple[int, ...], set[int]] = defaultdict(set)
        for leaf in tree.leaves:
            needed[leaf[:-1]].add(leaf[-1])
        for p, before in zip(parents, ((),) + parents[:-1]):
            for i in range(_common(p, before), len(p)):
                needed[p[:i]].add(p[i])
        found: dict[tuple[int, ...], dict[int, float]] = {}

        def keep(context: tuple[int, ...], log_probs: np.ndarray) -> None:
            if context in needed and context not in found:
                found[context] = {t: float(log_probs[t]) for t in needed[context]}

        branches = tree.branches
        spine = max(branches, key=len)
        out = self.model(input_ids=torch.tensor([[self.bos_token_id, *spine]], device=device), use_cache=True)
        spine_lp = torch.log_softmax(out.logits[0].double(), dim=-1).cpu().numpy()
        for i in range(len(spine) + 1):
            keep(spine[:i], spine_lp[i])
        by_depth: dict[int, list[tuple[int, ...]]] = defaultdict(list)
        for branch in branches:
            if branch != spine:
                by_depth[_common(branch, spine)].append(branch)
        vocab_size = spine_lp.shape[-1]
        for depth, group in sorted(by_depth.items()):
            width = max(len(b) for b in group) - depth
            rows = max(1, min(len(group), BATCH_VALUES // (width * vocab_size)))
            for start in range(0, len(group), rows):
                chunk = group[start : start + rows]
                ids = torch.zeros((len(chunk), width), dtype=torch.long)
                for row, branch in enumerate(chunk):
                    ids[row, : len(branch) - depth] = torch.tensor(branch[depth:])
                cache = copy.deepcopy(out.past_key_values)
                cache.crop(depth - len(spine))  # keep [bos] and the spine's first ``depth`` tokens
                cache.batch_repeat_interleave(len(chunk))
                logits = self.model(input_ids=ids.to(device), past_key_values=cache, use_cache=True).logits
                branch_lp = torch.log_softmax(logits.double(), dim=-1).cpu().numpy()
                for row, branch in enumerate(chunk):
                    for i in range(len(branch) - depth):
                        keep(branch[: depth + i + 1], branch_lp[row, i])
        path: dict[tuple[int, ...], float] = {}
        sums = [0.0]  # ln P along the parent before, by length
        for p, before in zip(parents, ((),) + parents[:-1]):
            sums = sums[: _common(p, before) + 1]
            for i in range(len(sums) - 1, len(p)):
                sums.append(sums[-1] + found[p[:i]][p[i]])
            path[p] = sums[len(p)]
        return np.array([path[leaf[:-1]] + found[leaf[:-1]][leaf[-1]] for leaf in tree.leaves])

    def prefix(self, text: str | bytes) -> PrefixProbability:
        """ln P(the model's text begins with ``text``): the sum over its Valid Covering Tree;
        beside it, the product for ``text``'s canonical tokenization alone (one of the leaves;
        -inf for bytes that are not text, ending inside a character)."""
        data = text.encode("utf-8") if isinstance(text, str) else text
        if not data:
            return PrefixProbability(data, 0.0, 0.0, 0, 0)
        tree = covering_tree(self.vocab, data)
        scores = self.leaf_log_probs(tree)
        canonical = self.vocab.encode([data])[0]
        if canonical is None:  # bytes that end inside a character: no text is written so
            canonical_lp = -math.inf
        elif tuple(canonical) in tree.leaves:  # always, for a tokenizer whose tokens spell the text
            canonical_lp = float(scores[tree.leaves.index(tuple(canonical))])
        else:
            canonical_lp = float(self.leaf_log_probs(CoveringTree(data, (tuple(canonical),)))[0])
        return PrefixProbability(data, _logsumexp(scores.tolist()), canonical_lp, tree.inner_nodes, len(tree.leaves))

    def prefix_log_probs(self, text: str | bytes) -> tuple[np.ndarray, int]:
        """ln P(text[:i]) for every i from 1 to the text's length in bytes, all the prefixes'
        trees scored in one pass (they share most of their nodes); and the positions evaluated.
        What a byte-level ensemble's chain rule needs."""
        data = text.encode("utf-8") if isinstance(text, str) else text
        trees = [covering_tree(self.vocab, data[:i]) for i in range(1, len(data) + 1)]
        union = CoveringTree(data, tuple(sorted({leaf for tree in trees for leaf in tree.leaves})))
        score = dict(zip(union.leaves, self.leaf_log_probs(union).tolist()))
        return np.array([_logsumexp([score[leaf] for leaf in tree.leaves]) for tree in trees]), union.inner_nodes

    def next_byte_log_masses(self, text: str | bytes) -> tuple[np.ndarray, int]:
        """ln P(text · b) for the 256 byte values b (-inf where no valid sequence writes it), and
        the positions the model evaluated."""
        data = text.encode("utf-8") if isinstance(text, str) else text
        tree = covering_tree(self.vocab, data, extended=True)
        scores = self.leaf_log_probs(tree)
        by_byte: list[list[float]] = [[] for _ in range(256)]
        for leaf, score in zip(tree.leaves, scores):
            by_byte[self.vocab.decode(leaf)[len(data)]].append(float(score))
        return np.array([_logsumexp(values) for values in by_byte]), tree.inner_nodes

    def next_byte(self, text: str | bytes) -> np.ndarray:
        """The next-byte distribution after ``text``: P(text·b) / Σ P(text·b′), by byte value."""
        log_masses, _ = self.next_byte_log_masses(text)
        if np.all(np.isneginf(log_masses)):
            raise TokmaintError("no valid continuation of the text has any probability under the model")
        masses = np.exp(log_masses - log_masses.max())
        return masses / masses.sum()


def _logsumexp(values: Sequence[float]) -> float:
    """ln Σ exp(v), -inf for none.

    >>> round(_logsumexp([math.log(0.25), math.log(0.5)]), 6) == round(math.log(0.75), 6)
    True
    """
    if len(values) == 0:
        return -math.inf
    top = max(values)
    if top == -math.inf:
        return top
    return top + math.log(sum(math.exp(v - top) for v in values))


def ensemble_log_prob(models: Sequence[ByteLevelModel], text: str | bytes) -> tuple[float, int]:
    """ln P(text) under the byte-level ensemble of ``models`` (paper section 4.3): byte by byte,
    the mean of the models' conditional probabilities P_m(x_≤i) / P_m(x_<i); one model gives its
    own P(text) exactly (the ratios telescope). Also the positions evaluated."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    if len(models) == 1:
        result = models[0].prefix(data)
        return result.log_prob, result.model_tokens
    if not data:
        return 0.0, 0
    prefixes, evaluated = [], 0
    for model in models:
        log_probs, tokens = model.prefix_log_probs(data)
        prefixes.append(np.concatenate([[0.0], log_probs]))  # ln P_m(x_<i), from the empty text's 0
        evaluated += tokens
    # ln P_m(x_i | x_<i), by model and byte (-inf once a model gives the bytes no probability)
    conditional = np.stack([np.where(np.isneginf(p[1:]), -np.inf, np.diff(p)) for p in prefixes])
    return float(np.sum(np.logaddexp.reduce(conditional, axis=0) - math.log(len(models)))), evaluated


def ensemble_next_byte(models: Sequence[ByteLevelModel], text: str | bytes) -> np.ndarray:
    """The mean of the models' next-byte distributions (each normalised)."""
    return np.mean([model.next_byte(text) for model in models], axis=0)


def generate(
    models: Sequence[ByteLevelModel], prompt: str, *, max_bytes: int, seed: int = 0, progress: bool = False
) -> bytes:
    """Bytes sampled one at a time after ``prompt`` from the (ensemble's) next-byte distribution;
    the prompt may end anywhere, inside a word or a character (no prompt boundary problem)."""
    from tqdm import tqdm

    rng = np.random.default_rng(seed)
    data = prompt.encode("utf-8")
    out = bytearray()
    for _ in tqdm(range(max_bytes), disable=not progress, unit="B"):
        try:
            distribution = ensemble_next_byte(models, data + bytes(out))
        except ContextFull:  # what a model reads at once is full: the text ends here
            if not out:  # the prompt alone fills it: nothing could be sampled
                raise
            break
        out.append(int(rng.choice(256, p=distribution)))
    return bytes(out)


def first_bytes(text: str, limit: int) -> str:
    """The longest start of ``text`` of at most ``limit`` UTF-8 bytes, in whole characters.

    >>> first_bytes("naïve", 3), first_bytes("naïve", 4)
    ('na', 'naï')
    """
    return text.encode("utf-8")[:limit].decode("utf-8", errors="ignore")


def fit_text(models: Sequence[ByteLevelModel], text: str) -> str:
    """``text``, or as much of its start as every model can read in one context (its canonical
    tokens and a few more for the tree's branches).

    >>> class Model:  # a character a token, 8 positions
    ...     max_positions = 8
    ...     class vocab:
    ...         class tokenizer:
    ...             encode = staticmethod(list)
    >>> fit_text([Model()], "0123456789")
    '01234'
    """

    def fits(cut: str) -> bool:
        return all(len(m.vocab.tokenizer.encode(cut)) + FIT_MARGIN <= m.max_positions for m in models)

    if fits(text):
        return text
    lo, hi = 0, len(text)  # the longest start that fits lies in [lo, hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(text[:mid]) else (lo, mid)
    return text[:lo]


FIT_MARGIN = 3  # positions beyond the canonical tokens a text is given for its covering tree's deepest leaf


def evaluate_texts(models: Sequence[ByteLevelModel], texts: Sequence[str], *, progress: bool = False) -> dict[str, Any]:
    """Bits per byte of ``models`` (one, or their byte-level ensemble) over ``texts``, each from
    the start of the model's text (``[bos]``); a text longer than a model's context is cut to
    what fits (``truncated``). One model also gives its canonical tokenization's figure."""
    from tqdm import tqdm

    log_prob = canonical = 0.0
    n_bytes = evaluated = truncated = documents = 0
    for text in tqdm(texts, disable=not progress, unit="doc"):
        cut = fit_text(models, text)
        while True:
            try:
                if len(models) == 1:
                    result = models[0].prefix(cut)
                    lp, lp_canonical, tokens = result.log_prob, result.log_prob_canonical, result.model_tokens
                else:
                    (lp, tokens), lp_canonical = ensemble_log_prob(models, cut), 0.0
                break
            except ContextFull:  # a branch deeper than FIT_MARGIN allowed for: a tenth less
                cut = cut[: len(cut) * 9 // 10]
        truncated += cut != text
        if not cut:
            continue
        documents += 1
        n_bytes += len(cut.encode("utf-8"))
        log_prob, canonical, evaluated = log_prob + lp, canonical + lp_canonical, evaluated + tokens
    bits = -log_prob / LN2 / max(1, n_bytes)
    return {
        "documents": documents,
        "bytes": n_bytes,
        "truncated": truncated,
        "log_prob": log_prob,
        "bits_per_byte": bits,
        "model_tokens": evaluated,
        **(
            {"log_prob_canonical": canonical, "bits_per_byte_canonical": -canonical / LN2 / max(1, n_bytes)}
            if len(models) == 1
            else {}
        ),
    }
