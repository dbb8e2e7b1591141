"""``tokmaint pipeline run``: the docs topic, step by step, into a lineage's statistics in Redis,
with Ted-Tok revisions published to the registry.

Each step (``stream.StepReader``: the next ``step_docs`` documents from the offsets kept in
Redis) is counted with the lineage's current version by the core's ``StepCounter`` (tokens and
within-word pairs, Ted-Tok's; adjacent tokens within and across words, LiteToken's) and written
to Redis with its step number, version and end offsets in one atomic write, a few steps at a
time (``RedisStatsStore.apply_step``, ``PipelineJob``). Records that are not Documents go to
the dead-letter topic, keyed by where they stood. When a revision is due, Ted-Tok plans it from
the Redis statistics; its statistics edit and the revised version are one atomic write
(``write_revision``), then the version is published and settled, and the next step counts with it.

Why a crash and restart leave the state as if no crash happened: the state moves only by those
atomic writes; a restart resumes from the offsets stored with the last step (a step is the same
slice from the same offsets), replays of a written step change nothing, a revision due at the
last step but not made is made then, and a revision kept but not yet published is published
(the registry returns the existing version for the same content) before anything else. Before
each step the job asks the registry for the latest version; one published by someone else (a
rollback, a LiteToken removal) is adopted in one write that forgets the statistics of the ids
it changed, and the step counts with it.
"""

from __future__ import annotations

import gc
import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import redis

from pipeline.counting_pool import CountingPool, PendingCounts, PreparedTexts
from pipeline.kafka import Producer, Record
from pipeline.lineage_statistics import MAX_PAIRS, LineageStatistics
from pipeline.metrics import PipelineMetrics
from pipeline.parts import DEFAULT_WAIT_SECONDS, connect_redis, wait_for_registry
from pipeline.stream import ReadAhead, Step, StepReader
from pipeline.config import PipelineSettings
from pipeline.topics import dead_letter_headers
from registry.client import Outages, RegistryClient, RegistryRefused
from tokenizer_service.counting import StepCounts
from tokenizer_service.errors import TokmaintError
from tokenizer_service.evolve import StreamSettings
from tokenizer_service.ordered_worker import WorkerDied
from tokenizer_service.stats_store import combine_steps

log = logging.getLogger("tokmaint.pipeline")


NEIGHBOUR_SEGMENTS = 16  # neighbour segments in Redis before the job merges them into one
LOG_ENTRIES = 16  # writes in the statistics' log before the job folds them into a snapshot (a revision does too)


@dataclass(frozen=True)
class _Counting:
    """A step being counted (its texts and version in ``pending``), where it ends and its
    documents' ids."""

    pending: PendingCounts
    end: dict[int, int]
    ids: list[str]


@dataclass(frozen=True)
class _Counted:
    """A step counted and not yet written: its counts, the version they were made with (by
    sha256) and its texts, to count again should that version not stay the current one."""

    counts: StepCounts
    sha256: str
    texts: list[str]
    ids: list[str]


class PipelineJob:
    """One lineage's job: ``run`` reads, counts, writes and revises until told to stop.

    Steps are counted one by one and written ``settings.commit_steps`` at a time
    (``combine_steps``: a key the steps share is written once), also half that many steps before
    a revision, and always before a revision, before another version is adopted, when a step
    reaches the topic's end and when the run ends; a crash loses at most the steps not yet
    written, which a restart reads and counts again from the stored offsets.

    Four things go on beside the job's loop: a thread reads and decodes the steps ahead
    (``ReadAhead``), the counting pool counts the step before (``CountingPool``: a process of
    its own and the job, sharing the step), a thread writes to Redis, and a thread commits a revision
    (validates, writes and publishes it) while the steps after it are counted with the planned
    version. Those steps are written only once the commit has ended, and counted again should it
    end at another version. While a revision is planned, the counting process splits the step
    after it into words and loads the new version as soon as it is built, rather than wait.
    """

    def __init__(
        self,
        *,
        settings: PipelineSettings,
        stream: StreamSettings,
        redis_client: redis.Redis,
        registry: RegistryClient,
        lineage: str,
        wait: float = 2.0,
        metrics: PipelineMetrics | None = None,
        outages: Outages | None = None,
    ) -> None:
        """``outages``: where the job's watch of the registry says and counts its outages (the
        jobs ``run_through_outages`` starts share one)."""
        self.settings, self.lineage = settings, lineage
        self.metrics = metrics
        self.lineage_stats = LineageStatistics(
            stream=stream, redis_client=redis_client, registry=registry, lineage=lineage, outages=outages
        )
        self.store, self.tedtok, self.config = (
            self.lineage_stats.store,
            self.lineage_stats.tedtok,
            self.lineage_stats.config,
        )
        self.step_docs = stream.step_docs if settings.step_seconds is None else settings.max_step_docs
        self.lineage_stats.outdated()  # the registry's watch starts now, not in a step's time
        # Steps are read ahead while the job waits for its counting process or for Redis.
        self.reader = ReadAhead(StepReader(settings, wait=wait), size=self.step_docs, seconds=settings.step_seconds)
        self.wait = wait
        self.dead_letters = Producer(settings.bootstrap, max_record_bytes=2 * settings.max_record_bytes)
        self._counted: list[_Counted] = []  # steps counted and not yet written
        self._step, self._offsets = 0, {}  # the last step counted and the offsets it ends at
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tokmaint-redis-write")
        self._writing: tuple[int, Future] | None = None  # the last step of the write under way, and it
        self.counting = CountingPool(own=self.tedtok.counter)
        self.counting.load(self.tedtok.tokenizer)
        self._in_flight: _Counting | None = None  # the step being counted
        meta = self.store.meta()
        # Of the last step written, kept with the statistics: a restart records it beside its first version.
        self._bytes_per_token: float | None = meta["bytes_per_token"]
        # The ids of the last ``dedupe_steps`` steps read, each with the step it came in (those
        # written are kept with the statistics): a producer's resend is counted once.
        self._seen: dict[str, int] = self.store.recent_ids() if settings.dedupe_steps else {}
        self._steps_read = meta["step"]
        self._duplicates = 0
        self._reviser = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tokmaint-revision")
        self._committing: Future | None = None  # the commit of the last revision, while it goes on
        self._revised = 0  # the last step a revision was made after (or found not due)
        self._revisions, self._revision_seconds = 0, 0.0  # published by this run, and their time
        try:
            self.lineage_stats.resume(metrics=self._measured())
        except BaseException:
            self.close()
            raise

    def _skip_resends(self, step: Step) -> int:
        """Take out of the step the documents whose id came in the last ``dedupe_steps`` steps read
        (or earlier in this one): a producer that sent again after a timeout. How many."""
        window = self.settings.dedupe_steps
        if not window or not step.documents:
            return 0
        number, oldest = self._steps_read + 1, self._steps_read + 1 - window  # the step it will be
        kept = []
        for doc in step.documents:
            if self._seen.get(doc.id, oldest) <= oldest:  # not seen within the window
                self._seen[doc.id] = number
                kept.append(doc)
        if kept:
            self._steps_read = number  # numbered as the job counts steps: a step of resends alone is none
        if len(self._seen) > 2 * window * len(step.documents):  # forget the oldest now and then
            self._seen = {i: s for i, s in self._seen.items() if s > oldest}
        resent, step.documents = len(step.documents) - len(kept), kept
        self._duplicates += resent
        return resent

    def _measured(self) -> dict[str, float]:
        """What a version records beside itself: the stream's bytes/token with the version in use,
        at the last step written (nothing before a step was)."""
        return {} if self._bytes_per_token is None else {"bytes_per_token": self._bytes_per_token}

    def close(self) -> None:
        self.lineage_stats.close()
        self._reviser.shutdown(wait=True)
        self._writer.shutdown(wait=True)
        self.counting.close()
        self.reader.close()
        self.dead_letters.close()

    def _dead_letter(self, step: Step) -> None:
        """The step's bad records, keyed by where they stood (a replayed step sends the same keys)."""
        if not step.dead:
            return
        # The broker has them all before the offsets move past them.
        self.dead_letters.send_all(
            self.settings.dlq_topic,
            [
                Record(
                    dead.value,
                    key=f"{self.settings.docs_topic}:{dead.partition}:{dead.offset}".encode(),
                    headers=dead_letter_headers(
                        dead.reason, source=self.settings.docs_topic, partition=dead.partition, offset=dead.offset
                    ),
                )
                for dead in step.dead
            ],
        )

    def _write(self, *, wait: bool = True) -> None:
        """The steps counted since the last write, their last step number, the version they
        counted with and the offsets they end at: one atomic write, sent off to Redis while the
        next steps are read and counted (Redis works on a core of its own); ``wait``: until
        Redis has it (before anything that reads or moves the statistics). A revision being
        committed ends first; steps counted ahead with a version it did not end at are counted
        again."""
        self._conclude()
        if self._counted:
            self._written()  # one write at a time, in order
            current = self.tedtok.tokenizer
            counted = [c.counts if c.sha256 == current.sha256 else self._recount(c.texts) for c in self._counted]
            self._bytes_per_token = counted[-1].bytes_per_token
            first = self._step - len(self._counted) + 1
            ids = (
                [(first + k, i) for k, c in enumerate(self._counted) for i in c.ids]
                if self.settings.dedupe_steps
                else []
            )
            self._writing = (
                self._step,
                self._writer.submit(
                    self._apply_steps,
                    counted,
                    step=self._step,
                    version=self.tedtok.version,
                    offsets=self._offsets,
                    token_texts=self.lineage_stats.token_texts(),
                    bytes_per_token=self._bytes_per_token,
                    ids=ids,
                    documents=sum(len(c.texts) for c in self._counted),
                ),
            )
            self._counted = []
            if self.store.neighbour_segments() >= NEIGHBOUR_SEGMENTS:  # merged while this write goes on
                self.store.compact_neighbours(max_pairs=MAX_PAIRS)
        if wait:
            self._written()

    def _recount(self, texts: list[str]) -> StepCounts:
        """A step's counts made again, with the current version."""
        return self.counting.counts(self.counting.submit(texts, self.tedtok.tokenizer))

    def _apply_steps(
        self,
        counted: list[StepCounts],
        *,
        step: int,
        version: int,
        offsets: dict[int, int],
        token_texts: np.ndarray,
        bytes_per_token: float | None,
        ids: list[tuple[int, str]],
        documents: int,
    ) -> bool:
        """On the writer thread: the steps as one update (combined there too: numpy's sorts let
        the reading go on), the write of ``_write``."""
        counts = combine_steps(counted, alpha=self.config.alpha)
        written = self.store.apply_step(
            counts,
            step=step,
            span=len(counted),
            version=version,
            offsets=offsets,
            neighbour_keys=counts.neighbour_keys,
            neighbour_counts=counts.neighbour_counts,
            token_texts=token_texts,
            bytes_per_token=bytes_per_token,
            ids=ids,
            keep_ids_steps=self.settings.dedupe_steps or None,
            documents=documents,
        )
        if written and self.store.log_entries() >= LOG_ENTRIES:  # no revision for a while: readers fold less
            self.store.compact()
        return written

    def _written(self) -> None:
        """Wait for the write sent off last; an error of its is raised here."""
        if self._writing is None:
            return
        step, future = self._writing
        self._writing = None
        try:
            written = future.result()
        except redis.ResponseError as exc:  # the version moved under us
            raise TokmaintError(
                f"lineage {self.lineage!r}: {exc} (another process?); start again to continue from the statistics"
            ) from None
        if not written:
            raise TokmaintError(
                f"lineage {self.lineage!r}: step {step} is in the statistics already "
                "(another job on this lineage?); start again to continue from them"
            )

    def _submit(self, step: Step, *, prepared: PreparedTexts | None = None) -> _Counting:
        """Count ``step`` with the current version (``prepared``: its texts as the counting
        pool prepared them while that version was made)."""
        texts = None if prepared else [d.text for d in step.documents]
        return _Counting(
            self.counting.submit(texts, self.tedtok.tokenizer, prepared=prepared),
            step.end,
            [d.id for d in step.documents],
        )

    def _collect(self) -> None:
        """Take the counts of the step under way (written with the next ``commit_steps`` write)."""
        if self._in_flight is None:
            return
        counting, self._in_flight = self._in_flight, None
        pending = counting.pending
        self._counted.append(_Counted(self.counting.counts(pending), pending.sha256, pending.texts, counting.ids))
        self._step, self._offsets = self._step + 1, counting.end
        # Also half a write's steps before a revision, and the step before it: the revision then
        # waits for the end of a write well under way and for a one-step write, not for a whole
        # write's (combining the steps' counts takes ~3 ms a step).
        commit_steps = self.settings.commit_steps
        if (
            self._step % commit_steps == 0
            or self.config.revision_due(self._step + 1)
            or self.config.revision_due(self._step + max(1, commit_steps // 2))
        ):
            self._write(wait=False)

    def _revision_due(self) -> bool:
        """True when the last step counted (or being counted) is due a revision not made yet."""
        last = self._step + (self._in_flight is not None)
        return last > 0 and self.config.revision_due(last) and self._revised < last

    def _revise(self, then: Step | None = None) -> None:
        """The revision due after the last step, every step written first: planned here, then
        committed on the revision thread while ``then``, the step after it, is counted with
        the planned version (and the steps after that, until a write needs the commit's end).
        The counting process splits ``then`` into words meanwhile, once it is done with the
        last step (else it would wait for the plan)."""
        prepared = None if then is None else self.counting.prepare([d.text for d in then.documents])
        self._collect()
        self._write()
        planning = time.perf_counter()
        plan = self.lineage_stats.plan(
            self._step,
            metrics=self._measured(),
            made=partial(self.counting.load, wait=False) if then is not None else None,
        )
        # The commit first: a plan never stays without its commit, whatever happens next.
        self._committing = self._reviser.submit(self.lineage_stats.commit, plan)
        self._revised = self._step
        if then is not None:
            self._in_flight = self._submit(then, prepared=prepared)
        self._revision_seconds += time.perf_counter() - planning

    def _conclude(self, *, wait: bool = True) -> None:
        """End the revision being committed (without ``wait``: only if it has ended already)."""
        if self._committing is None or not (wait or self._committing.done()):
            return
        committing, self._committing = self._committing, None
        committed = committing.result()
        self._revisions += self.lineage_stats.conclude(committed)
        self._revision_seconds += committed.seconds
        if self.metrics is not None:
            self.metrics.revisions.labels(self.lineage, committed.outcome).inc()
            self.metrics.revision_seconds.labels(self.lineage).observe(committed.seconds)

    def _catch_up(self) -> None:
        """Every step counted and written, and revised after when due (before the job waits,
        adopts another version or ends)."""
        self._collect()
        self._write()
        if self._revision_due():
            self._revise()
            self._conclude()

    def run(self, *, max_steps: int | None = None, until_idle: bool = False) -> dict[str, Any]:
        """Steps until ``max_steps`` are done (or, with ``until_idle``, the topic has no more).
        Only ``complete`` steps count: one the topic went quiet in is read again from the same
        offsets after the reader's wait, until it is whole; with ``until_idle`` the topic has
        ended, and its last step counts as it stands.

        A step is read and decoded here while the one before it is counted. A revision due after
        step R is made once step R+1 is read, which is counted with the planned version while
        the revision is committed.
        """
        # What lives now (modules, the tokenizer, the caller's objects) lives as long as the job:
        # the collector's full passes skip it (one took ~0.1 s in a step of the benchmark's).
        gc.freeze()
        started = time.perf_counter()
        self._conclude()
        self._written()
        meta = self.store.meta()  # where the statistics are (an earlier run's error left steps unwritten)
        self._step, self._offsets, self._counted, self._in_flight = meta["step"], meta["offsets"], [], None
        self._revised, self._revisions, self._revision_seconds = meta["revised"], 0, 0.0
        try:
            documents, dead, megabytes, done = self._steps(max_steps=max_steps, until_idle=until_idle)
        except WorkerDied as exc:
            self._settle_after_error()
            raise TokmaintError(
                f"lineage {self.lineage!r}: the counting process died at step {self._step + 1} "
                f"({exc}); start again to continue from the statistics"
            ) from None
        except BaseException:
            self._settle_after_error()
            raise
        seconds = time.perf_counter() - started
        return {
            "lineage": self.lineage,
            "steps": done,
            "step": self.store.step,
            "documents": documents,
            "dead_lettered": dead,
            "duplicates": self._duplicates,
            "revisions": self._revisions,
            "revision_seconds": self._revision_seconds,
            "version": self.tedtok.version,
            "seconds": seconds,
            "mb_per_s": megabytes / seconds if seconds else 0.0,
        }

    def _settle_after_error(self) -> None:
        """After an error: let the commit and the write under way end (their own errors aside),
        so that the next ``run`` starts from what Redis holds, at the version it holds."""
        for settle in (self._conclude, self._written):
            try:
                settle()
            except Exception as exc:  # the first error is the one raised
                log.warning("lineage %s: after an error, also: %s", self.lineage, exc, extra={"lineage": self.lineage})
        self._committing = self._writing = None
        version = self.store.meta()["version"]
        if version is not None and version != self.tedtok.version:
            self.tedtok.adopt(self.lineage_stats.registry.tokenizer(self.lineage, version), version)

    def _steps(self, *, max_steps: int | None, until_idle: bool) -> tuple[int, int, float, int]:
        """The loop of ``run``: documents, dead letters, megabytes and steps done."""
        done, documents, dead, megabytes = 0, 0, 0, 0.0
        read_from = self._offsets  # ahead of self._offsets by the step being counted
        last = time.perf_counter()
        while max_steps is None or done < max_steps:
            self._conclude(wait=False)
            # Someone else's version (not while our own is being published): counted with from this step.
            if self._committing is None and self.lineage_stats.outdated():
                self._catch_up()
                self.lineage_stats.follow()
            step = self.reader.read(read_from)
            if step.documents and not step.complete and not until_idle:
                # The topic went quiet mid-step: a replay of it would cut this step elsewhere once
                # more documents come. Nothing of it is counted, dead-lettered or taken as seen;
                # it is read again from the same offsets after the reader's wait.
                self._catch_up()
                time.sleep(self.wait)
                continue
            resent = self._skip_resends(step)
            self._dead_letter(step)
            dead += len(step.dead)
            if not step.documents:
                self._catch_up()
                if step.dead or resent:  # dead letters and resends only: past them, with no step
                    self.store.advance(step=self._step, offsets=step.end)
                    self._offsets = read_from = step.end
                elif until_idle:
                    break
                continue
            read_from = step.end
            if self._revision_due():
                self._revise(then=step)
            else:
                counting = self._submit(step)
                self._collect()  # the step before, counted while this one was read
                self._in_flight = counting
            if step.lag == 0:  # caught up with the topic: written while the next records are waited for
                self._collect()
                self._write(wait=False)
            documents += len(step.documents)
            step_mb = sum(len(d.text.encode("utf-8")) for d in step.documents) / 1e6
            megabytes += step_mb
            done += 1
            if self.metrics is not None:
                now = time.perf_counter()
                self.metrics.step(
                    documents=len(step.documents), megabytes=step_mb, dead=len(step.dead), seconds=now - last
                )
                self.metrics.consumer_lag.labels(self.lineage).set(step.lag)
                self.metrics.version.labels(self.lineage).set(self.tedtok.version)
                if self._bytes_per_token is not None:
                    self.metrics.bytes_per_token.labels(self.lineage).set(self._bytes_per_token)
                last = now
        self._catch_up()
        return documents, dead, megabytes, done


def run_through_outages(
    *,
    settings: PipelineSettings,
    stream: StreamSettings,
    redis_client: redis.Redis,
    registry: RegistryClient,
    lineage: str,
    metrics: PipelineMetrics | None = None,
    max_steps: int | None = None,
    until_idle: bool = False,
    wait: float = DEFAULT_WAIT_SECONDS,
) -> dict[str, Any]:
    """``PipelineJob.run``, started again whenever Redis or the registry goes away, once it
    answers: what Redis kept is the state a restart resumes from, and a revision the registry did
    not take stays pending there, published by the job that starts again. A long-running job
    waits as long as it takes; ``until_idle``, ``wait`` seconds. A registry that refuses (a 4xx)
    is no outage: its error is raised. The registry's outages, its jobs' watches' and the waits
    between two jobs alike, are said once as they begin and once as they end, and their seconds
    are ``metrics``' ``tokmaint_registry_away_seconds``.

        report = run_through_outages(settings=PipelineSettings(), stream=StreamSettings(),
                                     redis_client=connect_redis(url), registry=client, lineage="news")
    """
    patience = wait if until_idle else float("inf")  # how long a part that went away is waited for
    outages = Outages(registry.endpoint, lineage)
    if metrics is not None:
        metrics.registry_away.labels(lineage).set_function(lambda: outages.seconds)
    # Each start makes a new job; only its Redis client can differ from the last (connected again after an outage).
    new_job = partial(
        PipelineJob,
        settings=settings,
        stream=stream,
        registry=registry,
        lineage=lineage,
        metrics=metrics,
        outages=outages,
    )
    while True:
        job = None
        try:
            job = new_job(redis_client=redis_client)
            return job.run(max_steps=max_steps, until_idle=until_idle)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            log.warning(
                "Redis at %s went away (%s): starting again from its statistics once it answers", settings.redis, exc
            )
            if metrics is not None:
                metrics.redis_down.labels(lineage).set(1)
                metrics.restarts.labels(lineage).inc()
            redis_client = connect_redis(settings.redis, wait=patience)
            if metrics is not None:
                metrics.redis_down.labels(lineage).set(0)
        except RegistryRefused as exc:
            if exc.status and exc.status < 500:  # a refusal, not a registry that is down
                raise
            outages.began(exc, meanwhile="starts again from its statistics once it answers")
            if metrics is not None:
                metrics.restarts.labels(lineage).inc()
            wait_for_registry(registry.endpoint, wait=patience)
            outages.ended()
        finally:
            try:
                if job is not None:
                    job.close()
            except (redis.ConnectionError, redis.TimeoutError):  # what was not written is counted again
                pass
