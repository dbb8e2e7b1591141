"""``trainer.follow.LineageFollower`` against real registry servers: in one process, and as the
ranks of a ``DistributedDataParallel`` job (processes on the gloo backend, a free loopback port):
every rank applies every version at the same step, a version one rank cannot download is applied
by none, ranks whose embeddings differ after an apply stop, a job whose rank was killed resumes
from its checkpoint on the checkpoint's version, and a model sharded by FSDP (``fully_shard``,
on CPU) has its rows changed where they live, as ``apply_revision`` makes them whole."""

import datetime
import json
import multiprocessing
import os
import queue
import signal
import subprocess
import sys
import time
import uuid
from multiprocessing.context import BaseContext

import pytest
import torch

from registry.client import RegistryClient, RegistryRefused
from registry.local_server import free_port, start_server
from tests.conftest import REGISTRY_TOKEN as TOKEN
from tests.support.lineages import grown
from trainer.distributed_bench import lineage_revisions, run_distributed_bench
from trainer.follow import LineageFollower, matrices_checksum, token_batch
from trainer.ranks import RanksDiverged
from trainer.config import DistributedBenchSettings

TEXTS = [
    f"commit {i}: fix the parser of the stream reader and the {['cache', 'queue', 'index'][i % 3]} of it"
    for i in range(600)
]


@pytest.fixture(scope="module")
def revisions():
    return lineage_revisions(TEXTS, vocab_size=300, versions=3)


def _lineage(urls: list[str], initial) -> str:
    name = f"follow-{uuid.uuid4().hex[:8]}"
    for url in urls:
        RegistryClient(url, token=TOKEN).create(name, initial.to_json())
    return name


def _publish(url: str, name: str, revision) -> int:
    published = RegistryClient(url, token=TOKEN).publish(
        name, revision.tokenizer.to_json(), diff_json=revision.diff.to_json(), kind="tedtok"
    )
    return published.number


def _model(tokenizer, seed: int = 0, *, room: int = 0):
    """A tiny GPT-2 for ``tokenizer``, with ``room`` rows past its id space (masked)."""
    from transformers import GPT2LMHeadModel

    from trainer.apply_revision import set_removed
    from trainer.loop import tiny_gpt2_config

    torch.manual_seed(seed)
    model = GPT2LMHeadModel(tiny_gpt2_config(tokenizer.id_space + room, n_layer=1, n_embd=32, n_positions=32))
    set_removed(model, [*tokenizer.free_ids, *range(tokenizer.id_space, tokenizer.id_space + room)])
    return model


def _step(model, optimizer, follower, texts) -> torch.Tensor:
    """One optimizer step; its loss, which the caller holds until the next (as a loop does)."""
    inputs, labels = follower.encode(texts, seq_len=32)
    loss = model(input_ids=inputs, labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return loss


def test_a_version_is_applied_between_steps_and_batches_are_encoded_with_it(registry_server, revisions):
    url, _ = registry_server
    initial, made = revisions
    name = _lineage([url], initial)
    with LineageFollower(url, name) as follower:
        model = _model(follower.tokenizer)
        optimizer = torch.optim.AdamW(model.parameters())
        assert (
            follower.version == 1
            and follower.encode(TEXTS[:2], seq_len=32)[0].tolist()
            == token_batch(initial, TEXTS[:2], seq_len=32)[0].tolist()
        )
        published = _publish(url, name, made[0])
        deadline = time.monotonic() + 30
        step = 0
        while follower.version != published:
            assert time.monotonic() < deadline, "the version was never applied"
            model = follower.between_steps(model, optimizer)
            _step(model, optimizer, follower, TEXTS[step * 4 : step * 4 + 4])
            step += 1
        # Applied between two steps: the next batch is the version's ids, and the model has its rows.
        assert (
            follower.encode(TEXTS[:2], seq_len=32)[0].tolist()
            == token_batch(made[0].tokenizer, TEXTS[:2], seq_len=32)[0].tolist()
        )
        assert model.get_input_embeddings().weight.shape[0] >= made[0].tokenizer.id_space
        assert [t["version"] for t in follower.taken] == [published] and follower.taken[0]["step"] == step - 1
        assert follower.state_dict() == {"lineage": name, "version": published, "sha256": made[0].tokenizer.sha256}
    # A follower made from a checkpoint's version is on it, whatever came since.
    _publish(url, name, made[1])
    with LineageFollower(url, name, version=published) as resumed:
        assert resumed.version == published and resumed.tokenizer.sha256 == made[0].tokenizer.sha256


def test_a_version_s_warm_up_is_bounded_by_the_training_since_the_version_before(registry_server, revisions):
    """The same model, texts and steps, three followers: a revision budget that leaves the warm-up
    not one training step's worth leaves the rows as the apply made them (as no warm-up does);
    one that leaves it the steps trained since warms them up."""
    url, _ = registry_server
    initial, made = revisions
    rows = {}
    for arm, follow in {
        "none": dict(warm_steps=0),
        "no_budget": dict(warm_steps=2, revision_budget=0.1),  # 8 steps trained: 0.8 of one
        "budget": dict(warm_steps=2, revision_budget=1.0),
    }.items():
        name = _lineage([url], initial)
        with LineageFollower(url, name, **follow) as follower:
            model = _model(follower.tokenizer)
            for at in range(0, 64, 8):  # eight steps (no optimizer: only the warm-up moves rows)
                model = follower.between_steps(model)
                follower.encode(TEXTS[at : at + 8], seq_len=32)
            published = _publish(url, name, made[0])
            deadline = time.monotonic() + 30
            while not (follower.latest.number == published and follower.fetched(published)):
                assert time.monotonic() < deadline, "the version was never downloaded"
                time.sleep(0.05)
            model = follower.between_steps(model)  # the ninth: applied
            assert follower.version == published
            rows[arm] = model.get_input_embeddings().weight.detach().clone()
    assert torch.equal(rows["no_budget"], rows["none"]) and not torch.equal(rows["budget"], rows["none"])


@pytest.mark.parametrize("protocol", ["api", "hub"])
def test_a_follower_of_a_lineage_the_registry_lacks_is_refused_at_once(registry_server, protocol):
    """A refusal that is no outage (404: no such lineage) is raised at once, over either protocol,
    not waited out as a registry that is away is."""
    from trainer.hub import HubVersions

    url, _ = registry_server
    began = time.monotonic()
    with pytest.raises(RegistryRefused) as refused:
        LineageFollower(HubVersions(url) if protocol == "hub" else url, "no-such-lineage")
    assert refused.value.status == 404 and time.monotonic() - began < 10


@pytest.mark.parametrize("ranks", [2, 4])
def test_every_rank_applies_every_version_at_the_same_step(ranks):
    report = run_distributed_bench(
        DistributedBenchSettings(ranks=ranks, steps=45, block=5, versions=2, batch_size=2, seq_len=32, timeout=300),
        mp_context=None if ranks == 2 else _forkserver(),  # two ranks start as the bench's users' do: spawned
    )
    assert report["versions_applied"] == report["versions_published"] == 2, report
    assert report["same_step_all_ranks"] is True and report["identical_across_ranks"] is True
    assert [v for v, _ in report["taken"]] == [2, 3]


def _rank(rank: int, world: int, port: int, urls: list[str], name: str, plan: dict, shared, results) -> None:
    """One rank of a small DDP job: ``plan["steps"]`` steps following ``urls[rank]``'s lineage;
    with ``plan["checkpoint"]`` it saves there every few steps (rank 0) and starts from it when
    it is there; ``plan["perturb_rank"]`` changes that rank's embedding before the first apply;
    ``plan["until_version"]``: the ranks stop a few steps after that version is applied (at the
    same step everywhere, as the version is); ``plan["fsdp"]``: the model is sharded by
    ``fully_shard`` (with room for the versions), and rank 0 reports its embedding whole before
    and after the apply, with Adam's first moment after."""
    from trainer.checkpoint import TokenizerStamp, load_checkpoint, save_checkpoint

    torch.set_num_threads(1)
    torch.distributed.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=20),
    )
    try:
        checkpoint = plan.get("checkpoint")
        stamp = (
            TokenizerStamp(**torch.load(checkpoint, weights_only=True)["tokenizer"])
            if checkpoint and os.path.exists(checkpoint)
            else None
        )
        follower = LineageFollower(urls[rank], name, version=stamp.version if stamp else None, retry_steps=3)
        fsdp = plan.get("fsdp", False)
        model = _model(follower.tokenizer, room=64 if fsdp else 0)
        if fsdp:
            from torch.distributed.fsdp import fully_shard

            for block in model.transformer.h:
                fully_shard(block)
            fully_shard(model)
        optimizer = torch.optim.AdamW(model.parameters())
        start = 0
        if stamp is not None:
            start = load_checkpoint(checkpoint, model=model, optimizer=optimizer, tokenizer=stamp)["step"]
        if not fsdp:
            model = torch.nn.parallel.DistributedDataParallel(model)
        module = model.module if not fsdp else model
        first_version, sharded = follower.version, {}
        loss = torch.tensor(0.0)
        for step in range(start, plan["steps"]):
            if fsdp and follower.version == first_version:  # what the apply starts from
                sharded["before"] = module.get_input_embeddings().weight.full_tensor().tolist()
            if rank == plan.get("perturb_rank") and follower.version == first_version:
                with torch.no_grad():
                    module.get_input_embeddings().weight[0] += 1.0
            model = follower.between_steps(model, optimizer, step=step)
            module = model.module if not fsdp else model
            if fsdp and follower.version != first_version and "after" not in sharded:
                weight = module.get_input_embeddings().weight
                sharded["after"] = weight.full_tensor().tolist()
                sharded["moment"] = optimizer.state[weight]["exp_avg"].full_tensor().tolist()
            if rank == 0:
                shared["step"] = step
                shared["refused"] = sorted(follower.refused)
                shared["version"] = follower.version
            loss = _step(model, optimizer, follower, TEXTS[(step * world + rank) % 500 :][:4])  # held: see _step
            if checkpoint and rank == 0 and step % 5 == 4:
                save_checkpoint(
                    checkpoint,
                    model=module,
                    optimizer=optimizer,
                    tokenizer=follower.stamp,
                    position={"step": step + 1},
                    tokenizer_json=follower.tokenizer.to_json(),
                )
            time.sleep(plan.get("pause", 0))
            if follower.version == plan.get("until_version") and step >= follower.taken[-1]["step"] + 3:
                break
        results.put(
            {
                "rank": rank,
                "start": start,
                "first_version": first_version,
                "taken": [(t["version"], t["step"]) for t in follower.taken],
                "refused": sorted(follower.refused.items()),
                "version": follower.version,
                "checksum": matrices_checksum(module).tolist(),
                "rows": module.get_input_embeddings().weight.shape[0],
                "finite": bool(torch.isfinite(loss)),
                "registry_away_seconds": follower.registry_away_seconds,
                **(sharded if rank == 0 else {}),
            }
        )
        follower.close()
    except Exception as exc:
        results.put({"rank": rank, "error": type(exc).__name__, "message": str(exc)})
    finally:
        torch.distributed.destroy_process_group()


def _forkserver() -> BaseContext:
    """Processes forked from a server that imported torch, transformers (GPT-2's model) and this
    module once: spawned, each rank took ~4 s of CPU importing them again."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__, "trainer.loop"])
    return context


def _start(urls, name, plan, *, world: int = 2):
    context = _forkserver()
    manager = context.Manager()
    shared, results, port = manager.dict({"step": -1, "refused": [], "version": 0}), context.Queue(), free_port()
    processes = [
        context.Process(target=_rank, args=(rank, world, port, urls, name, plan, shared, results))
        for rank in range(world)
    ]
    for process in processes:
        process.start()
    return processes, shared, results, manager


def _reports(processes, results, *, expected: int = 2, timeout: float = 120.0) -> list[dict]:
    """What the ranks put on ``results`` (``expected`` of them, by rank), once they have ended."""
    reports = []
    deadline = time.monotonic() + timeout
    while len(reports) < expected:
        try:
            reports.append(results.get(timeout=max(deadline - time.monotonic(), 0.1)))
        except queue.Empty:
            break
    for process in processes:
        process.join(timeout=30)
    return sorted(reports, key=lambda r: r["rank"])


def _wait(condition, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_version_one_rank_cannot_download_is_applied_by_none(registry_server, revisions, tmp_path):
    """Rank 1 reads a second registry (a replica behind the first): a version only the first has
    is refused at the same step on both ranks, and applied on both once the second has it."""
    url, _ = registry_server
    replica, replica_url = start_server(tmp_path / "replica", env={"TOKMAINT_REGISTRY_TOKEN": TOKEN})
    try:
        initial, made = revisions
        name = _lineage([url, replica_url], initial)
        processes, shared, results, manager = _start(
            [url, replica_url], name, {"steps": 1000, "pause": 0.01, "until_version": 2}
        )
        _wait(lambda: shared["step"] >= 5, "the ranks never started")
        published = _publish(url, name, made[0])
        _wait(lambda: shared["refused"] == [published], "rank 0 never refused the version rank 1 could not have")
        assert _publish(replica_url, name, made[0]) == published
        reports = _reports(processes, results)
        manager.shutdown()
    finally:
        replica.terminate()
        replica.wait(timeout=30)
    assert [r["rank"] for r in reports] == [0, 1] and not any("error" in r for r in reports), reports
    assert reports[0]["refused"] == reports[1]["refused"] and reports[0]["refused"][0][0] == published
    assert reports[0]["taken"] == reports[1]["taken"] and [v for v, _ in reports[0]["taken"]] == [published]
    assert reports[0]["taken"][0][1] > reports[0]["refused"][0][1]  # applied after the refusal, on both
    assert reports[0]["checksum"] == reports[1]["checksum"]


def test_two_ranks_take_a_version_that_grows_the_vocabulary_and_train_on(registry_server, revisions):
    """A version with a row more than the model: both ranks grow the model (wrapped again by
    DistributedDataParallel) and its optimizer at the same step, and train on alike."""
    url, _ = registry_server
    initial, _ = revisions
    name = _lineage([url], initial)
    processes, shared, results, manager = _start([url, url], name, {"steps": 400, "pause": 0.01, "until_version": 2})
    _wait(lambda: shared["step"] >= 5, "the ranks never started")
    larger = grown(initial, TEXTS[-1])
    RegistryClient(url, token=TOKEN).publish(name, larger.to_json(), kind="tedtok")
    reports = _reports(processes, results)
    manager.shutdown()
    assert [r["rank"] for r in reports] == [0, 1] and not any("error" in r for r in reports), reports
    assert reports[0]["taken"] == reports[1]["taken"] and [v for v, _ in reports[0]["taken"]] == [2]
    assert [r["rows"] for r in reports] == [larger.id_space] * 2 == [initial.id_space + 1] * 2
    assert reports[0]["checksum"] == reports[1]["checksum"] and all(r["finite"] for r in reports)


def test_ranks_whose_embeddings_differ_after_an_apply_stop_all(registry_server, revisions):
    url, _ = registry_server
    initial, made = revisions
    name = _lineage([url], initial)
    processes, shared, results, manager = _start([url, url], name, {"steps": 400, "pause": 0.01, "perturb_rank": 1})
    _wait(lambda: shared["step"] >= 5, "the ranks never started")
    _publish(url, name, made[0])
    reports = _reports(processes, results)
    manager.shutdown()
    assert [r.get("error") for r in reports] == [RanksDiverged.__name__] * 2, reports
    assert "rank(s) [1] differ from rank 0's" in reports[0]["message"]


def test_a_job_whose_rank_was_killed_resumes_on_its_checkpoint_s_version(registry_server, revisions, tmp_path):
    url, _ = registry_server
    initial, made = revisions
    name = _lineage([url], initial)
    checkpoint = str(tmp_path / "checkpoint.pt")
    plan = {"steps": 2000, "pause": 0.01, "checkpoint": checkpoint}
    processes, shared, results, manager = _start([url, url], name, plan)
    _wait(lambda: shared["step"] >= 5, "the ranks never started")
    published = _publish(url, name, made[0])
    # Killed once a checkpoint holds the new version.
    _wait(
        lambda: (
            os.path.exists(checkpoint)
            and torch.load(checkpoint, weights_only=True)["tokenizer"]["version"] == published
        ),
        "no checkpoint of the new version",
    )
    os.kill(processes[1].pid, signal.SIGKILL)
    survivor = _reports(processes, results, expected=1, timeout=60)
    manager.shutdown()
    assert [r["rank"] for r in survivor] == [0] and "error" in survivor[0]  # rank 0 stopped: its peer was gone
    saved = torch.load(checkpoint, weights_only=True)
    # The job started again: every rank resumes on the checkpoint's version, at its step.
    processes, shared, results, manager = _start([url, url], name, {**plan, "steps": saved["position"]["step"] + 10})
    reports = _reports(processes, results)
    manager.shutdown()
    assert not any("error" in r for r in reports), reports
    assert [r["first_version"] for r in reports] == [published, published]
    assert [r["start"] for r in reports] == [saved["position"]["step"]] * 2
    assert reports[0]["checksum"] == reports[1]["checksum"]


def test_a_model_sharded_by_fsdp_has_its_rows_changed_where_they_live(registry_server, revisions):
    """Two ranks, the embedding split between them (``fully_shard``, gloo on CPU): the version's
    rows are those ``apply_revision`` makes on the whole matrix, bit for bit, and Adam's state of
    every changed row is zero."""
    from transformers import GPT2LMHeadModel

    from trainer.apply_revision import apply_revision, embedding_matrices

    url, _ = registry_server
    initial, made = revisions
    name = _lineage([url], initial)
    processes, shared, results, manager = _start(
        [url, url], name, {"steps": 1000, "pause": 0.01, "fsdp": True, "until_version": 2}
    )
    _wait(lambda: shared["step"] >= 5, "the ranks never started")
    published = _publish(url, name, made[0])
    reports = _reports(processes, results)
    manager.shutdown()
    assert not any("error" in r for r in reports), reports
    assert reports[0]["taken"] == reports[1]["taken"] and [v for v, _ in reports[0]["taken"]] == [published]
    assert reports[0]["checksum"] == reports[1]["checksum"]
    reference = _model(initial, room=64)
    with torch.no_grad():
        reference.get_input_embeddings().weight.copy_(torch.tensor(reports[0]["before"]))
    applied = apply_revision(reference, None, made[0].diff, previous=initial)
    assert isinstance(reference, GPT2LMHeadModel) and applied.rows == len(reports[0]["after"])
    assert torch.equal(torch.tensor(reports[0]["after"]), embedding_matrices(reference)[0])
    moment = torch.tensor(reports[0]["moment"])
    assert applied.changed and not moment[applied.changed + applied.removed].any() and moment.any()


OUTAGE = 90.0  # seconds without the registry: longer than any patience a trainer ever had (30 s)


def _spawned(argv: list[str], log) -> subprocess.Popen:
    """A trainer process started with ``argv`` on one thread (five share the machine), its output
    in the file ``log``."""
    env = {**os.environ, "PYTHONPATH": ".", "OMP_NUM_THREADS": "1"}
    with open(log, "wb") as output:
        return subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT, env=env)


def _said(log, text: str) -> int:
    """How many times the log file ``log`` says ``text``."""
    return log.read_text(encoding="utf-8", errors="replace").count(text)


def test_every_trainer_trains_on_without_the_registry_and_takes_what_was_published_meanwhile(revisions, tmp_path):
    """The registry is stopped for 90 s under ``trainer run``, a ``transformers.Trainer`` with the
    callback (``examples/hf_trainer.py``) and two DDP ranks. A version is published meanwhile
    through a second registry process on the same database, and one once the registry is back:
    every trainer trains on and takes both (the ranks at the same step), saying once that the
    registry is away and once that it is back; a ``trainer run`` that ends during the outage exits
    0 with its report."""
    initial, made = revisions
    root, corpus, env = tmp_path / "registry", tmp_path / "corpus.jsonl", {"TOKMAINT_REGISTRY_TOKEN": TOKEN}
    corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS), encoding="utf-8")
    port = free_port()
    registry, url = start_server(root, env=env, port=port)
    name = _lineage([url], initial)
    small = ["--batch-size", "2", "--seq-len", "32", "--eval-every", "0", "--warm-steps", "1", "--registry", url]
    run = [sys.executable, "-m", "tokmaint.cli", "trainer", "run", "--lineage", name, "--data", str(corpus), *small]
    logs = {k: tmp_path / f"{k}.log" for k in ("run", "hf", "ended")}
    trainers = {
        "run": _spawned([*run, "--steps", "1000000"], logs["run"]),
        "hf": _spawned(
            [sys.executable, "examples/hf_trainer.py", "--registry", url, "--lineage", name, "--data", str(corpus)]
            + "--max_steps 1000000 --save_steps 1000000 --per_device_train_batch_size 2 --seq_len 32 --use_cpu "
            f"--report_to none --output_dir {tmp_path / 'hf'}".split(),
            logs["hf"],
        ),
    }
    processes, shared, results, manager = _start([url, url], name, {"steps": 10**6, "pause": 0.02, "until_version": 3})
    try:
        _wait(lambda: shared["step"] >= 3, "the ranks never started", timeout=120)
        _wait(lambda: all(_said(logs[k], "trainer: training") for k in trainers), "a trainer never started", 120)
        # Started last, so that its 40 steps end while the registry is away.
        report = tmp_path / "ended.json"
        trainers["ended"] = ended = _spawned([*run, "--steps", "40", "--report", str(report)], logs["ended"])
        _wait(lambda: _said(logs["ended"], "trainer: training"), "the short run never started", 120)
        # The long trainers would train flat out through the outage, a core of the suite's for the
        # 90 s: niced, they take what the suite's other tests leave, and train on all the same.
        for pid in [trainers["run"].pid, trainers["hf"].pid, *(p.pid for p in processes)]:
            os.setpriority(os.PRIO_PROCESS, pid, 10)
        registry.kill()  # at once, its watches under way cut off
        registry.wait(timeout=30)
        away = time.monotonic()
        # The second registry process, on the same database: a version published while the first is away.
        second, second_url = start_server(root, env=env)
        try:
            assert _publish(second_url, name, made[0]) == 2
        finally:
            second.terminate()
            second.wait(timeout=30)
        assert ended.wait(timeout=OUTAGE) == 0, logs["ended"].read_text()
        assert time.monotonic() - away < OUTAGE  # it ended while the registry was away
        short = json.loads(report.read_text())
        assert set(short["versions"]) == {1} and short["steps"] == 40 and short["registry_away_seconds"] > 0
        del trainers["ended"]
        time.sleep(max(OUTAGE - (time.monotonic() - away), 0))
        assert all(p.poll() is None for p in trainers.values()) and all(p.is_alive() for p in processes)
        registry, _ = start_server(root, env=env, port=port)  # back where the trainers look
        _wait(lambda: all(_said(logs[k], "took version 2") for k in trainers), "version 2 was never taken", 60)
        _wait(lambda: shared["version"] == 2, "the ranks never took version 2", 60)
        assert _publish(url, name, made[1]) == 3
        _wait(lambda: all(_said(logs[k], "took version 3") for k in trainers), "version 3 was never taken", 60)
        reports = _reports(processes, results)
    finally:
        for process in trainers.values():
            if process.poll() is None:
                process.terminate()
                process.wait(timeout=30)
        for process in processes:
            process.kill()
        manager.shutdown()
        registry.terminate()
        registry.wait(timeout=30)
    assert not any("error" in r for r in reports), reports
    assert reports[0]["taken"] == reports[1]["taken"] and [v for v, _ in reports[0]["taken"]] == [2, 3]
    assert all(r["registry_away_seconds"] >= OUTAGE - 5 for r in reports)
    for k in trainers:
        assert _said(logs[k], "is away (") == 1 and _said(logs[k], "is back after") == 1, logs[k].read_text()
