"""``tokmaint bench lifelong``: does a lifelong tokenizer help the model? Two identical tiny models
go through a drifting stream in order, the same documents in the same optimizer steps: one keeps
the stream's first version for good (static), the other takes each Ted-Tok version as the
pipeline's logic publishes it (evolving, ``apply_revision`` between two steps). After each part of
the stream, both are scored on the next part, the future neither has seen, in bits per byte
(``trainer.byte_level``: exact whatever the version), and so is their byte-level ensemble.

    report = run_lifelong_bench("data/git-commits-sample.jsonl.gz", LifelongBenchSettings())
    report["bits_per_byte"]["evolving"], report["tokens"]["evolving"]

``token_savings``: the share of the static model's tokens the evolving one saved, beside what a
tokenizer trained anew on each part and used for the next would have saved (a reference for how
far the stream drifts at this vocabulary size), and one trained on each part and used for that
same part (hindsight: about the most a tokenizer of this size can save on the stream); and
``share_of_hindsight``, the evolving one's savings over hindsight's.

The stream is cut by time into ``parts`` of as many documents; the initial version is trained on
the first part, Ted-Tok replays the rest in steps of ``step_docs`` documents, and a version made
after step s reaches the evolving model before the batch that holds the step's next document.
"""

from __future__ import annotations

import time
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import GPT2LMHeadModel

from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.corpus import Document, oldest, read_corpus
from tokenizer_service.errors import CorpusError
from tokenizer_service.evolve import StreamSettings, replay
from tokenizer_service.hub_files import BOS_TOKENS, bos_token_id
from tokenizer_service.settings import Number, SettingsConfigDict, setting, whole
from tokenizer_service.tedtok import TedTok
from trainer.apply_revision import STRATEGIES, Strategy, apply_revision, set_removed
from trainer.byte_level import LN2, ByteLevelModel, ensemble_log_prob, first_bytes, fit_text
from trainer.follow import token_batch, warm_recent_rows
from trainer.loop import tiny_gpt2_config
from trainer.config import CAUSAL_LM_LOSS, LEARNING_RATE, NewRowWarmUpSettings
from trainer.zip2zip import Zip2zipLM, hyper_parameters

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "git-commits-sample.jsonl.gz"


class LifelongBenchSettings(StreamSettings, NewRowWarmUpSettings):
    model_config = SettingsConfigDict(env_prefix="TOKMAINT_BENCH_LIFELONG_")

    vocab_size: int = setting(1024, whole(258, 1 << 16), "vocabulary of the first version (trained on the first part)")
    # A short stream: the first revision after two intervals, not one horizon (6,400 documents,
    # most of the 3 MB sample), so that the stream has versions to take (as before issue 46).
    warmup_docs: int | None = setting(
        1280, whole(0), "documents before the first revision (default: 1,280, two intervals)"
    )
    max_mb: float = setting(3.0, Number(float, low=0, low_open=True), "megabytes of the corpus to stream (its oldest)")
    parts: int = setting(6, whole(2), "parts the stream is cut into by time; each is scored before it is trained on")
    train_batch: int = setting(16, whole(1), "documents per optimizer step")
    doc_bytes: int = setting(
        384,
        whole(1),
        "bytes of each document trained on, at most (its start): both models "
        "read the same text whole, so their token counts compare",
    )
    lr: float = setting(3e-3, LEARNING_RATE, "AdamW's learning rate")
    strategy: Strategy = setting(
        "parents_mean", None, f"how the evolving model's new rows start: {', '.join(STRATEGIES)}"
    )
    # 48 documents gave one part's evolving / static a standard error of 0.4 points (git, 8 MB):
    # more than the 0.3% a revision may cost. 1,024: 0.07 points, for ~3 ms a document and model.
    # The ensemble goes byte by byte, at ~100 times a model's cost: on fewer.
    eval_docs: int = setting(1024, whole(1), "documents of the next part scored after each part (evenly spaced)")
    ensemble_docs: int = setting(48, whole(1), "of those, documents the byte-level ensemble is scored on")
    eval_bytes: int = setting(192, whole(1), "bytes of each scored document, at most (its start)")
    seed: int = setting(0, whole(0), "the models' initial weights (the same for all)")
    max_merge: int = setting(3, whole(1), "the zip2zip arms' largest hypertoken, in base tokens (1: no zip2zip arms)")


class TinyModel:
    """A tiny GPT-2 (no dropout) that the benchmarks train here, its optimizer, the version it reads
    with and the tokens it has processed (codes, for a zip2zip model). ``max_merge`` above 1: it
    reads and predicts LZW hypertokens of each document (``trainer.zip2zip``)."""

    def __init__(
        self, tokenizer: BPETokenizer, *, lr: float, seed: int, max_merge: int = 1, n_positions: int = 256
    ) -> None:
        torch.manual_seed(seed)
        # No dropout: two models then differ by their versions alone (same weights, same batches).
        bos = bos_token_id(tokenizer)
        self.model = GPT2LMHeadModel(
            tiny_gpt2_config(
                tokenizer.id_space,
                resid_pdrop=0.0,
                embd_pdrop=0.0,
                attn_pdrop=0.0,
                bos_token_id=bos,
                eos_token_id=bos,
                n_positions=n_positions,
            )
        )
        self.model.loss_type = CAUSAL_LM_LOSS
        self.zip2zip = Zip2zipLM(self.model, max_merge=max_merge, bos_token_id=bos) if max_merge > 1 else None
        extra = hyper_parameters(self.zip2zip) if self.zip2zip is not None else []
        self.optimizer = torch.optim.AdamW([*self.model.parameters(), *extra], lr=lr)
        set_removed(self.model, tokenizer.free_ids)
        self.tokenizer, self.version, self.tokens, self.seconds = tokenizer, 1, 0, 0.0

    def step(self, texts: list[str], seq_len: int) -> None:
        started = time.perf_counter()
        self.model.train()
        if self.zip2zip is None:
            inputs, labels = token_batch(self.tokenizer, texts, seq_len=seq_len)
            self.model(input_ids=inputs, labels=labels).loss.backward()
            self.tokens += int((labels != -100).sum())
        else:  # each document its own context, cut as token_batch cuts it (the bos first)
            out = self.zip2zip(self.zip2zip.batch([ids[: seq_len - 1] for ids in self.tokenizer.encode_batch(texts)]))
            out.loss.backward()
            self.tokens += out.codes
        self.optimizer.step()
        self.optimizer.zero_grad()
        self.seconds += time.perf_counter() - started

    @torch.no_grad()
    def code_bits(self, texts: list[str]) -> float:
        """A zip2zip model's bits over ``texts``: each code's −log2 q, from ``[bos]``."""
        self.model.eval()
        nats = sum(self.zip2zip(self.zip2zip.batch([self.tokenizer.encode(t)])).nats for t in texts)
        return nats / LN2

    def byte_model(self) -> ByteLevelModel:
        return ByteLevelModel(self.model, self.tokenizer, bos_token_id=bos_token_id(self.tokenizer))


def _evenly(items: list[Any], k: int) -> list[Any]:
    """``k`` of ``items`` evenly spaced, the first and the last among them (all when k ≥ their number).

    >>> _evenly(list(range(10)), 4)
    [0, 3, 6, 9]
    """
    return [items[round(i)] for i in np.linspace(0, len(items) - 1, min(k, len(items)))]


def _scored(docs: list[Document], settings: LifelongBenchSettings) -> list[str]:
    """The documents of a part that are scored: ``eval_docs`` of them evenly spaced, each its first
    ``eval_bytes`` bytes (whole characters)."""
    return [first_bytes(d.text, settings.eval_bytes) for d in _evenly(docs, settings.eval_docs)]


def _bits_per_byte(runs: dict[str, TinyModel], texts: list[str], ensemble_docs: int) -> dict[str, Any]:
    """Bits per byte over ``texts`` of each model: exact at the byte level for the static and the
    evolving one, each code's cost for the zip2zip ones (each text cut to what all read in one
    context); and under ``"ensemble"``, the byte-level ensemble of the static and the evolving
    model beside them both on ``ensemble_docs`` of the texts, evenly spaced."""
    models = {name: run.byte_model() for name, run in runs.items() if run.zip2zip is None}
    for model in models.values():
        model.model.eval()
    texts = [t for t in (fit_text(list(models.values()), text) for text in texts) if t]
    sizes = [len(t.encode("utf-8")) for t in texts]
    n_bytes = sum(sizes)
    log_probs = {name: [model.prefix(t).log_prob for t in texts] for name, model in models.items()}
    bits = {name: -sum(lps) / LN2 / n_bytes for name, lps in log_probs.items()}
    bits |= {name: run.code_bits(texts) / n_bytes for name, run in runs.items() if run.zip2zip is not None}
    few = _evenly(list(range(len(texts))), ensemble_docs)
    few_bytes = sum(sizes[i] for i in few)
    ensemble = {name: -sum(lps[i] for i in few) / LN2 / few_bytes for name, lps in log_probs.items()}
    ensemble["ensemble"] = -sum(ensemble_log_prob(list(models.values()), texts[i])[0] for i in few) / LN2 / few_bytes
    return {"bits_per_byte": bits, "documents": len(texts), "ensemble": {**ensemble, "documents": len(few)}}


def _part_tokenizer_savings(
    parts: list[list[Document]],
    trained: list[list[str]],
    static_by_part: list[int],
    initial: BPETokenizer,
    settings: LifelongBenchSettings,
) -> dict[str, float]:
    """The shares of the static model's tokens (``static_by_part``, on each part's ``trained``
    texts) that tokenizers trained anew on each part (at ``vocab_size``, with no regard for the
    model) would save: ``retrained_each_part`` reads each part with the one trained on the part
    before (what retraining from scratch buys), ``hindsight_each_part`` with the one trained on
    that very part (what a tokenizer of this size could save at best, knowing the part in advance).
    The first part is read with the first version (``initial``, trained on it) in all three."""
    readers = [initial] + [
        BPETokenizer.train([d.text for d in part], vocab_size=settings.vocab_size, special_tokens=[BOS_TOKENS[0]])
        for part in parts[1:]
    ]

    def read(lag: int) -> int:
        """Tokens of every part, each read with the tokenizer trained ``lag`` parts before it."""
        later = range(1, len(parts))
        return static_by_part[0] + sum(sum(map(len, readers[p - lag].encode_batch(trained[p]))) for p in later)

    total = sum(static_by_part)
    return {"retrained_each_part": 1 - read(1) / total, "hindsight_each_part": 1 - read(0) / total}


def run_lifelong_bench(
    corpus: str | Path | None = None,
    settings: LifelongBenchSettings | None = None,
    *,
    plot: str | Path | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Static against evolving through the stream (see the module); ``plot``: a folder to draw
    lifelong.png into."""
    from tqdm import tqdm

    settings = settings or LifelongBenchSettings()
    started = time.perf_counter()
    path = Path(corpus) if corpus else SAMPLE
    docs = oldest(read_corpus(path, progress=progress), settings.max_mb)
    if len(docs) < settings.parts * settings.train_batch:
        raise CorpusError(
            path,
            f"{len(docs)} documents in --max-mb {settings.max_mb}: too few for {settings.parts} "
            f"parts of {settings.train_batch}-document batches",
        )
    bounds = [round(k * len(docs) / settings.parts) for k in range(settings.parts + 1)]
    parts = [docs[a:b] for a, b in zip(bounds, bounds[1:])]
    initial = BPETokenizer.train(
        [d.text for d in parts[0]], vocab_size=settings.vocab_size, special_tokens=[BOS_TOKENS[0]], progress=progress
    )

    # The versions, as the pipeline's logic publishes them over the rest of the stream, each with
    # the index of the first document that comes after the step that made it.
    versions: list[tuple[int, Any]] = []
    tedtok = TedTok(initial, config=settings.tedtok_config())
    stream = [
        [d.text for d in docs[s : s + settings.step_docs]] for s in range(bounds[1], len(docs), settings.step_docs)
    ]
    replay(
        tedtok,
        stream,
        [
            lambda number, tokenizer, diff: versions.append(
                (bounds[1] + tedtok.store.step * settings.step_docs, (number, tokenizer, diff))
            )
        ],
        progress=progress,
    )
    pending = list(versions)

    # Every token is at least a byte: a document of doc_bytes bytes is never cut by its tokens.
    seq_len = settings.doc_bytes + 1
    arms = ["static", "evolving"] + (["static_zip2zip", "evolving_zip2zip"] if settings.max_merge > 1 else [])
    runs = {
        name: TinyModel(
            initial,
            lr=settings.lr,
            seed=settings.seed,
            n_positions=max(256, seq_len),
            max_merge=settings.max_merge if name.endswith("zip2zip") else 1,
        )
        for name in arms
    }
    trained = [[first_bytes(d.text, settings.doc_bytes) for d in part] for part in parts]
    static_by_part: list[int] = []  # the static model's tokens on each part
    rows = []
    recent: deque[str] = deque(maxlen=settings.warm_docs)  # what the models trained on last
    since = 0  # optimizer steps since the version before: what bounds a warm-up (warm_shape)
    bar = tqdm(total=len(docs), disable=not progress, unit="doc", desc="lifelong")
    for p, part in enumerate(parts):
        tokens_before = {name: run.tokens for name, run in runs.items()}
        trained_at = time.perf_counter()
        for start in range(0, len(part), settings.train_batch):
            position = bounds[p] + start
            while pending and pending[0][0] <= position:  # published before this batch's documents
                _, (number, tokenizer, diff) = pending.pop(0)
                for evolving in (run for name, run in runs.items() if name.startswith("evolving")):
                    applied = apply_revision(
                        evolving.model,
                        evolving.optimizer,
                        diff,
                        strategy=settings.strategy,
                        previous=evolving.tokenizer,
                    )
                    evolving.tokenizer, evolving.version = tokenizer, number
                    # (A zip2zip model reads hypertokens: its rows learn in its own loss, not this one.)
                    if evolving.zip2zip is None and recent:
                        warming = time.perf_counter()  # part of the evolving model's training time
                        warm_recent_rows(
                            evolving.model,
                            tokenizer,
                            applied.warm_ids,
                            list(recent),
                            trained_steps=since,
                            trained_texts=since * settings.train_batch,
                            steps=settings.warm_steps,
                            lr=settings.warm_lr,
                            budget=settings.revision_budget,
                            seq_len=seq_len,
                        )
                        evolving.seconds += time.perf_counter() - warming
                since = 0
            texts = trained[p][start : start + settings.train_batch]
            for run in runs.values():
                run.step(texts, seq_len)
            recent.extend(texts)
            since += 1
            bar.update(len(texts))
        train_seconds = time.perf_counter() - trained_at
        static_by_part.append(runs["static"].tokens - tokens_before["static"])
        if p + 1 < len(parts):
            scored = time.perf_counter()
            scores = _bits_per_byte(runs, _scored(parts[p + 1], settings), settings.ensemble_docs)
            bits = scores["bits_per_byte"]
            rows.append(
                {
                    "part": p + 1,
                    "trained_through": p,
                    "version": runs["evolving"].version,
                    "static": bits["static"],
                    "evolving": bits["evolving"],
                    "bits_per_byte": {**bits, "ensemble": scores["ensemble"]["ensemble"]},
                    "documents": scores["documents"],
                    "ensemble": scores["ensemble"],
                    "tokens": {name: run.tokens - tokens_before[name] for name, run in runs.items()},
                    "train_seconds": train_seconds,
                    "eval_seconds": time.perf_counter() - scored,
                }
            )
    bar.close()
    mean = {name: float(np.mean([row["bits_per_byte"][name] for row in rows])) for name in rows[0]["bits_per_byte"]}
    # The ensemble against the better of its two members, on the same (fewer) documents.
    few = {name: float(np.mean([row["ensemble"][name] for row in rows])) for name in ("static", "evolving", "ensemble")}
    saved = 1 - runs["evolving"].tokens / runs["static"].tokens
    references = _part_tokenizer_savings(parts, trained, static_by_part, initial, settings)
    report = {
        "bits_per_byte": mean,
        "tokens": {name: run.tokens for name, run in runs.items()},
        "token_savings": {
            "evolving": saved,
            **references,
            # Of what a tokenizer trained on each part in hindsight saves, the share the evolving one does.
            "share_of_hindsight": saved / references["hindsight_each_part"],
        },
        "train_seconds": {name: run.seconds for name, run in runs.items()},
        "versions": 1 + len(versions),
        "parts": rows,
        "documents": len(docs),
        "evolving_vs_static": mean["evolving"] / mean["static"] - 1,
        "ensemble_vs_best": few["ensemble"] / min(few["static"], few["evolving"]) - 1,
        "seconds": time.perf_counter() - started,
    }
    if plot is not None:
        report["plot"] = str(_plot(rows, Path(plot)))
    return report


def _plot(rows: list[dict[str, Any]], folder: Path) -> Path:
    """lifelong.png in ``folder``: bits per byte on the next part, by part, for each model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6.4, 4))
    parts = [row["part"] for row in rows]
    for name, style in (
        ("static", "o-"),
        ("evolving", "s-"),
        ("ensemble", "^--"),
        ("static_zip2zip", "o:"),
        ("evolving_zip2zip", "s:"),
    ):
        if name in rows[0]["bits_per_byte"]:
            label = name.replace("_", " + ")
            if name == "ensemble":  # scored on fewer documents than the arms
                label += f" ({rows[0]['ensemble']['documents']} of the documents)"
            ax.plot(parts, [row["bits_per_byte"][name] for row in rows], style, label=label)
    ax.set_xticks(parts)
    ax.set_xlabel("part scored (the model has trained on the parts before it)")
    ax.set_ylabel("bits per byte (lower is better)")
    ax.set_title("A static against a lifelong tokenizer, on the future of the stream")
    ax.legend()
    fig.tight_layout()
    path = folder / "lifelong.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
