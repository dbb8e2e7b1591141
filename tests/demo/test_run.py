"""``tokmaint demo``: the whole loop (its own broker, redis-server and registry; ingest, the
pipeline, a trainer) on a small stream, ending in a report; and a Ctrl-C that stops every
process it started."""

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from demo.run import DemoSettings, run_demo
from tests.conftest import ctrl_c_works
from tests.support.polling import until
from tokenizer_service.evolve import StreamSettings
from trainer.config import TrainerSettings


def _children(pid: int) -> set[int]:
    """The live processes whose parent is ``pid`` (but multiprocessing's resource tracker, which
    lives as long as its parent does)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if (
                int(fields[1]) == pid
                and fields[0] != "Z"
                and b"resource_tracker" not in (entry / "cmdline").read_bytes()
            ):
                found.add(int(entry.name))
    return found


@pytest.mark.parametrize("with_redis", [True, False], ids=["redis-server", "in-process store"])
def test_the_demo_runs_the_loop_and_writes_its_report(drifting_corpus, tmp_path, with_redis, caplog, monkeypatch):
    # A version's new rows warm up on the last 32 documents, not 256: the loop is this test's
    # subject (the warm-up's is tests/trainer/test_new_rows.py), and its 20 steps on 256
    # documents for each version were most of the trainer's time.
    monkeypatch.setenv("TOKMAINT_TRAINER_WARM_DOCS", "32")
    before = _children(os.getpid())
    settings = DemoSettings(
        corpus=drifting_corpus,
        initial_docs=150,
        vocab_size=400,
        chunks=4,
        pause=0.5,
        trainer_steps=40,
        stream=StreamSettings(
            step_docs=16, horizon_docs=160, interval_docs=64, warmup_docs=64, id_price=0.0, base_token_cost=0.0
        ),
        redis=with_redis,
    )
    demo_log = logging.getLogger("tokmaint.demo")
    demo_log.addHandler(caplog.handler)  # (the command line's configure() stops tokmaint's lines at its own handler)
    try:
        with caplog.at_level(logging.INFO, logger="tokmaint.demo"):
            summary = run_demo(tmp_path / "report", settings, progress=False)
    finally:
        demo_log.removeHandler(caplog.handler)
    assert ("the statistics stay in this process" in caplog.text) is not with_redis
    assert _children(os.getpid()) <= before  # every server and the trainer stopped

    report = tmp_path / "report"
    assert sorted(p.name for p in report.iterdir() if p.name != ".tokmaint.json") == sorted(summary["files"])
    for name in summary["files"]:
        if name.endswith(".png"):
            assert (report / name).read_bytes().startswith(b"\x89PNG")
    assert json.loads((report / "summary.json").read_text()) == json.loads(json.dumps(summary))
    page = (report / "index.html").read_text()
    assert all(f'src="{n}"' in page for n in summary["files"] if n.endswith(".png"))

    held_out = TrainerSettings().eval_docs  # the newest documents: the trainer's bits per byte are scored on them
    assert summary["documents"] == 600 - 150 - held_out and summary["revisions_published"] >= 1
    assert summary["versions"] == summary["revisions_published"] + 1
    assert len(summary["parts"]) == 4 and summary["parts"][0]["version"] == 1
    assert summary["tokens"]["added"] > 0
    trainer = summary["trainer"]
    assert trainer["final_version"] == summary["versions"]  # it took the last version
    assert trainer["versions_taken"] and trainer["versions_taken"][-1] == summary["versions"]
    # Bits per byte on the held-out text, at the end of each run (40 steps: fewer than --eval-every).
    assert [e["step"] for e in trainer["evaluations"]] == [40, 40 + 2]
    assert 0 < trainer["bits_per_byte"]["last"] < 16 and trainer["evaluations"][-1]["version"] == summary["versions"]


def test_ctrl_c_stops_every_process_the_demo_started(drifting_corpus, tmp_path):
    demo = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tokmaint.cli",
            "demo",
            "--out",
            str(tmp_path / "r"),
            "--corpus",
            str(drifting_corpus),
            "--initial-docs",
            "150",
            "--chunks",
            "8",
            "--pause",
            "2",
            "--trainer-steps",
            "20",
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=ctrl_c_works,
    )
    started: set[int] = set()
    deadline = time.monotonic() + 60
    while len(started) < 4 and time.monotonic() < deadline:  # broker, redis, registry, trainer
        started |= _children(demo.pid)
        time.sleep(0.2)
    assert len(started) >= 4, f"the demo started {len(started)} processes: {demo.stderr.read() if demo.poll() else ''}"
    demo.send_signal(signal.SIGINT)
    _, err = demo.communicate(timeout=60)
    assert demo.returncode != 0 and "interrupt" in err.lower()

    def alive() -> list[int]:
        return [
            pid
            for pid in started
            if Path(f"/proc/{pid}").exists()
            and (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z")
        ]

    # A counting worker whose start the Ctrl-C cut short is not yet one multiprocessing stops at
    # exit: it ends by itself once it sees its parent gone (OrderedWorker's orphan watch), which
    # on a loaded machine took more than the half second this waited before (1 in 10 runs).
    until(lambda: not alive(), "processes the demo started still run 15 s after it ended", seconds=15)
