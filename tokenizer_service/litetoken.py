"""LiteToken's scores: which tokens are intermediate merge residues (LiteToken, sections 3 and 5).

A BPE vocabulary keeps every token its training ever created, including scaffolding that later
merges swallowed (``_includ`` once ``_include``, ``_including`` ... exist). For a tokenizer and a
corpus encoded with it:

* F1(t): how often t is emitted.
* F2(t): how often t appears inside the merge trees of emitted tokens, once per appearance:
  Σ_w F1(w)·(times t occurs in w's tree). One pass over the merge DAG, longest tokens first.
  Parents are the merges BPE actually applies (:class:`MergeGraph`), so tiktoken-style
  vocabularies with several merges per token count what their encoding really does.
* R(t) = F1 / (F1 + F2), the FI ratio.
* S_left(t), S_right(t): entropy of the token just before / after t over each document's whole
  token sequence (across word boundaries); S(t) = min of the two.

A residue has R ≤ r and S ≤ s; it is never a base or special token. A token never seen
(F1 + F2 = 0) carries no evidence: it is no residue and is counted as ``unseen`` (merged tokens
in scope only). A token seen
only inside other tokens (F1 = 0) has S = 0. ``scope="ascii"`` (the paper's "Vocab Size(en)")
is every vocabulary token whose bytes are all ASCII; shares are residues / scope size.

Small corpora: n occurrences bound the plug-in entropy by log n, so a token emitted a handful of
times is "low entropy" whatever its contexts are, and roots such as ``in`` or ``re`` get flagged.
The evidence-aware variant (``min_count``, see :func:`find_residues`) lets a test flag a token
only on enough observations: ``min_count="auto"`` is ⌈base^s⌉, the fewest occurrences whose
entropy could exceed s at all.

>>> from tokenizer_service.bpe import BPETokenizer
>>> tok = BPETokenizer(vocab={"a": 0, "b": 1, "ab": 2, "abb": 3}, merges=[("a", "b"), ("ab", "b")],
...                    pipeline={"pre_tokenizer": {"type": "WhitespaceSplit"}})
>>> scores = score_tokens(tok, count_corpus(tok, ["abb abb abb ab"]))
>>> scores.f1[:4].tolist(), scores.f2[:4].tolist(), round(float(scores.ratio[2]), 2)
([0.0, 0.0, 1.0, 3.0], [4.0, 7.0, 3.0, 0.0], 0.25)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.counting import PAIR_SHIFT, BoolArray, Float64Array, Int64Array, pack_pair, weighted_bincount
from tokenizer_service.merge_graph import MergeGraph

# The paper's thresholds (section 6.2): (r, s) per kind of tokenizer.
PAPER_THRESHOLDS = {"classic": (0.15, 4.0), "tiktoken": (0.05, 3.5)}
SCOPES = ("ascii", "all")


def tokenizer_kind(tokenizer: BPETokenizer, graph: MergeGraph | None = None) -> str:
    """``"tiktoken"`` for vocabularies converted from tiktoken (``ignore_merges`` or several merges
    for one token), ``"classic"`` for BPE whose encoding replays its merge list.

    >>> tokenizer_kind(BPETokenizer.train(["abc"], vocab_size=260))
    'classic'
    """
    graph = graph or MergeGraph(tokenizer)
    multi = any(len(m) > 1 for m in graph.producers.values())
    return "tiktoken" if tokenizer.ignore_merges or multi else "classic"


@dataclass(frozen=True)
class CorpusCounts:
    """What the scores need from an encoded corpus: emitted counts and neighbour pairs.

    ``emitted[i]`` is F1 of id i; ``neighbour_keys``/``neighbour_counts`` count each ordered
    pair of adjacent tokens (packed as in :mod:`counting`) over whole documents.
    """

    emitted: Float64Array
    neighbour_keys: Int64Array
    neighbour_counts: Float64Array
    documents: int

    @classmethod
    def from_id_lists(cls, id_lists: Iterable[Sequence[int]], size: int) -> "CorpusCounts":
        """Count from encoded documents (each a list of ids); ``size`` is the id space.

        >>> c = CorpusCounts.from_id_lists([[0, 1, 0], [1]], size=2)
        >>> c.emitted.tolist(), c.neighbour_counts.tolist(), c.documents
        ([2.0, 2.0], [1.0, 1.0], 2)
        """
        arrays = [np.asarray(ids, np.int64) for ids in id_lists]
        flat = np.concatenate(arrays) if arrays else np.zeros(0, np.int64)
        emitted = np.bincount(flat, minlength=size)[:size].astype(np.float64)
        keys = [pack_pair(a[:-1], a[1:]) for a in arrays if len(a) > 1]
        uniq, counts = np.unique(np.concatenate(keys) if keys else np.zeros(0, np.int64), return_counts=True)
        return cls(
            emitted=emitted, neighbour_keys=uniq, neighbour_counts=counts.astype(np.float64), documents=len(arrays)
        )

    @classmethod
    def combined(cls, parts: Sequence["CorpusCounts"]) -> "CorpusCounts":
        """The counts of several corpora together (counting in batches), merged in one pass."""
        size = max(len(p.emitted) for p in parts)
        emitted = np.zeros(size)
        for part in parts:
            emitted[: len(part.emitted)] += part.emitted
        keys = np.concatenate([p.neighbour_keys for p in parts])
        uniq, inverse = np.unique(keys, return_inverse=True)
        counts = weighted_bincount(inverse, np.concatenate([p.neighbour_counts for p in parts]))
        return cls(emitted, uniq, counts, sum(p.documents for p in parts))


def count_corpus(
    tokenizer: BPETokenizer, texts: Sequence[str], *, batch_size: int = 2000, progress: bool = False
) -> CorpusCounts:
    """Encode the texts with the full tokenizer (Rust, in batches) and count."""
    size = tokenizer.id_space
    parts = [CorpusCounts.from_id_lists([], size)]
    for start in tqdm(range(0, len(texts), batch_size), desc="count", unit="batch", disable=not progress):
        parts.append(CorpusCounts.from_id_lists(tokenizer.encode_batch(texts[start : start + batch_size]), size))
    return CorpusCounts.combined(parts)


@dataclass(frozen=True)
class TokenScores:
    """Per-id scores (arrays over the id space): F1, F2, R, S_left, S_right, S."""

    f1: Float64Array
    f2: Float64Array
    s_left: Float64Array
    s_right: Float64Array

    @property
    def ratio(self) -> Float64Array:
        """R = F1/(F1+F2); 1 where the token was never seen (no evidence of being scaffolding)."""
        total = self.f1 + self.f2
        return np.divide(self.f1, total, out=np.ones_like(total), where=total > 0)

    @property
    def s(self) -> Float64Array:
        return np.minimum(self.s_left, self.s_right)

    @property
    def seen(self) -> BoolArray:
        return (self.f1 + self.f2) > 0


def inside_counts(tokenizer: BPETokenizer, graph: MergeGraph, emitted: Float64Array) -> Float64Array:
    """F2: occurrences of each id inside the merge trees of emitted tokens (DP over the DAG).

    G(w) = F1(w) + F2(w) is how often w appears at all; each parent of w gains G(w). Parents are
    strictly shorter than their child, so handling tokens longest first finishes every F2
    before it is passed on.

    >>> tok = BPETokenizer(vocab={"a": 0, "ab": 1, "aab": 2, "b": 3}, merges=[("a", "b"), ("a", "ab")],
    ...                    pipeline={})
    >>> inside_counts(tok, MergeGraph(tok), np.array([0.0, 0.0, 5.0, 0.0])).tolist()
    [10.0, 5.0, 0.0, 5.0]
    """
    vocab = tokenizer.vocab
    merged = [(vocab[w], vocab[u], vocab[v], len(w)) for w, (u, v) in graph.parents.items() if w in vocab]
    f2 = np.zeros(len(emitted))
    if not merged:
        return f2
    child, left, right, length = (np.array(x, np.int64) for x in zip(*merged))
    for level in np.unique(length)[::-1]:
        at = length == level
        flow = emitted[child[at]] + f2[child[at]]
        np.add.at(f2, left[at], flow)
        np.add.at(f2, right[at], flow)
    return f2


def neighbour_entropy(
    keys: Int64Array, counts: Float64Array, size: int, *, side: str, log_base: float = math.e
) -> Float64Array:
    """Entropy of each token's left or right neighbour, from packed (left, right) pair counts.

    ``side="right"`` groups pairs by their left token (the distribution of what follows it).
    Ids with no observation get 0.

    >>> keys = pack_pair(np.array([0, 0, 1]), np.array([1, 2, 0]))
    >>> neighbour_entropy(keys, np.array([1.0, 1.0, 4.0]), 3, side="right", log_base=2).tolist()
    [1.0, 0.0, 0.0]
    """
    group = keys >> PAIR_SHIFT if side == "right" else keys & ((1 << PAIR_SHIFT) - 1)
    n = np.bincount(group, weights=counts, minlength=size)[:size]
    p = counts / n[group]
    return np.bincount(group, weights=-p * np.log(p), minlength=size)[:size] / math.log(log_base)


def score_tokens(
    tokenizer: BPETokenizer, counts: CorpusCounts, *, graph: MergeGraph | None = None, log_base: float = math.e
) -> TokenScores:
    """F1, F2 and the neighbour entropies of every id (see the module docstring)."""
    graph = graph or MergeGraph(tokenizer)
    size = len(counts.emitted)
    f1 = counts.emitted
    f2 = inside_counts(tokenizer, graph, f1)
    sides = {
        side: neighbour_entropy(counts.neighbour_keys, counts.neighbour_counts, size, side=side, log_base=log_base)
        for side in ("left", "right")
    }
    return TokenScores(f1=f1, f2=f2, s_left=sides["left"], s_right=sides["right"])


@dataclass(frozen=True)
class ResidueReport:
    """Residues of one tokenizer on one corpus, with the counts the CLI reports."""

    residues: list[str]
    ratio_only: list[str]
    scope_size: int
    unseen: int
    r: float
    s: float
    kind: str
    min_count: int

    @property
    def residue_share(self) -> float:
        return len(self.residues) / max(self.scope_size, 1)

    @property
    def residue_share_ratio_only(self) -> float:
        return len(self.ratio_only) / max(self.scope_size, 1)


def find_residues(
    tokenizer: BPETokenizer,
    scores: TokenScores,
    *,
    graph: MergeGraph | None = None,
    r: float | None = None,
    s: float | None = None,
    scope: str = "ascii",
    min_count: int | str = 0,
    log_base: float = math.e,
    kind: str | None = None,
) -> ResidueReport:
    """Tokens with R ≤ r and S ≤ s inside the scope; ``r``/``s`` default to the paper's values
    for the tokenizer's kind (``kind``, or :func:`tokenizer_kind`: a tiktoken vocabulary exported
    with one merge per token, such as GPT-4o's, looks classic; name its kind to get the paper's
    tiktoken thresholds). Residues come most frequent (F1 + F2) first.

    ``min_count`` > 0 asks for evidence: a token emitted (F1) fewer times is not flagged by the
    entropy test, and a token never emitted needs F2 ≥ min_count appearances inside others.
    ``"auto"`` takes ⌈log_base^s⌉ (``log_base`` must be the one the scores used).

    >>> tok = BPETokenizer(vocab={"a": 0, "b": 1, "ab": 2, "abb": 3}, merges=[("a", "b"), ("ab", "b")],
    ...                    pipeline={"pre_tokenizer": {"type": "WhitespaceSplit"}})
    >>> scores = score_tokens(tok, count_corpus(tok, ["abb abb abb ab"]))
    >>> find_residues(tok, scores, r=0.3, s=1.0).residues
    ['ab']
    """
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {SCOPES}, got {scope!r}")
    graph = graph or MergeGraph(tokenizer)
    if kind not in (None, *PAPER_THRESHOLDS):
        raise ValueError(f"kind must be one of {sorted(PAPER_THRESHOLDS)}, got {kind!r}")
    kind = kind or tokenizer_kind(tokenizer, graph)
    r = PAPER_THRESHOLDS[kind][0] if r is None else r
    s = PAPER_THRESHOLDS[kind][1] if s is None else s
    specials = tokenizer.special_tokens
    in_scope = [
        (t, i)
        for t, i in tokenizer.vocab.items()
        if t not in specials and (scope == "all" or tokenizer.token_bytes(t).isascii())
    ]
    candidates = [(t, i) for t, i in in_scope if t not in tokenizer.base_tokens]
    ids = np.array([i for _, i in candidates], np.int64)
    # A token seen only inside others has no neighbour of its own, so its entropies are 0: S = 0.
    seen, ratio, entropy = scores.seen[ids], scores.ratio[ids], scores.s[ids]
    if min_count == "auto":
        # ⌈base^s⌉ occurrences; past 2^62 no corpus has that many, and the power would overflow.
        min_count = math.ceil(log_base**s) if s * math.log(log_base) < 62 * math.log(2) else 2**62
    f1, f2 = scores.f1[ids], scores.f2[ids]
    evidence = np.where(f1 == 0, f2, f1) >= min_count
    low_ratio = seen & (ratio <= r)
    flagged = low_ratio & (entropy <= s) & evidence
    weight = (scores.f1 + scores.f2)[ids]
    order = np.argsort(-weight, kind="stable")
    residues = [candidates[k][0] for k in order if flagged[k]]
    ratio_only = [candidates[k][0] for k in order if low_ratio[k]]
    unseen = int((~seen).sum())
    return ResidueReport(
        residues=residues,
        ratio_only=ratio_only,
        scope_size=len(in_scope),
        unseen=unseen,
        r=r,
        s=s,
        kind=kind,
        min_count=int(min_count),
    )
