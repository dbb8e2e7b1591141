"""Follow a lineage from any PyTorch training loop: the version the model is on, each newer one
applied between two optimizer steps, and batches encoded with the version the model has.

    follower = LineageFollower("http://registry:8000", "news")
    model = follower.prepare(GPT2LMHeadModel(tiny_gpt2_config(follower.tokenizer.id_space)))
    optimizer = torch.optim.AdamW(model.parameters())
    for texts in batches:
        model = follower.between_steps(model, optimizer)     # a version due is applied here
        inputs, labels = follower.encode(texts, seq_len=256)  # with the version the model has
        model(input_ids=inputs, labels=labels).loss.backward()
        optimizer.step()
        optimizer.zero_grad()

The follower learns of versions from the registry's watch (``registry.client.LatestVersion``),
the Hub protocol's ``main`` (``trainer.hub.HubVersions``) or the ``tokenizer.revisions`` topic
(``registry.relay.RevisionEvents``). A thread downloads a newer version while the loop trains
(checked against its sha256: one that does not match is refused, training goes on with the
version it has and tries again ``retry_steps`` steps later) with the diff from the model's
version (one composed diff over skipped versions); the first step after it has both applies
them to the model and the optimizer (``apply_revision``): a step waits for no download. A
follower made behind the lineage (resumed from a checkpoint) downloads the newest before it
returns, so that the first step takes it.

**The registry away.** A follower made while the registry is away (down, redeployed, cut off)
waits for it, asking again with backoff (``registry.client.Outages``: once said away, once
back), unless it has its version already: a ``fallback`` (a checkpoint's copy) is taken at once
then, and the versions published meanwhile are heard once the registry is back. Once made, it
trains on through any outage with the version it has (``LatestVersion``).

**Many ranks.** Under ``torch.distributed`` every rank calls :meth:`between_steps` at the same
step (as a loop does before its step's collectives). Rank 0 decides which version is due (one
it has downloaded) and tells the others while the ranks train a step (an asynchronous
broadcast); every rank applies it before the next. Every rank has it (downloaded already, or
now), and unless every rank has it none applies it: a rank that cannot download it never leaves
the others a version ahead. After the apply, a checksum of the embedding and output matrices is
compared across ranks, and a mismatch stops every rank with ``trainer.ranks.RanksDiverged``. A
``DistributedDataParallel`` model whose vocabulary grew is wrapped again around the resized
module (its reducer holds the old matrices): the loop carries on with the model
:meth:`between_steps` returns. A model sharded by ``fully_shard`` (FSDP) has the rows changed
where they live (``trainer.ranks``); it cannot grow, so it is built with room for the versions to
come, and :meth:`prepare` masks the rows no version uses yet.

A checkpoint holds :meth:`state_dict`; a follower made with its ``version`` resumes on it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from registry.client import AWAY_STATUSES, Outages, RegistryClient, RegistryRefused
from registry.relay import RevisionEvents
from schemas.revision import RevisionDiff
from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.errors import TokmaintError
from tokenizer_service.hub_files import bos_token_id
from trainer.apply_revision import AppliedRevision, Strategy, apply_revision, embedding_matrices, set_removed
from trainer.checkpoint import TokenizerStamp
from trainer.hub import HubVersions
from trainer.new_rows import newest_holding, warm_new_rows, warm_shape
from trainer.ranks import collective_device, distributed, is_sharded, row_sums, same_on_every_rank
from trainer.config import REVISION_BUDGET, WARM_DOCS, WARM_LR, WARM_STEPS

log = logging.getLogger("tokmaint.trainer")


def token_batch(tokenizer: BPETokenizer, texts: Sequence[str], *, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``texts`` tokenised with a version, at most ``seq_len`` ids each: input ids and labels
    (-100: padding). A version with a special token to start texts from
    (``hub_files.bos_token_id``) has each text start from it, unlabelled, as the byte-level
    evaluation reads the model.

    >>> tok = BPETokenizer.train(["ab ab"], vocab_size=258, special_tokens=["<|endoftext|>"])
    >>> inputs, labels = token_batch(tok, ["ab", "a b"], seq_len=8)  # "ab" is id 257
    >>> inputs.tolist(), labels.tolist()
    ([[0, 257, 0, 0], [0, 65, 221, 66]], [[-100, 257, -100, -100], [-100, 65, 221, 66]])
    """
    bos = bos_token_id(tokenizer)
    start = [] if bos is None else [bos]
    encoded = [(start + ids)[:seq_len] for ids in tokenizer.encode_batch(list(texts))]
    width = max(2, max(len(ids) for ids in encoded))
    inputs = torch.zeros((len(texts), width), dtype=torch.long)
    labels = torch.full((len(texts), width), -100, dtype=torch.long)
    for row, ids in enumerate(encoded):
        inputs[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        labels[row, len(start) : len(ids)] = inputs[row, len(start) : len(ids)]
    return inputs, labels


def warm_recent_rows(
    model: nn.Module,
    tokenizer: BPETokenizer,
    ids: Sequence[int],
    recent: Sequence[str],
    *,
    trained_steps: int,
    trained_texts: int,
    steps: int,
    lr: float,
    budget: float,
    seq_len: int,
) -> list[float]:
    """Warm the rows ``ids`` up alone (``new_rows.warm_new_rows``) on the newest of the ``recent``
    texts that hold one of them, encoded with ``tokenizer``: as many steps (at most ``steps``) and
    texts as ``budget`` of the training since the version before allows (``new_rows.warm_shape``:
    ``trained_steps`` optimizer steps over ``trained_texts`` texts). The losses before each step;
    none when the budget allows no step or no text holds one.

    >>> from transformers import GPT2Config, GPT2LMHeadModel
    >>> tok = BPETokenizer.train(["ab ab"], vocab_size=258)  # "ab" is id 256
    >>> model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=1, n_embd=8, vocab_size=tok.id_space))
    >>> texts = ["ab b", "b a", "a ab"]
    >>> warm = dict(trained_steps=100, trained_texts=300, steps=2, lr=0.1, seq_len=8)
    >>> len(warm_recent_rows(model, tok, [256], texts, budget=0.02, **warm))  # two steps' worth: two
    2
    >>> warm_recent_rows(model, tok, [256], texts, budget=0.005, **warm)  # half a step's: none
    []
    """
    steps, count = warm_shape(trained_steps, trained_texts, steps=steps, texts=len(recent), budget=budget)
    texts = newest_holding(tokenizer, recent, ids, count=count) if steps else []
    if not texts:
        return []
    inputs, labels = token_batch(tokenizer, texts, seq_len=seq_len)
    return warm_new_rows(model, ids, inputs, labels, steps=steps, lr=lr)


def matrices_checksum(model: nn.Module) -> torch.Tensor:
    """:func:`~trainer.ranks.row_sums` of the embedding and output matrices (a sharded one whole).

    >>> from transformers import GPT2Config, GPT2LMHeadModel
    >>> model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=1, n_embd=8, vocab_size=16))
    >>> matrices_checksum(model).shape
    torch.Size([2])
    """
    return torch.cat([row_sums(m.full_tensor() if is_sharded(m) else m) for m in embedding_matrices(model)])


class LineageFollower:
    """A lineage's versions for one model: the version it is on (:attr:`version`,
    :attr:`tokenizer`), and each newer one applied by :meth:`between_steps`."""

    def __init__(
        self,
        registry: RegistryClient | HubVersions | str,
        lineage: str,
        *,
        version: int | None = None,
        fallback: BPETokenizer | None = None,
        outages: Outages | None = None,
        events: tuple[str, str] | None = None,
        strategy: Strategy = "parents_mean",
        retry_steps: int = 10,
        warm_steps: int = WARM_STEPS,
        warm_docs: int = WARM_DOCS,
        warm_lr: float = WARM_LR,
        revision_budget: float = REVISION_BUDGET,
    ) -> None:
        """``registry``: a client, ``HubVersions`` or the registry's URL (its token from
        ``TOKMAINT_REGISTRY_TOKEN``). ``version``: the version the model is on (a checkpoint's);
        by default the latest (under ``torch.distributed``, rank 0's latest: the other ranks wait
        for rank 0's answer). A registry that is away is waited for, unless ``fallback`` is
        ``version``'s tokenizer (a checkpoint's copy, checked by the caller against the sha256 it
        was trained with): the follower then starts on it without the registry, and hears of
        newer versions once it is back; a registry that answers gives ``version`` whatever
        ``fallback`` is. A refusal that is no outage (no such lineage) is raised at once.
        ``outages``: where the registry's outages are said and counted, from the first request
        on (the caller's, for a ``/metrics`` gauge to read; by default the follower's own).
        ``events``: (bootstrap, topic) to learn of versions from the revision events there
        instead of the registry's watch. ``warm_steps``, ``warm_docs``, ``warm_lr``: a
        version's new rows train alone for that many steps on the last texts :meth:`encode` had
        (``trainer.new_rows``; 0 steps: none), fewer steps and texts where those would cost more
        than ``revision_budget`` of the training steps since the version before (``warm_shape``)."""
        self._own_client = isinstance(registry, str)
        self.registry: RegistryClient | HubVersions = (
            RegistryClient(registry) if isinstance(registry, str) else registry
        )
        self.lineage, self.strategy, self.retry_steps = lineage, strategy, retry_steps
        self.warm_steps, self.warm_lr, self.revision_budget = warm_steps, warm_lr, revision_budget
        self._recent: deque[str] = deque(maxlen=warm_docs)  # the last texts encoded, for the new rows' warm-up
        # The texts encoded since the version before, and the step it came at: what bounds a warm-up.
        self._encoded, self._since = 0, None
        self._recent_lock = threading.Lock()  # a data loader's thread may encode meanwhile
        self._seq_len = 2
        self.rank = torch.distributed.get_rank() if distributed() else 0
        # The outages before it could start, and while it follows.
        self._outages = outages or Outages(self.registry.endpoint, lineage)
        if version is None:
            version = self._agreed(self._latest_number() if self.rank == 0 else 0)
        self.version = version
        self.tokenizer = self._first_tokenizer(fallback)
        self.steps = 0  # the optimizer steps done (between_steps' calls, or its step)
        self.refused: dict[int, int] = {}  # a version refused, and the call it was refused at
        self.taken: list[dict[str, Any]] = []  # each version applied: its number, the call, the time, the seconds
        # Every rank hears of versions, to download them ahead; rank 0's hearing decides.
        self.latest = (
            RevisionEvents(events[0], lineage, topic=events[1], number=version)
            if events
            else self.registry.follow(lineage, known=version, outages=self._outages)
        )
        self._downloaded: dict[int, tuple[int, BPETokenizer, RevisionDiff] | None] = {}  # target: (from, ...)
        self._pending: tuple[torch.Tensor, Any] | None = None  # rank 0's last decision, on its way
        if (newest := self.latest.number) > version:  # behind already (a resume): had before the first step
            self._downloaded[newest] = self._fetch(newest)
        self._closed = threading.Event()
        self._downloader = threading.Thread(target=self._download_ahead, name="tokmaint-follower", daemon=True)
        self._downloader.start()

    def close(self) -> None:
        if self._pending is not None:  # every rank sent it: it completes
            self._pending[1].wait()
            self._pending = None
        self._closed.set()
        self._downloader.join(timeout=30)
        self.latest.close()
        if self._own_client and isinstance(self.registry, RegistryClient):
            self.registry.close()

    def __enter__(self) -> LineageFollower:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps: the lineage, the version and its sha256."""
        return {"lineage": self.lineage, "version": self.version, "sha256": self.tokenizer.sha256}

    @property
    def registry_away_seconds(self) -> float:
        """Seconds without the registry: waited for before the follower could start, and those
        its watch (or the Hub's ``main``) was away while this follower trained on (but with the
        revision events topic, whose outages are not the registry's)."""
        return self._outages.seconds

    def _latest_number(self) -> int:
        """The lineage's latest version number, waited for while the registry is away."""
        return self._outages.wait_for(
            lambda: self.registry.version(self.lineage).number, meanwhile="waits for its latest version"
        )

    def _first_tokenizer(self, fallback: BPETokenizer | None) -> BPETokenizer:
        """The tokenizer of the version the model starts on: the registry's, waited for while it
        is away, or ``fallback`` at once when it is away."""

        def ask() -> BPETokenizer:
            return self.registry.tokenizer(self.lineage, self.version)

        if fallback is None:
            return self._outages.wait_for(ask, meanwhile=f"waits for version {self.version}")
        try:
            return ask()
        except RegistryRefused as exc:
            if exc.status not in AWAY_STATUSES:
                raise
        # Its watch says that the registry is away, and once that it is back.
        log.warning(
            "trainer: the registry is away: resuming %s version %s from the checkpoint's copy of it",
            self.lineage,
            self.version,
            extra={"lineage": self.lineage},
        )
        return fallback

    @property
    def stamp(self) -> TokenizerStamp:
        return TokenizerStamp(self.lineage, self.version, self.tokenizer.sha256)

    def prepare(self, model: nn.Module) -> nn.Module:
        """A new model made ready for the version: the logits of the ids it does not use (its
        free ids, and the rows past its id space: room for the versions to come) held at −inf."""
        rows = model.get_input_embeddings().weight.shape[0]
        if rows < self.tokenizer.id_space:
            raise TokmaintError(
                f"the model has {rows} embedding rows, fewer than version {self.version}'s "
                f"{self.tokenizer.id_space} ids"
            )
        set_removed(model, [*self.tokenizer.free_ids, *range(self.tokenizer.id_space, rows)])
        return model

    def encode(self, texts: Sequence[str], *, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Input ids and labels of ``texts`` in the version the model has (:func:`token_batch`)."""
        with self._recent_lock:
            self._recent.extend(texts)
            self._encoded += len(texts)
            self._seq_len = seq_len
        return token_batch(self.tokenizer, texts, seq_len=seq_len)

    def fetched(self, version: int) -> bool:
        """Whether ``version`` is settled here: downloaded (or found not to download), so that
        the next step applies it (or refuses it), or the model is on it already. A loop that
        needs a version at a given step waits for this before it."""
        kept = self._downloaded.get(version, ())
        return self.version >= version or kept is None or (kept != () and kept[0] == self.version)

    def due(self) -> int | None:
        """The version to apply now, the same on every rank, or None: rank 0's newest, once
        downloaded, unless refused less than ``retry_steps`` steps ago. Under
        ``torch.distributed`` it is what rank 0 decided at the call before, sent while the ranks
        trained a step (so that a step waits on no collective of the follower's)."""
        target = 0
        if self.rank == 0:
            newest = self.latest.number
            if (
                newest > self.version
                and self.steps - self.refused.get(newest, -(10**9)) >= self.retry_steps
                and newest in self._downloaded
            ):
                if self._downloaded[newest] is None:  # could not be had: refused for now
                    self.refused[newest] = self.steps
                    del self._downloaded[newest]
                else:
                    target = newest
        if distributed():
            target = self._exchange(target)
        # Decided a step ago: applied, or refused, since (every rank knows alike).
        if target <= self.version or self.steps - self.refused.get(target, -(10**9)) < self.retry_steps:
            return None
        return target

    def between_steps(
        self, model: nn.Module, optimizer: torch.optim.Optimizer | None = None, *, step: int | None = None
    ) -> nn.Module:
        """Apply the version due, if any, to ``model`` (or the module a ``DistributedDataParallel``
        wraps) and ``optimizer``; the model to train on (``model``, or its new wrapper when the
        vocabulary grew under ``DistributedDataParallel``). ``step``: the optimizer steps done
        (by default, this follower's calls before this one)."""
        self.steps = self.steps if step is None else step
        if self._since is None:  # the first call: the training since starts here
            self._since = self.steps
        try:
            return self._apply_due(model, optimizer)
        finally:
            self.steps += 1

    def _apply_due(self, model: nn.Module, optimizer: torch.optim.Optimizer | None) -> nn.Module:
        target = self.due()
        if target is None:
            return model
        began = time.perf_counter()
        fetched = self._downloaded.pop(target, None)
        if fetched is None or fetched[0] != self.version:  # not downloaded here, or from another version
            fetched = self._fetch(target)
        if not self._everywhere(fetched is not None):
            self.refused[target] = self.steps
            return model
        _, tokenizer, diff = fetched
        module = model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model
        rows_before = module.get_input_embeddings().weight.shape[0]
        applied = apply_revision(module, optimizer, diff, strategy=self.strategy, previous=self.tokenizer)
        self.version, self.tokenizer = target, tokenizer
        self._warm(module, applied.warm_ids)
        self._check_ranks(module)
        if applied.rows > rows_before and module is not model:
            model = nn.parallel.DistributedDataParallel(
                module,
                device_ids=model.device_ids,
                output_device=model.output_device,
                broadcast_buffers=model.broadcast_buffers,
                find_unused_parameters=model.find_unused_parameters,
            )
        self._taken(target, applied, time.perf_counter() - began)
        return model

    def _warm(self, module: nn.Module, ids: list[int]) -> None:
        """Warm up the rows a version made or respelled (``AppliedRevision.warm_ids``) on the last
        texts encoded (rank 0's, then sent to every rank: the ranks' rows stay alike). A sharded
        model's rows are left as made: its forward pass is a collective of every rank."""
        with self._recent_lock:  # the training since the version before ends here, warmed up or not
            texts, seq_len, encoded, self._encoded = list(self._recent), self._seq_len, self._encoded, 0
        trained, self._since = self.steps - (self._since or 0), self.steps
        matrices = embedding_matrices(module)
        if not self.warm_steps or not ids or any(is_sharded(m) for m in matrices):
            return
        if self.rank == 0:  # its counts decide, as its rows do (the ranks train batches of one size alike)
            warm_recent_rows(
                module,
                self.tokenizer,
                ids,
                texts,
                trained_steps=trained,
                trained_texts=encoded,
                steps=self.warm_steps,
                lr=self.warm_lr,
                budget=self.revision_budget,
                seq_len=seq_len,
            )
        if distributed():
            with torch.no_grad():
                for matrix in matrices:
                    rows = matrix[ids].to(collective_device())
                    torch.distributed.broadcast(rows, src=0)
                    matrix[ids] = rows.to(matrix.device)

    def _fetch(self, target: int) -> tuple[int, BPETokenizer, RevisionDiff] | None:
        """The version the diff starts from, the version ``target`` and the diff; None when this
        rank could not have them."""
        start = self.version
        try:
            tokenizer = self.registry.tokenizer(self.lineage, target)  # RegistryRefused: not its sha256
            diff = self.registry.composed_diff(self.lineage, start, target)
        except (TokmaintError, OSError) as exc:  # RegistryRefused: refused, unreachable or not its sha256
            log.warning(
                "trainer: version %s refused on rank %s, training on with version %s: %s",
                target,
                self.rank,
                start,
                exc,
                extra={"lineage": self.lineage, "step": self.steps},
            )
            return None
        return start, tokenizer, diff

    def _download_ahead(self) -> None:
        """The thread: the newest version heard of is downloaded with the diff to it from the
        model's version, and kept for the step that applies it (None: it could not be had; tried
        again ``retry_steps`` steps after it was refused)."""
        while not self._closed.wait(0.05):
            newest = self.latest.number
            if newest <= self.version or self.steps - self.refused.get(newest, -(10**9)) < self.retry_steps:
                continue
            kept = self._downloaded.get(newest, ())
            if kept == () or (kept is not None and kept[0] != self.version):
                self._downloaded[newest] = self._fetch(newest)

    def _taken(self, target: int, applied: AppliedRevision, seconds: float) -> None:
        self.taken.append({"version": target, "step": self.steps, "time": time.time(), "seconds": seconds})
        log.info(
            "trainer: took version %s at step %s (%s ids changed)",
            target,
            self.steps,
            len(applied.changed) + len(applied.removed),
            extra={"lineage": self.lineage, "step": self.steps},
        )

    def _exchange(self, decision: int) -> int:
        """Rank 0's decision of the call before, on every rank; this call's goes out meanwhile,
        asynchronously (0 at the first call)."""
        outgoing = torch.tensor([decision], dtype=torch.long, device=collective_device())
        previous, self._pending = self._pending, (outgoing, torch.distributed.broadcast(outgoing, src=0, async_op=True))
        if previous is None:
            return 0
        received, work = previous
        work.wait()
        return int(received.item())

    def _agreed(self, value: int) -> int:
        """Rank 0's ``value`` on every rank (``value`` itself in one process)."""
        if not distributed():
            return value
        shared = torch.tensor([value], dtype=torch.long, device=collective_device())
        torch.distributed.broadcast(shared, src=0)
        return int(shared.item())

    def _everywhere(self, ok: bool) -> bool:
        """Whether ``ok`` holds on every rank."""
        if not distributed():
            return ok
        flag = torch.tensor([int(ok)], dtype=torch.long, device=collective_device())
        torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MIN)
        return bool(flag.item())

    def _check_ranks(self, module: nn.Module) -> None:
        """Stop every rank when their embedding and output matrices differ after an apply."""
        same_on_every_rank(
            matrices_checksum(module), f"lineage {self.lineage!r}: after version {self.version} at step {self.steps}"
        )


class FollowsLineage:
    """A mixin for what trains with a :class:`LineageFollower` (the Trainer callback, the loop):
    the version its model is on and that version's tokenizer are its follower's."""

    follower: LineageFollower

    @property
    def version(self) -> int:
        return self.follower.version

    @property
    def tokenizer(self) -> BPETokenizer:
        return self.follower.tokenizer
