"""``tokmaint evolve``: replay a timestamped corpus through Ted-Tok and write every version.

Versions go to an output directory and/or a registry lineage (``publish``). The directory holds
``v0001/tokenizer.json`` (the initial tokenizer), one folder per
revision with ``tokenizer.json`` and ``diff.json``, and ``steps.jsonl`` (one line a time step:
step, current version, bytes per token). Each version is validated against its parent and
written atomically *before* the step that made it is logged, so the log never names a version
that is not on disk. The run is deterministic, so running the same command over the same
directory again (after a crash or Ctrl-C) replays the stream, checks every version and log line
already there byte for byte, and writes only what is missing (see ``output_dir``).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Self

from pydantic import model_validator

from tqdm import tqdm

from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.corpus import Corpus, batches
from tokenizer_service.errors import CorpusError, OutputError
from tokenizer_service.output_dir import OutputDir, StepLog
from tokenizer_service.settings import LineageName, Number, Settings, SettingsConfigDict, setting, share, whole
from tokenizer_service.tedtok import TedTok, TedTokConfig
from tokenizer_service.tokenizer_json import MAX_ID_SPACE
from tokenizer_service.validation import validate
from schemas.revision import RevisionDiff

VERSION_OUTPUTS = (r"steps\.jsonl", r"v\d{4,}/tokenizer\.json", r"v\d{4,}/diff\.json")


class StreamSettings(Settings):
    """Ted-Tok on an open-ended document stream: the one place the defaults of ``evolve``,
    ``bench drift`` and the pipeline come from (environment: ``TOKMAINT_STREAM_*``).

    Everything is counted in documents, so nothing needs the stream's length, and how documents
    are grouped into time steps (``step_docs``) changes only the granularity: the statistics
    remember about ``horizon_docs`` documents (α per step = 1 − exp(−step_docs / horizon_docs)),
    and revisions come every ``interval_docs`` documents, the first at the first interval
    boundary once ``warmup_docs`` have passed: by default one horizon, so that the first
    revision decides on statistics that have seen as many documents as they are meant to
    remember (``docs/algorithms.md``: before that, a stream's first documents are one burst).
    The price is in tokens over the horizon, so while the statistics have seen less than a
    horizon (τ starts at 0) it is stricter: a swap then needs more evidence, deliberately.

    >>> StreamSettings().warmup_steps, StreamSettings(horizon_docs=3200).warmup_steps
    (100, 50)
    """

    model_config = SettingsConfigDict(env_prefix="TOKMAINT_STREAM_")

    vocab_size: int = setting(4096, whole(257, MAX_ID_SPACE), "vocabulary of the initial tokenizer it trains")
    step_docs: int = setting(64, whole(1), "documents per time step")
    horizon_docs: int = setting(
        6400, whole(1), "documents the statistics remember (the EMA's time constant; at least --step-docs)"
    )
    interval_docs: int = setting(640, whole(1), "documents between revisions (rounded to whole steps)")
    warmup_docs: int | None = setting(
        None,
        whole(0),
        "documents before the first revision, which comes at the next "
        "interval boundary (default: --horizon-docs, so that it "
        "decides on statistics that have seen a horizon)",
    )
    beta: float = setting(1.2, Number(float, low=0, low_open=True), "margin β: add when τ_pair > β·τ_token[sink]")
    batch_size: int = setting(1000, whole(1), "most swaps (an add and a delete) per revision (K, a safety cap)")
    id_price: float = setting(
        10.0,
        Number(float, low=0),
        "tokens a swap must save among the horizon's documents for the id it changes "
        "(0 with --base-token-cost 0: the paper's rule)",
    )
    base_token_cost: float = setting(
        3e-5,
        Number(float, low=0),
        "share of the stream's tokens a swap must also save when it deletes a pre-trained token (0: none)",
    )

    @model_validator(mode="after")
    def _horizon_holds_a_step(self) -> Self:
        if self.horizon_docs < self.step_docs:
            raise ValueError(
                f"horizon_docs must be at least step_docs ({self.step_docs}): the statistics remember "
                f"at least one step, got {self.horizon_docs}"
            )
        return self

    @property
    def alpha(self) -> float:
        """The EMA factor per time step."""
        return -math.expm1(-self.step_docs / self.horizon_docs)

    @property
    def warmup_steps(self) -> int:
        """Time steps before the first revision: ``warmup_docs``, or one horizon when unset."""
        docs = self.horizon_docs if self.warmup_docs is None else self.warmup_docs
        return round(docs / self.step_docs)

    def tedtok_config(self, **options: Any) -> TedTokConfig:
        """The Ted-Tok config of this stream (no length needed)."""
        return TedTokConfig(
            alpha=self.alpha,
            beta=self.beta,
            batch_size=self.batch_size,
            interval=max(1, round(self.interval_docs / self.step_docs)),
            warmup_steps=self.warmup_steps,
            id_price=self.id_price,
            base_token_cost=self.base_token_cost,
            **options,
        )


def quick_revisions_config() -> TedTokConfig:
    """Ted-Tok on 32-document steps that revises every 64 documents from the 64th on, at no id
    price: a lineage's first versions from a few hundred documents (the distributed bench's).

    >>> config = quick_revisions_config()
    >>> config.interval, config.warmup_steps, config.id_price
    (2, 2, 0.0)
    """
    return StreamSettings(
        step_docs=32,
        horizon_docs=320,
        interval_docs=64,
        warmup_docs=64,
        batch_size=8,
        id_price=0.0,
        base_token_cost=0.0,
    ).tedtok_config()


class EvolveSettings(StreamSettings):
    """``tokmaint evolve``: the stream's settings, the initial tokenizer's and the lineage's name
    (environment: ``TOKMAINT_EVOLVE_*``)."""

    model_config = SettingsConfigDict(env_prefix="TOKMAINT_EVOLVE_")
    init_share: float = setting(
        0.2, share(one=False), "share of the oldest documents the initial tokenizer is trained on"
    )
    append_ids: bool = setting(False, None, "give new tokens fresh ids instead of recycling freed ones")
    lineage: LineageName = setting("default", None, "lineage name recorded in every diff")


def _write_version(out: OutputDir, version: int, tokenizer: BPETokenizer, diff: RevisionDiff | None) -> None:
    """Write ``vNNNN/`` atomically, or, when a resumed run finds it, check it is byte for byte
    the version this run made (versions are immutable)."""
    name = f"v{version:04d}"
    files = {"tokenizer.json": tokenizer.to_json_bytes()}
    if diff is not None:
        files["diff.json"] = diff.to_json().encode("utf-8")
    folder = out.path / name
    if folder.exists():
        for file_name, data in files.items():
            path = folder / file_name
            if not path.is_file() or path.read_bytes() != data:
                raise OutputError(
                    f"{path} is not the version this run makes (changed since it was written?); choose another --out"
                )
        return

    def write(staging: Path) -> None:
        for file_name, data in files.items():
            (staging / file_name).write_bytes(data)

    out.write_directory(name, write)


VersionSink = Callable[[int, BPETokenizer, RevisionDiff | None], None]


def replay(
    tedtok: TedTok,
    stream: Iterable[list[str]],
    sinks: list[VersionSink],
    log: StepLog | None = None,
    *,
    progress: bool = False,
) -> float | None:
    """Ted-Tok over a stream of steps (each a list of texts) in memory, the one driver of ``evolve``
    and of the demo's in-process pipeline: each step observed, each revision validated against its
    parent and handed to every sink before the step that made it is logged. Returns the first
    step's bytes per token.

    >>> from tokenizer_service.tedtok import TedTokConfig
    >>> old = BPETokenizer.train(["stream token merge drift commit"] * 50, vocab_size=280)
    >>> tedtok = TedTok(old, config=TedTokConfig(alpha=0.5, interval=1, warmup_steps=0, id_price=0, base_token_cost=0))
    >>> made = []
    >>> steps = [["quantum llama vector prompt"] * 30] * 3
    >>> first = replay(tedtok, steps, [lambda number, tokenizer, diff: made.append(number)])
    >>> made, tedtok.version  # a revision after every step, each handed over
    ([2, 3, 4], 4)
    """
    parent, first_bpt = tedtok.tokenizer, None
    parent_unreachable = None  # the last report's: a version's parent is the version validated before it
    for texts in tqdm(stream, desc="evolve", unit="step", disable=not progress):
        revision = tedtok.observe_texts(texts)
        if revision is not None:
            report = validate(revision.tokenizer, parent=parent, parent_unreachable=parent_unreachable)
            report.raise_for_reasons(source=f"version {revision.diff.version}")
            parent_unreachable = report.unreachable
            for sink in sinks:
                sink(revision.diff.version, revision.tokenizer, revision.diff)
            parent = revision.tokenizer
        assert tedtok.last_counts is not None  # observe_texts has just counted this step
        bpt = tedtok.last_counts.bytes_per_token
        first_bpt = bpt if first_bpt is None else first_bpt
        if log is not None:
            log.write({"step": tedtok.store.step, "version": tedtok.version, "bytes_per_token": bpt})
            if revision is not None:
                log.sync()
    if log is not None:
        log.sync()
    return first_bpt


def run_evolve(
    corpus: Corpus,
    out: str | Path | None,
    settings: EvolveSettings | None = None,
    *,
    initial: BPETokenizer | None = None,
    force: bool = False,
    progress: bool = False,
    publish: VersionSink | None = None,
) -> dict[str, Any]:
    """Evolve ``initial`` (default: trained on the oldest ``init_share``) over the rest of the
    corpus, writing every version into the output directory ``out`` (claimed by the rules of
    ``output_dir``, after the inputs are checked) and/or handing it to ``publish`` (a registry
    lineage); returns the summary the CLI prints."""
    settings = settings or EvolveSettings()
    docs = corpus.documents
    n_init = 0
    if initial is None:
        n_init = max(1, round(settings.init_share * len(docs)))
        if n_init >= len(docs):
            raise CorpusError(
                corpus.path,
                f"{len(docs)} documents: --init-share {settings.init_share} leaves none to "
                "stream after training the initial tokenizer; lower --init-share",
            )
    run = {
        "corpus_sha256": corpus.sha256,
        "tokenizer_sha256": initial.sha256 if initial else None,
        "skipped_records": len(corpus.skipped),
        **settings.model_dump(),
    }
    with contextlib.ExitStack() as stack:
        output = None
        sinks: list[VersionSink] = []
        if out is not None:
            output = stack.enter_context(
                OutputDir.claim(out, command="evolve", run=run, outputs=VERSION_OUTPUTS, force=force)
            )
            sinks.append(lambda number, tokenizer, diff: _write_version(output, number, tokenizer, diff))
        if publish is not None:
            sinks.append(publish)
        if initial is None:
            initial = BPETokenizer.train(
                [d.text for d in docs[:n_init]], vocab_size=settings.vocab_size, progress=progress
            )
            validate(initial).raise_for_reasons(source="the trained initial tokenizer")
        stream = list(batches(docs[n_init:], settings.step_docs))
        tedtok = TedTok(
            initial, config=settings.tedtok_config(recycle_ids=not settings.append_ids), lineage=settings.lineage
        )
        for sink in sinks:
            sink(1, initial, None)
        log = None
        if output is not None:
            log = StepLog(output.path / "steps.jsonl", resume=output.resumed)
            stack.callback(log.close)
        first_bpt = replay(tedtok, stream, sinks, log, progress=progress)
    # The stream had a step: a corpus holds a document (read_corpus refuses an empty one), and the
    # initial tokenizer's share leaves some to stream (checked above).
    assert tedtok.last_counts is not None
    return {
        "steps": len(stream),
        "versions": tedtok.version,
        "tokens_changed": sum(len(r.diff.entries) for r in tedtok.revisions),
        "bytes_per_token": {"first_step": first_bpt, "last_step": tedtok.last_counts.bytes_per_token},
        "revision_seconds": tedtok.revision_seconds,
        "resumed": output.resumed if output is not None else None,
        "skipped_records": len(corpus.skipped),
        "out": str(output.path) if output is not None else None,
    }
