"""``tokmaint bench distributed``: ranks of one ``DistributedDataParallel`` job follow a lineage
together while versions are published, and what following costs them.

A registry server of its own holds a lineage: a tokenizer trained on the repo's sample corpus and
Ted-Tok's revisions of it, published one by one while the ranks train (at even shares of the
steps). Each rank (a process, gloo on CPU or NCCL on its GPU) trains two tiny GPT-2 models in
alternating blocks of steps, so that a busy machine slows both alike: one follows the lineage
(``LineageFollower.between_steps`` before each step, batches encoded with its version), the
other stays on the first version and never asks.

Printed: ``ranks``; ``versions_applied`` (by rank 0); ``same_step_all_ranks`` (every rank applied
every version at the same step); ``identical_across_ranks`` (after each apply, every rank's
embedding checksum equals rank 0's: the bench's own check, beside the follower's); ``apply_seconds_p50``
(an apply's time on rank 0, the diff downloaded ahead); ``steps_per_second`` as ``{"following": …,
"not_following": …}`` (rank 0's) and ``overhead`` (1 − their ratio); ``between_steps_share`` (of the
following model's time, the share in ``between_steps``: deciding, applying, checking);
``rows`` (both models are built with ``room`` rows past the first version's ids, so that they
have one shape and only following tells them apart); ``settle_steps`` (untimed steps of the
following model after the timed ones, until the last version published was applied: on a busy
machine it can come after them), ``device``, ``seconds``.
"""

from __future__ import annotations

import multiprocessing
import queue
import secrets
import statistics
import tempfile
import threading
import time
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any

import torch
from torch import nn

from registry.client import RegistryClient
from registry.local_server import free_port, start_server
from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.corpus import read_corpus
from tokenizer_service.errors import TokmaintError
from tokenizer_service.evolve import quick_revisions_config
from tokenizer_service.tedtok import TedTok
from trainer.config import DistributedBenchSettings

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "git-commits-sample.jsonl.gz"
LINEAGE = "distributed"


def lineage_revisions(texts: list[str], *, vocab_size: int, versions: int) -> tuple[BPETokenizer, list[Any]]:
    """A first tokenizer trained on the oldest texts and Ted-Tok's first ``versions`` revisions
    over the rest."""
    initial = BPETokenizer.train(texts[:200], vocab_size=vocab_size)
    tedtok = TedTok(
        initial,
        config=quick_revisions_config(),
    )
    for chunk in (texts[at : at + 32] for at in range(200, len(texts), 32)):
        tedtok.observe_texts(chunk)
        if len(tedtok.revisions) >= versions:
            break
    if len(tedtok.revisions) < versions:
        raise TokmaintError(f"the corpus gave {len(tedtok.revisions)} revisions, fewer than --versions {versions}")
    return initial, tedtok.revisions[:versions]


def _train_rank(
    rank: int,
    world: int,
    port: int,
    registry: str,
    settings: DistributedBenchSettings,
    texts: list[str],
    rank0_steps: Any,
    results: Any,
) -> None:
    """One rank: the two models trained in alternating blocks; what it saw, put on ``results``."""
    from transformers import GPT2LMHeadModel

    from trainer.follow import LineageFollower, matrices_checksum, token_batch
    from trainer.loop import tiny_gpt2_config
    from trainer.ranks import collective_device
    from trainer.config import CAUSAL_LM_LOSS

    torch.set_num_threads(1)  # ranks share the machine's cores
    cuda = settings.device == "cuda"
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    torch.distributed.init_process_group(
        "nccl" if cuda else "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    try:
        follower = LineageFollower(registry, LINEAGE, retry_steps=5)
        first = follower.tokenizer

        def fresh() -> tuple[nn.Module, torch.optim.Optimizer]:
            torch.manual_seed(settings.seed)  # every rank starts from the same weights
            # Both with room for the versions: the same shape, so that only following costs.
            rows = first.id_space + settings.room
            model = follower.prepare(GPT2LMHeadModel(tiny_gpt2_config(rows, n_positions=settings.seq_len))).to(device)
            model.loss_type = CAUSAL_LM_LOSS
            return (
                nn.parallel.DistributedDataParallel(model, device_ids=[rank] if cuda else None),
                torch.optim.AdamW(model.parameters(), lr=1e-3),
            )

        models = {"following": fresh(), "not_following": fresh()}
        seconds = {arm: 0.0 for arm in models}
        following = 0.0  # of which in between_steps
        checksums: list[tuple[int, int, list[float]]] = []

        def train(arm: str, s: int) -> None:
            """One optimizer step of ``arm``'s model, at step ``s``."""
            nonlocal following
            model, optimizer = models[arm]
            at = (s * world + rank) * settings.batch_size % len(texts)
            batch = (texts + texts)[at : at + settings.batch_size]
            if arm == "following":
                version, asked = follower.version, time.perf_counter()
                model = follower.between_steps(model, optimizer, step=s)
                following += time.perf_counter() - asked
                inputs, labels = follower.encode(batch, seq_len=settings.seq_len)
                if follower.version != version:
                    checksums.append((follower.version, s, matrices_checksum(model.module).tolist()))
            else:
                inputs, labels = token_batch(first, batch, seq_len=settings.seq_len)
            loss = model(input_ids=inputs.to(device), labels=labels.to(device)).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            models[arm] = model, optimizer

        step = 0
        while step < settings.steps:
            block = range(step, min(step + settings.block, settings.steps))
            for arm in list(models) if (step // settings.block) % 2 == 0 else list(models)[::-1]:
                began = time.perf_counter()
                for s in block:
                    train(arm, s)
                if cuda:
                    torch.cuda.synchronize()
                seconds[arm] += time.perf_counter() - began
            step = block.stop
            if rank == 0:
                rank0_steps.value = step
        # Untimed: the following model trains on until the last version published is applied (on
        # a busy machine it may come after the timed steps); rank 0 says when, for every rank.
        deadline = time.monotonic() + settings.timeout / 2
        while True:
            going = torch.tensor(
                [int(follower.version < 1 + settings.versions and time.monotonic() < deadline)],
                device=collective_device(),
            )
            torch.distributed.broadcast(going, src=0)
            if not going.item():
                break
            train("following", step)
            step += 1
        follower.close()
        results.put(
            {
                "rank": rank,
                "taken": [(t["version"], t["step"]) for t in follower.taken],
                "apply_seconds": [t["seconds"] for t in follower.taken],
                "checksums": checksums,
                "seconds": seconds,
                "between_steps_seconds": following,
                "version": follower.version,
                "rows": models["following"][0].module.get_input_embeddings().weight.shape[0],
                "settle_steps": step - settings.steps,
            }
        )
    except BaseException as exc:
        results.put({"rank": rank, "error": f"{type(exc).__name__}: {exc}"})
        raise
    finally:
        torch.distributed.destroy_process_group()


def _publish_during_training(
    registry: RegistryClient, revisions: list[Any], rank0_steps: Any, *, steps: int, done: threading.Event
) -> None:
    """Publish revision k once rank 0 has trained k / (len + 1) of the steps."""
    for k, revision in enumerate(revisions, start=1):
        while rank0_steps.value < k * steps // (len(revisions) + 1) and not done.is_set():
            time.sleep(0.01)
        if done.is_set():
            return
        registry.publish(LINEAGE, revision.tokenizer.to_json(), diff_json=revision.diff.to_json(), kind="tedtok")


def _results(results: Any, ranks: list[Any], *, timeout: float) -> list[dict[str, Any]]:
    """Every rank's report, by rank; the first rank's error as a TokmaintError (the others may
    wait for it for ever)."""
    seen, deadline = [], time.monotonic() + timeout
    while len(seen) < len(ranks):
        try:
            report = results.get(timeout=1.0)
        except queue.Empty:
            if dead := [r for r, p in enumerate(ranks) if p.exitcode not in (None, 0)]:
                raise TokmaintError(f"rank(s) {dead} exited ({', '.join(str(ranks[r].exitcode) for r in dead)})")
            if time.monotonic() > deadline:
                raise TokmaintError(f"the ranks did not finish within {timeout:g} s") from None
            continue
        if "error" in report:
            raise TokmaintError(f"rank {report['rank']}: {report['error']}")
        seen.append(report)
    return sorted(seen, key=lambda r: r["rank"])


def run_distributed_bench(
    settings: DistributedBenchSettings | None = None,
    *,
    corpus: str | Path | None = None,
    mp_context: BaseContext | None = None,
) -> dict[str, Any]:
    """The bench's report (the module's docstring says what it holds). ``mp_context``: how the
    ranks' processes start (default: spawn)."""
    settings = settings or DistributedBenchSettings()
    if settings.device == "cuda" and settings.ranks > torch.cuda.device_count():
        raise TokmaintError(
            f"--device cuda --ranks {settings.ranks}: this machine has {torch.cuda.device_count()} GPU(s), one a rank"
        )
    started = time.perf_counter()
    texts = [d.text for d in read_corpus(corpus or SAMPLE).documents]
    initial, revisions = lineage_revisions(texts, vocab_size=settings.vocab_size, versions=settings.versions)
    token = secrets.token_hex(16)
    context = mp_context or multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="tokmaint-bench-distributed-") as root:
        server, url = start_server(Path(root) / "registry", env={"TOKMAINT_REGISTRY_TOKEN": token})
        try:
            with RegistryClient(url, token=token) as registry:
                registry.create(LINEAGE, initial.to_json())
                rank0_steps, results, port = context.Value("i", 0), context.Queue(), free_port()
                ranks = [
                    context.Process(
                        target=_train_rank,
                        args=(rank, settings.ranks, port, url, settings, texts, rank0_steps, results),
                    )
                    for rank in range(settings.ranks)
                ]
                for process in ranks:
                    process.start()
                done = threading.Event()
                publisher = threading.Thread(
                    target=_publish_during_training,
                    daemon=True,
                    args=(registry, revisions, rank0_steps),
                    kwargs={"steps": settings.steps, "done": done},
                )
                publisher.start()
                try:
                    seen = _results(results, ranks, timeout=settings.timeout)
                finally:
                    done.set()
                    publisher.join(timeout=60)
                    for process in ranks:  # a rank left waiting on one that failed
                        process.join(timeout=10 if process.exitcode is None else 0)
                        if process.is_alive():
                            process.kill()
        finally:
            server.terminate()
            server.wait(timeout=30)
    first = seen[0]
    rates = {arm: settings.steps / first["seconds"][arm] for arm in ("following", "not_following")}
    return {
        "ranks": settings.ranks,
        "versions_applied": len(first["taken"]),
        "versions_published": len(revisions),
        "same_step_all_ranks": all(r["taken"] == first["taken"] for r in seen),
        "identical_across_ranks": all(r["checksums"] == first["checksums"] for r in seen),
        "apply_seconds_p50": statistics.median(first["apply_seconds"]) if first["apply_seconds"] else None,
        "steps_per_second": rates,
        "overhead": 1 - rates["following"] / rates["not_following"],
        "between_steps_share": first["between_steps_seconds"] / first["seconds"]["following"],
        "rows": first["rows"],
        "settle_steps": first["settle_steps"],
        "taken": first["taken"],
        "version": first["version"],
        "device": settings.device,
        "steps": settings.steps,
        "seconds": time.perf_counter() - started,
    }
