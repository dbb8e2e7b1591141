"""Ted-Tok: keep a BPE tokenizer aligned with a drifting stream (Ted-Tok, Algorithms 1 and 2).

Each time step the stream's batch is encoded with the current version and its token and
within-word pair counts update the EMA statistics (``stats_store``). Every Δ steps after the
warmup, :func:`plan_revision` picks up to K of the most frequent pairs to add as merges and as
many of the least frequent sink tokens to delete, and :func:`build_revision` builds the next
version, its revision diff and the statistics edit (Proposition 1's redistribution).

Decisions on the points the paper (Huang et al., "Ted-Tok: Maintaining an Evolving Vocabulary
for Lifelong Learning") leaves open:

* A pair just merged leaves the pair table (τ_pair[u,v] is forgotten when w=(u,v) is added):
  otherwise its stale, slowly decaying statistic would keep it at the top of the candidates.
* A pair whose concatenation already is a token is no candidate: it would add a second merge
  for an existing token, not a new token. Neither is a pair whose merge would be unreachable
  (the current tokenizer does not encode ``u+v`` to exactly ``[u, v]``), nor one with an added (special or not)
  token, so a revision never adds an unreachable token. Reachability also means two pairs with
  the same concatenation never both qualify: ``u+v`` encodes to one pair only.
* Inside one batch: the adds are chosen first; their parents are protected and never deleted in
  the same batch; only tokens that are sinks *before* the batch may be deleted (no cascade);
  add i is paired with delete i
  (strongest pair against weakest sink, sinks ranked by what replacing them needs) and the
  batch stops at the first pair that fails the margin τ_pair > β·τ_token[w_delete] (and its
  price); the condition is monotone, so this is Algorithm 2 run K times without re-ranking.
* How much a revision changes (an addition): the paper's fixed K adds+deletes per revision is a
  budget that fits one stream only: too small on a short or fast-drifting stream, too large on a
  long one. Here every changed id has a price (``id_price``, ``base_token_cost``; see
  :func:`plan_revision`), a revision makes the swaps that pay for their ids, and K is a safety
  cap. Deleting a pre-trained token costs more, so ids Ted-Tok recycled before are reused
  first. With both prices 0 (default) the rule is the paper's.
* Ids: with ``recycle_ids`` (default) the vocabulary size is fixed and an added token takes a
  freed id of the same revision, lowest first; otherwise new tokens get fresh ids past the
  largest and freed ids stay holes. Statistics of a deleted token are forgotten before its id is
  reused, so nothing leaks.

>>> from tokenizer_service.bpe import BPETokenizer
>>> old = BPETokenizer.train(["ab ab ab xy xy"], vocab_size=259)
>>> tt = TedTok(old, config=TedTokConfig(alpha=0.5, beta=1.2, batch_size=1, interval=1))
>>> for _ in range(3):
...     revision = tt.observe_texts(["cd cd cd cd"])
>>> [e.kind for e in tt.revisions[0].diff.entries], tt.revisions[0].added
(['reassigned'], ['cd'])
"""

from __future__ import annotations

import operator
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from itertools import compress
from typing import Any

import numpy as np

from schemas.revision import DiffEntry, RevisionDiff
from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.counting import Float64Array, Int64Array, StepCounter, StepCounts, WordVocabulary, unpack_pair
from tokenizer_service.heap import collector_paused
from tokenizer_service.merge_graph import MergeGraph
from tokenizer_service.residue_removal import residue_free_tokenizer
from tokenizer_service.stats_store import MemoryStatsStore, StatsEdit, StatsStore


@dataclass(frozen=True)
class TedTokConfig:
    """Revision settings. Defaults are the paper's real-world (MT/QA) settings; an open-ended
    stream's come from ``evolve.StreamSettings``.

    Revisions come every ``interval`` steps from step ``warmup_steps`` on; only a fixed-length
    run (``for_schedule``, the paper's reproductions) knows ``total_steps`` and can stop the
    final ``freeze_last`` fraction. The prices (not in the paper, 0 = the paper's rule; see
    :func:`plan_revision`): ``id_price``, tokens a swap must save over the statistics' horizon
    (1/α steps) for the id it changes; ``base_token_cost``, the share of the stream's tokens a
    swap must also save when it takes a pre-trained id. ``drop_residues`` (off by default)
    makes the next revision also remove the residues handed over by :meth:`TedTok.set_residues`.
    """

    alpha: float = 5e-5
    beta: float = 1.2
    batch_size: int = 100
    interval: int = 1000
    warmup_steps: int = 0
    total_steps: int | None = None
    freeze_last: float = 0.0
    recycle_ids: bool = True
    id_price: float = 0.0
    base_token_cost: float = 0.0
    drop_residues: bool = False

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha}")
        if self.beta <= 0 or self.batch_size < 1 or self.interval < 1:
            raise ValueError("beta must be > 0, batch_size and interval >= 1")
        if self.base_token_cost < 0 or self.id_price < 0:
            raise ValueError(f"id_price and base_token_cost must be >= 0, got {self.id_price}, {self.base_token_cost}")
        if not 0 <= self.freeze_last < 1:
            raise ValueError(f"freeze_last must be in [0, 1), got {self.freeze_last}")

    @classmethod
    def for_schedule(cls, total_steps: int, *, warmup: float, freeze_last: float, **options: Any) -> "TedTokConfig":
        """Config with warmup and freeze given as fractions of a known number of steps."""
        return cls(
            total_steps=total_steps, warmup_steps=round(warmup * total_steps), freeze_last=freeze_last, **options
        )

    def revision_due(self, step: int) -> bool:
        """Whether Algorithm 1 revises after time step ``step`` (1-based).

        >>> c = TedTokConfig(interval=10, warmup_steps=20, total_steps=100, freeze_last=0.2)
        >>> [s for s in range(1, 101) if c.revision_due(s)]
        [20, 30, 40, 50, 60, 70, 80]
        """
        if step < self.warmup_steps or step % self.interval:
            return False
        return self.total_steps is None or step <= (1 - self.freeze_last) * self.total_steps


@dataclass(frozen=True)
class RevisionPlan:
    """What one revision will do: merges to add and sink tokens to delete, with their scores."""

    adds: list[tuple[str, str]] = field(default_factory=list)
    deletes: list[str] = field(default_factory=list)
    add_scores: list[float] = field(default_factory=list)
    delete_scores: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class Revision:
    """A published revision: the new version, its diff and the statistics edit it implies."""

    tokenizer: BPETokenizer
    diff: RevisionDiff
    edit: StatsEdit
    added: list[str]
    removed: list[str]


def plan_revision(
    tokenizer: BPETokenizer,
    graph: MergeGraph,
    store: StatsStore,
    *,
    beta: float,
    batch_size: int,
    base_vocab: Mapping[str, int] | None = None,
    id_price: float = 0.0,
    base_token_cost: float = 0.0,
) -> RevisionPlan:
    """Algorithm 2, batched: the best admissible pairs against the weakest sinks, up to K.

    A swap (add the pair (u,v), delete the sink w) saves about τ_pair[u,v] − τ_token[w] tokens
    per step: every merged occurrence saves one token, every split one costs one. The paper's
    rule takes a swap when τ_pair > β·τ_token[w], so a fixed K per revision is all that limits
    how many ids change. Here every changed id — an embedding row each trainer must re-learn —
    has a price in the same unit, tokens per step, and a swap must save at least its price:

    * ``id_price`` (tokens per step) for any id;
    * plus ``base_token_cost``·Σ τ_token (a share of the stream's tokens) when the sink is a
      *base* token, one that still holds its id from ``base_vocab``, the version the model was
      pre-trained with, so Ted-Tok recycles the ids it added itself before it takes a
      pre-trained one.

    Then the evidence decides how much a revision changes and K is only a safety cap. With both
    prices 0 this is the paper's rule; β still applies either way. A pair replaces a sink when
    it scores above max(β·τ_token, τ_token + price): pairs come strongest first and sinks
    in the order of that need, so the first pair that falls short ends the batch.
    """
    vocab, id_to_token, specials = tokenizer.vocab, tokenizer.id_to_token, tokenizer.added_tokens
    sinks = list(graph.sink_tokens)
    sink_ids = np.array([vocab[t] for t in sinks], np.int64)
    sink_scores = store.token(sink_ids) if sinks else np.zeros(0)
    costs = np.full(len(sinks), id_price)
    if base_token_cost > 0 and base_vocab:
        total = float(store.token(np.fromiter(vocab.values(), np.int64, len(vocab))).sum())
        is_base = np.array([base_vocab.get(t) == i for t, i in zip(sinks, sink_ids.tolist())], bool)
        costs[is_base] += base_token_cost * total
    # What a pair must score to replace each sink: the margin, and the sink's score plus its price.
    needs = np.maximum(beta * sink_scores, np.where(costs > 0, sink_scores + costs, -np.inf))
    floor = float(needs.min()) if sinks else float("inf")  # no weaker pair can pass: stop scanning
    keys, values = store.top_pairs(4 * batch_size + 64)
    adds: list[tuple[str, str]] = []
    add_scores: list[float] = []
    for key, value in zip(keys.tolist(), values.tolist()):
        if len(adds) == batch_size or value <= 0 or value < floor:
            break
        u, v = unpack_pair(key)
        tu, tv = id_to_token.get(u), id_to_token.get(v)
        if tu is None or tv is None or tu in specials or tv in specials:
            continue
        w = tu + tv
        if w in vocab or tokenizer.tokenize_word(w) != [u, v]:
            continue
        adds.append((tu, tv))
        add_scores.append(value)
    protected = {t for pair in adds for t in pair}
    keep = np.array([t not in protected for t in sinks], bool)
    sinks = [t for t, k in zip(sinks, keep.tolist()) if k]
    sink_scores, costs, needs = sink_scores[keep], costs[keep], needs[keep]
    # Sinks in the order of what replacing them needs: strongest pair against cheapest sink is
    # then the best matching, and the first pair that falls short ends the batch.
    weakest = _weakest(needs, sinks, len(adds))

    def passes(add_score: float, k: int) -> bool:
        return bool(add_score > beta * sink_scores[k] and (costs[k] == 0 or add_score - sink_scores[k] >= costs[k]))

    n = 0
    while n < len(weakest) and passes(add_scores[n], weakest[n]):
        n += 1
    return RevisionPlan(
        adds=adds[:n],
        deletes=[sinks[k] for k in weakest[:n]],
        add_scores=add_scores[:n],
        delete_scores=[float(sink_scores[k]) for k in weakest[:n]],
    )


def _weakest(scores: Float64Array, names: list[str], n: int) -> list[int]:
    """Indices of the n lowest (score, name): ties broken by name; sorts only the candidates.

    >>> _weakest(np.array([3.0, 0.0, 0.0, 1.0]), ["c", "b", "a", "d"], 3)
    [2, 1, 3]
    """
    if n <= 0 or not names:
        return []
    n = min(n, len(names))
    cutoff = np.partition(scores, n - 1)[n - 1]
    candidates = np.flatnonzero(scores <= cutoff).tolist()
    return sorted(candidates, key=lambda i: (float(scores[i]), names[i]))[:n]


def build_revision(
    tokenizer: BPETokenizer,
    graph: MergeGraph,
    plan: RevisionPlan,
    *,
    recycle_ids: bool = True,
) -> tuple[BPETokenizer, list[DiffEntry], StatsEdit]:
    """Build the next version from a plan: new vocabulary, merges, diff entries, stats edit.

    Merges of deleted tokens are removed; new merges are appended (lowest priority) in the
    plan's order. An add whose token would still be unreachable once the other merges of the
    batch are in place is dropped together with one delete, so the vocabulary size holds.
    """
    adds, deletes = list(plan.adds), list(plan.deletes)
    while True:
        gone = set(deletes)
        vocab = dict(tokenizer.vocab)  # the order of the others stays, as in a filtered copy
        for t in gone:
            del vocab[t]
        freed = sorted(tokenizer.vocab[t] for t in deletes)
        next_id = tokenizer.id_space
        new_ids = []
        for k, (u, v) in enumerate(adds):
            if recycle_ids and k < len(freed):
                new_ids.append(freed[k])
            else:
                new_ids.append(next_id)
                next_id += 1
            vocab[u + v] = new_ids[-1]
        # The filter over every merge runs in C, on the tokens they make (no concatenations).
        merges = [
            *compress(tokenizer.merges, map(operator.not_, map(gone.__contains__, tokenizer.merge_outputs))),
            *adds,
        ]
        revised = tokenizer.replace_model(vocab=vocab, merges=merges)
        encoded = revised.tokenize_words([u + v for u, v in adds])
        unreachable = [k for k, ids in enumerate(encoded) if ids != [new_ids[k]]]
        if not unreachable:
            break
        adds = [a for k, a in enumerate(adds) if k not in unreachable]
        deletes = deletes[: len(deletes) - len(unreachable)]

    old_vocab = tokenizer.vocab
    entries: dict[int, DiffEntry] = {}
    for t in deletes:
        u, v = graph.parents[t]
        i = old_vocab[t]
        entries[i] = DiffEntry(id=i, kind="removed", old_token=t, new_token=None, parents=[old_vocab[u], old_vocab[v]])
    for (u, v), i in zip(adds, new_ids):
        parents = [vocab[u], vocab[v]]
        old = entries.get(i)
        if old is None:
            entries[i] = DiffEntry(id=i, kind="added", old_token=None, new_token=u + v, parents=parents)
        else:
            entries[i] = DiffEntry(
                id=i,
                kind="reassigned",
                old_token=old.old_token,
                new_token=u + v,
                parents=parents,
                old_parents=old.parents,
            )
    edit = StatsEdit(
        deletes=[(old_vocab[t], old_vocab[graph.parents[t][0]], old_vocab[graph.parents[t][1]]) for t in deletes],
        adds=[(i, vocab[u], vocab[v]) for (u, v), i in zip(adds, new_ids)],
    )
    return revised, [entries[i] for i in sorted(entries)], edit


class TedTok:
    """A tokenizer lineage evolving over a stream: observe steps, revise when due.

    One call to :meth:`observe_texts` (or :meth:`observe_words`) is one time step. It returns the
    :class:`Revision` made after that step, if any; all revisions are kept in ``revisions``.
    ``graph`` is the tokenizer's :class:`MergeGraph` when the caller has built it (built here otherwise).
    """

    def __init__(
        self,
        tokenizer: BPETokenizer,
        *,
        config: TedTokConfig,
        store: StatsStore | None = None,
        lineage: str = "default",
        words: WordVocabulary | None = None,
        base_vocab: Mapping[str, int] | None = None,
        apply_edits: bool = True,
        graph: MergeGraph | None = None,
    ) -> None:
        self.config = config
        # False: a revision leaves ``revision.edit`` to the caller, to apply to the store together
        # with its own bookkeeping (the pipeline keeps the version to publish in the same write).
        self.apply_edits = apply_edits
        self.lineage = lineage
        self.tokenizer = tokenizer
        # The pre-trained version's ids, which base_token_cost protects (default: this tokenizer).
        self.base_vocab = dict(base_vocab if base_vocab is not None else tokenizer.vocab)
        # A caller that holds the tokenizer's graph already hands it over: a 262k vocabulary's
        # takes seconds to build. It is never changed in place (a revision derives a new one).
        self.graph = graph if graph is not None else MergeGraph(tokenizer)
        if self.graph.tokenizer is not tokenizer:
            raise ValueError("graph is the merge graph of another tokenizer")
        self.store = store if store is not None else MemoryStatsStore(alpha=config.alpha)
        self.counter = StepCounter(tokenizer, words)
        self.version = 1
        self.revisions: list[Revision] = []
        self.last_counts: StepCounts | None = None
        self.revision_seconds = 0.0  # wall time spent in revise(), for overhead reports
        self.pending_residues: frozenset[str] = frozenset()

    def observe_texts(self, texts: Sequence[str]) -> Revision | None:
        """One time step over a batch of documents."""
        return self.observe_counts(self.counter.count_texts(texts))

    def observe_words(self, word_ids: Int64Array, freqs: Float64Array) -> Revision | None:
        """One time step over a multiset of words known to ``self.counter.words``."""
        return self.observe_counts(self.counter.count_words(word_ids, freqs))

    def observe_counts(self, counts: StepCounts) -> Revision | None:
        self.last_counts = counts
        self.store.apply_counts(counts)
        return self.revise() if self.config.revision_due(self.store.step) else None

    def revise(self, *, made: Callable[[BPETokenizer], object] | None = None) -> Revision | None:
        """Run one revision now; ``None`` when no pair beats the margin. ``made`` is called with
        the new version as soon as it is built, before its diff and the counter's switch (a
        pipeline's counting process loads it meanwhile)."""
        started = time.perf_counter()
        try:
            with collector_paused():  # the new version's ~200k containers all live on
                return self._revise(made)
        finally:
            self.revision_seconds += time.perf_counter() - started

    def adopt(self, tokenizer: BPETokenizer, version: int) -> None:
        """Continue from a version made elsewhere (a rollback, a LiteToken removal): later steps
        count with it. The statistics of the ids it changed are the caller's to forget."""
        self.tokenizer, self.graph, self.version = tokenizer, MergeGraph(tokenizer), version
        self.counter.set_tokenizer(tokenizer)

    def set_residues(self, residues: Iterable[str]) -> None:
        """Hand over the residues of the latest LiteToken scores. With ``drop_residues`` the next
        revision removes them (once: residues a standard BPE still needs stay as scaffolding)."""
        self.pending_residues = frozenset(residues)

    def _revise(self, made: Callable[[BPETokenizer], object] | None = None) -> Revision | None:
        plan = plan_revision(
            self.tokenizer,
            self.graph,
            self.store,
            beta=self.config.beta,
            batch_size=self.config.batch_size,
            # τ is a per-step rate: saving id_price tokens over the 1/α-step horizon is α·id_price a step.
            base_vocab=self.base_vocab,
            id_price=self.config.id_price * self.config.alpha,
            base_token_cost=self.config.base_token_cost,
        )
        residues = self.pending_residues if self.config.drop_residues else frozenset()
        if not plan.adds and not residues:
            return None
        revised, entries, edit = build_revision(self.tokenizer, self.graph, plan, recycle_ids=self.config.recycle_ids)
        added_merges = [
            (revised.id_to_token[e.parents[0]], revised.id_to_token[e.parents[1]]) for e in entries if e.new_token
        ]
        graph = self.graph.revised(revised, removed=[e.old_token for e in entries if e.old_token], added=added_merges)
        if residues:
            revised, graph, entries, edit = self._drop_residues(revised, graph, entries, edit, added_merges)
            self.pending_residues = frozenset()
            if not entries:
                return None
        if made is not None:
            made(revised)
        diff = RevisionDiff(
            lineage=self.lineage,
            version=self.version + 1,
            parent_version=self.version,
            step=self.store.step,
            tokenizer_sha256=revised.sha256,
            parent_sha256=self.tokenizer.sha256,
            vocab_size=len(revised),
            id_space=revised.id_space,
            entries=entries,
            config=asdict(self.config),
        )
        if self.apply_edits:
            self.store.apply_edit(edit)
        revision = Revision(
            tokenizer=revised,
            diff=diff,
            edit=edit,
            added=[e.new_token for e in entries if e.new_token is not None],
            removed=[e.old_token for e in entries if e.old_token is not None],
        )
        self.tokenizer = revised
        self.graph = graph
        self.counter.set_tokenizer(revised)
        self.version += 1
        self.revisions.append(revision)
        return revision

    def _drop_residues(
        self,
        revised: BPETokenizer,
        graph: MergeGraph,
        entries: list[DiffEntry],
        edit: StatsEdit,
        added_merges: list[tuple[str, str]],
    ) -> tuple[BPETokenizer, MergeGraph, list[DiffEntry], StatsEdit]:
        """Remove the pending residues from a planned version (parents of new merges stay).

        Removed residues leave holes (their ids are not recycled); in the statistics each is a
        delete like Ted-Tok's own, applied longest first so a residue's children go before it.
        """
        protected = {t for merge in added_merges for t in merge} | revised.base_tokens
        candidates = [t for t in self.pending_residues if t in revised.vocab and t not in protected]
        removal = residue_free_tokenizer(revised, candidates, graph=graph)
        if not removal.removed:
            return revised, graph, entries, edit
        vocab = revised.vocab
        longest_first = sorted(removal.removed, key=lambda t: (-len(t), vocab[t]))
        deletes = [(vocab[t], vocab[graph.parents[t][0]], vocab[graph.parents[t][1]]) for t in longest_first]
        merged = sorted(entries + removal.entries, key=lambda e: e.id)
        final = removal.tokenizer
        return final, MergeGraph(final), merged, StatsEdit(deletes=edit.deletes + deletes, adds=edit.adds)
