"""A lineage's statistics in Redis and its current version: Ted-Tok over the store, with each
revision validated, kept in the statistics, published and settled, in that order. The streaming
job (``pipeline.job``), ``tokmaint revise`` and the Beam variant's writer share it.

    stats = LineageStatistics(stream=StreamSettings(), redis_client=redis.Redis(), registry=client,
                              lineage="git")
    stats.revise(step=120)   # True when a revision was published

A revision goes in three calls so that the job can count on meanwhile: :meth:`LineageStatistics.plan`
(in memory), :meth:`~LineageStatistics.commit` (validate, one atomic write of the edit and the
version, publish; on a thread of its own) and :meth:`~LineageStatistics.conclude` (count on with
the version the statistics ended at).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import redis

from pipeline.redis_store import RedisStatsStore
from registry.client import LatestVersion, Outages, RegistryClient, RegistryRefused
from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.counting import StepCounts
from tokenizer_service.errors import TokmaintError
from tokenizer_service.evolve import StreamSettings
from tokenizer_service.revision_diff import diff_entries
from tokenizer_service.stats_store import StatsEdit
from tokenizer_service.tedtok import Revision, TedTok
from tokenizer_service.validation import validate

log = logging.getLogger("tokmaint.pipeline")

MAX_PAIRS = 1_000_000  # the pair tables' bound: each revision (and neighbour compaction) drops the weakest beyond it


class LineageStatistics:
    """A lineage's statistics in Redis and its current version: Ted-Tok over the store, with
    revisions kept, published and settled in that order (what the job and ``tokmaint revise``
    share)."""

    def __init__(
        self,
        *,
        stream: StreamSettings,
        redis_client: redis.Redis,
        registry: RegistryClient,
        lineage: str,
        existing: bool = False,
        max_pairs: int = MAX_PAIRS,
        outages: Outages | None = None,
    ) -> None:
        """``existing``: the statistics must be there already, and keep the decay they were made
        with (a revision outside the job); otherwise the stream's decay, checked against theirs.
        ``max_pairs`` bounds the pair table: each revision drops the weakest beyond it.
        ``outages``: where the registry's watch says and counts its outages (``LatestVersion``)."""
        self.registry, self.lineage, self.max_pairs = registry, lineage, max_pairs
        self._outages = outages
        self._latest: LatestVersion | None = None  # started by the first outdated()
        # The unreachable tokens of the last version validated, by its sha256: the parent of the
        # next revision, whose validation then does not encode the parent's vocabulary again.
        self._unreachable: tuple[str, list[str]] | None = None
        self._names: tuple[int, np.ndarray] | None = None  # a version and its ids' token texts (token_texts)
        self.config = stream.tedtok_config()
        if existing:
            self.store = RedisStatsStore.open(redis_client, lineage=lineage)
            self.config = replace(self.config, alpha=self.store.alpha)
        else:
            self.store = RedisStatsStore(redis_client, lineage=lineage, alpha=self.config.alpha)
        self.settle()
        version = self.store.claim_version(self.registry.version(lineage).number)
        self.tedtok = TedTok(
            registry.tokenizer(lineage, version),
            config=self.config,
            store=self.store,
            lineage=lineage,
            base_vocab=registry.tokenizer(lineage, 1).vocab,
            apply_edits=False,
        )
        self.tedtok.version = version

    def settle(self) -> bool:
        """Publish the revision the statistics already have, if it is not published yet; True
        when it is now the version they count with. When the registry will not take it on top of
        the version it was made from (someone published meanwhile; or it went in before a crash
        and someone published on top), the statistics move to the registry's latest instead:
        the ids the two differ in lose their statistics and the pending revision is dropped."""
        pending = self.store.pending()
        if pending is None:
            return False
        kept = json.loads(pending)
        parent = self.store.meta()["version"]
        try:
            info = self.registry.publish(
                self.lineage,
                kept["tokenizer"],
                diff_json=kept["diff"],
                kind="tedtok",
                parent=parent,
                metrics=kept.get("metrics"),
            )
        except RegistryRefused as exc:
            if exc.code not in ("stale_parent", "incompatible"):
                raise
            latest = self.registry.version(self.lineage).number
            changed = [
                e.id
                for e in diff_entries(
                    BPETokenizer.from_json(kept["tokenizer"]), self.registry.tokenizer(self.lineage, latest)
                )
            ]
            self.store.adopt(current=parent, version=latest, changed_ids=changed)
            return False
        self.store.settle(info.number)
        return True

    def outdated(self) -> bool:
        """True when the registry has a version newer than the one counted with (:meth:`follow`
        adopts it), as its watch last said (no request: a thread follows the watch)."""
        if self._latest is None:
            self._latest = LatestVersion(self.registry.endpoint, self.lineage, outages=self._outages)
        return self._latest.number > self.tedtok.version

    def close(self) -> None:
        if self._latest is not None:
            self._latest.close()

    def follow(self) -> bool:
        """Adopt the registry's latest version if someone else published it (a rollback, a
        LiteToken removal): the ids it changed lose their statistics; True when it moved."""
        if self.store.pending() is not None:
            self.settle()
        current = self.store.meta()["version"]
        moved = current != self.tedtok.version
        if moved:  # settled or moved just now: count with what the statistics have
            self.tedtok.adopt(self.registry.tokenizer(self.lineage, current), current)
        latest = self.registry.version(self.lineage).number
        if latest == current:
            return moved
        changed = [e.id for e in self.registry.composed_diff(self.lineage, current, latest).entries]
        if self.store.adopt(current=current, version=latest, changed_ids=changed):
            self.tedtok.adopt(self.registry.tokenizer(self.lineage, latest), latest)
        else:  # the store moved meanwhile: continue from where it is
            version = self.store.meta()["version"]
            self.tedtok.adopt(self.registry.tokenizer(self.lineage, version), version)
        return True

    def observe(
        self,
        counts: StepCounts,
        *,
        offsets: dict[Any, int],
        ids: Sequence[str] = (),
        documents: int = 0,
        keep_ids_steps: int | None = None,
    ) -> bool:
        """The next step: its counts (neighbours too, when counted) written with the version they
        were counted with and where the stream ends (nothing when the store has that step: a
        replay), then the revision, when one is due, made and published (:meth:`revise`); True
        when a revision was published. ``ids``, ``documents`` and ``keep_ids_steps``: as
        ``apply_step``'s. What a writer of single steps calls (the Flink job's); the local job
        writes several steps at once and plans its revisions beside its counting, with
        :meth:`plan`, :meth:`commit` and :meth:`conclude`."""
        step = self.store.step + 1
        token_texts = None if counts.neighbour_keys is None else self.token_texts()
        written = self.store.apply_step(
            counts,
            step=step,
            version=self.tedtok.version,
            offsets=offsets,
            neighbour_keys=counts.neighbour_keys,
            neighbour_counts=counts.neighbour_counts,
            token_texts=token_texts,
            bytes_per_token=counts.bytes_per_token,
            ids=[(step, i) for i in ids],
            keep_ids_steps=keep_ids_steps,
            documents=documents,
        )
        return (
            written
            and self.config.revision_due(step)
            and self.revise(step, metrics={"bytes_per_token": counts.bytes_per_token})
        )

    def token_texts(self) -> np.ndarray:
        """The current version's token text of every id (added tokens included), by id: what a
        step's neighbour pairs are kept with. Made once a version."""
        if self._names is None or self._names[0] != self.tedtok.version:
            hf = self.tedtok.tokenizer.hf
            names = [hf.id_to_token(i) for i in range(self.tedtok.tokenizer.id_space)]
            self._names = (self.tedtok.version, np.array(names, dtype=object))
        return self._names[1]

    def resume(self, *, metrics: dict[str, Any] | None = None) -> bool:
        """After a restart: the revision due after the last step written, if a crash came between
        that step and its revision (the pending one published is :meth:`settle`'s, done already);
        True when one was published."""
        meta = self.store.meta()
        if meta["step"] and self.config.revision_due(meta["step"]) and meta["revised"] < meta["step"]:
            return self.revise(meta["step"], metrics=metrics)
        return False

    def revise(self, step: int, *, metrics: dict[str, Any] | None = None) -> bool:
        """Ted-Tok's revision after step ``step`` from the statistics: validated here first (the
        registry's rules), then its edit and the version in one write, then published; False
        when no pair beats the margin (or the store has this step's revision already)."""
        return self.conclude(self.commit(self.plan(step, metrics=metrics)))

    def plan(
        self, step: int, *, metrics: dict[str, Any] | None = None, made: Callable[[BPETokenizer], object] | None = None
    ) -> PlannedRevision:
        """Ted-Tok's revision after step ``step``, in memory: ``self.tedtok`` holds the revised
        version from now on (the next step most likely counts with it), until :meth:`conclude`.
        ``metrics``: published with the version; ``made``: ``TedTok.revise``'s."""
        parent, version = self.tedtok.tokenizer, self.tedtok.version
        return PlannedRevision(step, parent, version, self.tedtok.revise(made=made), metrics or {})

    def commit(self, plan: PlannedRevision) -> CommittedRevision:
        """Validate the planned revision, write its edit and the version in one write, publish
        it. Changes nothing of ``self.tedtok``: it may run beside the job's counting, on a
        thread of its own; :meth:`conclude` then moves ``self.tedtok`` to where it ended."""
        started = time.perf_counter()
        revision = plan.revision
        reasons = [] if revision is None else self._validate(revision.tokenizer, plan.parent)
        if revision is None or reasons:
            if reasons:  # a bug to report, not a reason to stop the stream: the step goes unrevised
                log.warning(
                    "lineage %s: the revision after step %s fails validation, skipped: %s",
                    self.lineage,
                    plan.step,
                    "; ".join(reasons),
                    extra={"lineage": self.lineage, "step": plan.step},
                )
            self.store.write_revision(StatsEdit(), step=plan.step, pending=b"", max_pairs=self.max_pairs)
            return CommittedRevision(
                plan, "invalid" if reasons else "none", plan.version, time.perf_counter() - started
            )
        kept = json.dumps(
            {"tokenizer": revision.tokenizer.to_json(), "diff": revision.diff.to_json(), "metrics": plan.metrics}
        )
        if not self.store.write_revision(
            revision.edit, step=plan.step, pending=kept.encode("utf-8"), max_pairs=self.max_pairs
        ):
            raise RevisedMeanwhile(
                f"lineage {self.lineage!r} was revised after step {plan.step} by another "
                "process meanwhile; start again to continue from its version"
            )
        outcome = "ours" if self.settle() else "theirs"  # theirs: someone else's version came first
        return CommittedRevision(plan, outcome, self.store.meta()["version"], time.perf_counter() - started)

    def _validate(self, tokenizer: BPETokenizer, parent: BPETokenizer) -> list[str]:
        """``validate``'s reasons against ``parent``, with the parent's unreachable tokens from
        the validation before when it was of the parent (the revision before this one)."""
        known = self._unreachable
        report = validate(
            tokenizer, parent=parent, parent_unreachable=known[1] if known and known[0] == parent.sha256 else None
        )
        if report.ok:
            self._unreachable = (tokenizer.sha256, report.unreachable)
        return report.reasons

    def conclude(self, committed: CommittedRevision) -> bool:
        """Count on with the version the statistics ended at; True when it is the revision's."""
        plan = committed.plan
        if committed.outcome == "invalid":
            self.tedtok.adopt(plan.parent, plan.version)
        elif committed.outcome == "ours":
            self.tedtok.version = committed.version
        elif committed.outcome == "theirs":
            self.tedtok.adopt(self.registry.tokenizer(self.lineage, committed.version), committed.version)
        return committed.outcome == "ours"


class RevisedMeanwhile(TokmaintError):
    """A revision planned from statistics that another process revised (or moved) before it
    could be written: nothing of it was written; theirs stands."""


@dataclass(frozen=True)
class PlannedRevision:
    """A revision planned after ``step`` from ``parent`` (number ``version``); None: no pair
    beats the margin."""

    step: int
    parent: BPETokenizer
    version: int
    revision: Revision | None
    metrics: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CommittedRevision:
    """Where a planned revision ended: ``outcome`` ours (published as ``version``), theirs
    (another version came first: ``version``), none or invalid (``version`` stays)."""

    plan: PlannedRevision
    outcome: str
    version: int
    seconds: float
