"""Output directories: a user's files survive every command with --out, versions are immutable and
atomic, a run interrupted by a signal (or a crash) continues to exactly the uninterrupted result."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ctrl_c_works
from tokmaint.cli import main
from tokenizer_service.errors import OutputError
from tokenizer_service.output_dir import MARKER, OutputDir, StepLog, file_set_marker, write_file_set

EVOLVE_OPTIONS = [
    "--vocab-size",
    "300",
    "--horizon-docs",
    "20",
    "--interval-docs",
    "10",
    "--warmup-docs",
    "0",
    "--batch-size",
    "5",
    "--init-share",
    "0.3",
]


def evolve(corpus, out, *extra, step_docs=10) -> list[str]:
    return [
        "evolve",
        "--corpus",
        str(corpus),
        "--out",
        str(out),
        "--step-docs",
        str(step_docs),
        *EVOLVE_OPTIONS,
        *extra,
    ]


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def reference(drifting_corpus, tmp_path_factory):
    """One uninterrupted evolve run with step_docs=2 (many versions), to compare continued runs with."""
    out = tmp_path_factory.mktemp("reference") / "out"
    assert main(evolve(drifting_corpus, out, step_docs=2)) == 0
    return tree(out)


def test_reference_run_is_complete(reference):
    versions = sorted({name.split("/")[0] for name in reference if name.startswith("v")})
    steps = [json.loads(line) for line in reference["steps.jsonl"].splitlines()]
    assert len(versions) > 10 and versions[0] == "v0001"
    assert {s["version"] for s in steps} == set(range(1, len(versions) + 1))
    assert all(f"{v}/diff.json" in reference for v in versions[1:])


@pytest.mark.parametrize(
    "signum, code, word", [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")]
)
def test_a_signal_stops_cleanly_and_the_same_command_continues(
    drifting_corpus, reference, tmp_path, signum, code, word
):
    out = tmp_path / "out"
    argv = evolve(drifting_corpus, out, step_docs=2)
    process = subprocess.Popen(
        [sys.executable, "-m", "tokmaint.cli", *argv], stderr=subprocess.PIPE, text=True, preexec_fn=ctrl_c_works
    )
    deadline = time.monotonic() + 60
    while not (out / "v0004").exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    process.send_signal(signum)
    _, err = process.communicate(timeout=60)
    assert process.returncode == code, err
    assert err.splitlines() == [f"tokmaint: {word}; everything written so far is complete"]

    # Whatever the log names is on disk and whole; nothing half-written stays behind.
    written = tree(out)
    logged = [json.loads(line) for line in written["steps.jsonl"].splitlines()]
    assert 0 < len(logged) < len(reference["steps.jsonl"].splitlines())
    for record in logged:
        name = f"v{record['version']:04d}/tokenizer.json"
        assert written[name] == reference[name]
    assert all(name in reference for name in written if name != "steps.jsonl")
    assert not list(out.glob(".tokmaint-staging-*"))

    assert main([*argv, "--json"]) == 0
    assert tree(out) == reference


def test_a_crash_mid_write_continues_to_the_same_result(drifting_corpus, reference, tmp_path, capsys):
    out = tmp_path / "out"
    argv = evolve(drifting_corpus, out, step_docs=2)
    out.mkdir()
    for name, data in reference.items():  # the state a crash could leave: a prefix, a torn log line
        if not name.startswith("v") or int(name[1:5]) <= 6:
            (out / name).parent.mkdir(exist_ok=True)
            (out / name).write_bytes(data)
    lines = reference["steps.jsonl"].splitlines(keepends=True)
    (out / "steps.jsonl").write_bytes(b"".join(lines[:40]) + lines[40][:15])
    (out / ".tokmaint-staging-v0007-999").mkdir()
    (out / ".tokmaint-staging-v0007-999" / "tokenizer.json").write_text("{half")
    assert main([*argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["resumed"] is True
    assert tree(out) == reference


def test_the_same_run_again_changes_nothing(drifting_corpus, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(evolve(drifting_corpus, out)) == 0
    first = tree(out)
    mtimes = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    assert main(evolve(drifting_corpus, out)) == 0
    assert tree(out) == first
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.name != "steps.jsonl"} == {
        p: t for p, t in mtimes.items() if p.name != "steps.jsonl"
    }


def test_a_changed_version_is_never_overwritten(drifting_corpus, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(evolve(drifting_corpus, out)) == 0
    (out / "v0002" / "tokenizer.json").write_text("{}")
    assert main(evolve(drifting_corpus, out)) == 2
    assert "v0002/tokenizer.json is not the version this run makes" in capsys.readouterr().err
    assert (out / "v0002" / "tokenizer.json").read_text() == "{}"


def test_a_different_run_is_refused_naming_what_differs(drifting_corpus, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(evolve(drifting_corpus, out)) == 0
    before = tree(out)
    assert main(evolve(drifting_corpus, out, "--horizon-docs", "25", "--lineage", "other")) == 2
    err = capsys.readouterr().err
    assert (
        "holds a different `tokmaint evolve` run (horizon_docs: 20 there, 25 now; lineage: default there, other now)"
        in err
        and "--force" in err
    )
    assert tree(out) == before


def test_force_replaces_only_what_tokmaint_wrote(drifting_corpus, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(evolve(drifting_corpus, out, "--batch-size", "2")) == 0
    versions = len(list(out.glob("v*")))
    (out / "notes.txt").write_text("mine")
    (out / "plots").mkdir()
    (out / "plots" / "a.png").write_bytes(b"png")
    (out / "v0001" / "mine.txt").write_text("mine too")
    before = tree(out)
    assert main(evolve(drifting_corpus, out, "--batch-size", "5", "--force")) == 2
    assert "v0001/mine.txt" in capsys.readouterr().err
    assert tree(out) == before  # refused before removing anything
    (out / "v0001" / "mine.txt").unlink()
    assert main(evolve(drifting_corpus, out, "--batch-size", "5", "--force", "--json")) == 0
    assert (out / "notes.txt").read_text() == "mine" and (out / "plots" / "a.png").read_bytes() == b"png"
    assert json.loads((out / MARKER).read_text())["run"]["batch_size"] == 5
    assert len(list(out.glob("v*"))) != versions or tree(out) != before


def test_force_spares_files_that_only_look_like_tokmaints(drifting_corpus, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(evolve(drifting_corpus, out)) == 0
    (out / "v0002-keep").mkdir()
    (out / "v0002-keep" / "tokenizer.json").write_text("a copy")
    (out / ".notes.tmp-backup").write_text("precious")
    (out / "steps.jsonl.bak").write_text("old log")
    assert main(evolve(drifting_corpus, out)) == 0  # the same run: continues
    assert main(evolve(drifting_corpus, out, "--horizon-docs", "40", "--force")) == 0
    assert (out / "v0002-keep" / "tokenizer.json").read_text() == "a copy"
    assert (out / ".notes.tmp-backup").read_text() == "precious"
    assert (out / "steps.jsonl.bak").read_text() == "old log"
    (out / "v0003" / "mine").mkdir()
    (out / "v0003" / "mine" / "diff.json").write_text("mine")
    assert main(evolve(drifting_corpus, out, "--force")) == 2
    assert "v0003/mine/diff.json" in capsys.readouterr().err
    assert (out / "v0003" / "mine" / "diff.json").read_text() == "mine"


def test_residues_out_keeps_a_users_files(drifting_corpus, corpus_tokenizer, tmp_path, capsys):
    out = tmp_path / "audit"
    out.mkdir()
    (out / "mine.txt").write_text("mine")
    residues = ["residues", "--tokenizer", str(corpus_tokenizer), "--corpus", str(drifting_corpus), "--out", str(out)]
    assert main(residues) == 2
    assert "is not empty and was not written by tokmaint (mine.txt)" in capsys.readouterr().err
    assert main([*residues, "--force"]) == 2  # --force replaces tokmaint's files only
    assert [p.name for p in out.iterdir()] == ["mine.txt"]
    (out / "mine.txt").unlink()
    assert main([*residues, "--r", "0.5", "--s", "3"]) == 0
    first = tree(out)
    (out / "mine.txt").write_text("mine")
    assert main([*residues, "--r", "0.5", "--s", "3"]) == 0  # the same audit again: same files
    assert tree(out) == {**first, "mine.txt": b"mine"}
    assert main([*residues, "--r", "0.3", "--s", "3"]) == 2
    assert "(options: " in capsys.readouterr().err
    assert main([*residues, "--r", "0.3", "--s", "3", "--force"]) == 0
    assert (out / "mine.txt").read_text() == "mine" and tree(out)["scores.parquet"] != first["scores.parquet"]
    assert not list(out.glob(".tokmaint-staging-*"))


def test_modes_follow_the_umask(drifting_corpus, tmp_path):
    previous = os.umask(0o027)
    try:
        assert main(evolve(drifting_corpus, tmp_path / "out")) == 0
    finally:
        os.umask(previous)
    paths = [tmp_path / "out", *(tmp_path / "out").rglob("*")]
    assert {oct(p.stat().st_mode & 0o777) for p in paths if p.is_dir()} == {"0o750"}
    assert {oct(p.stat().st_mode & 0o777) for p in paths if p.is_file()} == {"0o640"}


def test_claim_rules(tmp_path):
    user = tmp_path / "user"
    user.mkdir()
    (user / "a").write_text("x")
    with pytest.raises(OutputError, match=r"user is not empty and was not written by tokmaint \(a\)"):
        OutputDir.claim(user, command="c", run={}, outputs=[], force=True)
    for resumed in (False, True):
        with OutputDir.claim(tmp_path / "new" / "deep", command="c", run={"k": 1}, outputs=[]) as out:
            assert out.resumed is resumed
    with pytest.raises(OutputError, match="holds the output of `tokmaint c`"):
        OutputDir.claim(tmp_path / "new" / "deep", command="other", run={"k": 1}, outputs=[])
    with pytest.raises(OutputError, match=r"--out .*inside .*deep, the output of another tokmaint command"):
        OutputDir.claim(tmp_path / "new" / "deep" / "v0001" / "sub", command="c", run={"k": 1}, outputs=[])
    for broken in ("not json", "[]", '{"command": "c", "run": [1]}', '{"command": "c", "run": null}', "{}"):
        (tmp_path / "new" / "deep" / MARKER).write_text(broken)
        with pytest.raises(OutputError, match="is not a marker tokmaint can read"):
            OutputDir.claim(tmp_path / "new" / "deep", command="c", run={"k": 1}, outputs=[])


def test_one_command_at_a_time_writes_into_a_directory(tmp_path):
    first = OutputDir.claim(tmp_path / "out", command="c", run={}, outputs=[])
    with pytest.raises(OutputError, match="another tokmaint command is writing into"):
        OutputDir.claim(tmp_path / "out", command="c", run={}, outputs=[])
    first.release()
    OutputDir.claim(tmp_path / "out", command="c", run={}, outputs=[]).release()


def test_step_log_keeps_the_whole_records_and_checks_replays(tmp_path):
    path = tmp_path / "steps.jsonl"
    path.write_bytes(b'{"step": 1}\n{"step": 2}\n{"st')
    log = StepLog(path, resume=True)
    assert log.logged == [{"step": 1}, {"step": 2}]
    log.write({"step": 1})
    with pytest.raises(OutputError, match="line 2 differs from this run"):
        log.write({"step": 7})
    log.close()
    assert path.read_bytes() == b'{"step": 1}\n{"step": 2}\n'
    log = StepLog(path, resume=False)
    log.write({"step": 9})
    log.close()
    assert path.read_bytes() == b'{"step": 9}\n'


def _private_files(names: dict[str, str]):
    """A writer as tempfile and transformers' weights writer are: a 0600 file (and a 0700 folder)."""

    def write(folder: Path) -> None:
        for name, text in names.items():
            (folder / name).write_text(text)
            (folder / name).chmod(0o600)

    return write


def test_a_file_set_written_again_keeps_the_users_files(tmp_path):
    out = tmp_path / "model"
    assert write_file_set(out, _private_files({"weights": "1", "old-only": "x"}), command="demo") == [
        "old-only",
        "weights",
    ]
    (out / "README.md").write_text("my notes")
    (out / "runs").mkdir()
    (out / "runs" / "eval.txt").write_text("my eval")
    assert write_file_set(out, _private_files({"weights": "2", "config": "c"}), command="demo") == ["config", "weights"]
    assert tree(out) == {
        "README.md": b"my notes",
        "runs/eval.txt": b"my eval",
        "weights": b"2",
        "config": b"c",
        MARKER: (out / MARKER).read_bytes(),
    }  # old-only was ours: gone
    assert file_set_marker(out) == {"command": "demo", "files": ["config", "weights"], "complete": True}
    assert not [p for p in tmp_path.iterdir() if p.name != "model"]  # no staging left beside it


def test_a_file_set_is_refused_where_it_would_mix_with_others_files(tmp_path):
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "notes.txt").write_text("mine")
    with pytest.raises(OutputError, match="user is not empty and was not written by tokmaint"):
        write_file_set(tmp_path / "user", _private_files({"weights": "1"}), command="demo")
    write_file_set(tmp_path / "other", _private_files({"weights": "1"}), command="other command")
    with pytest.raises(OutputError, match="holds the output of `tokmaint other command`"):
        write_file_set(tmp_path / "other", _private_files({"weights": "2"}), command="demo")
    with pytest.raises(OutputError, match="is a file, not a directory"):
        write_file_set(tmp_path / "user" / "notes.txt", _private_files({"weights": "1"}), command="demo")
    assert (tmp_path / "user" / "notes.txt").read_text() == "mine" and tree(tmp_path / "other")["weights"] == b"1"
    with OutputDir.claim(tmp_path / "evolved", command="evolve", run={"seed": 1}, outputs=[]):
        pass
    with pytest.raises(OutputError, match="holds the output of `tokmaint evolve`"):  # export --out on evolve's
        write_file_set(tmp_path / "evolved", _private_files({"weights": "1"}), command="demo")
    (tmp_path / "evolved" / MARKER).write_text("[1]")
    with pytest.raises(OutputError, match="is not a marker tokmaint can read"):
        write_file_set(tmp_path / "evolved", _private_files({"weights": "1"}), command="demo")
    (tmp_path / "legacy").mkdir()  # written before markers: recognised by a file only the command writes
    (tmp_path / "legacy" / "stamp").write_text("old")
    (tmp_path / "legacy" / "README").write_text("mine")
    write_file_set(tmp_path / "legacy", _private_files({"stamp": "new"}), command="demo", legacy="stamp")
    assert (tmp_path / "legacy" / "README").read_text() == "mine"


def test_a_file_set_interrupted_is_marked_unfinished_and_completed_by_the_next(tmp_path, monkeypatch):
    import tokenizer_service.output_dir as output_dir

    out = tmp_path / "model"
    write_file_set(out, _private_files({"a": "1", "b": "1"}), command="demo")
    replaced = []

    def crash_after_one(source, target):  # a crash between two files of the set
        if replaced:
            raise KeyboardInterrupt
        replaced.append(target)
        os.rename(source, target)

    monkeypatch.setattr(
        output_dir.os,
        "replace",
        lambda s, t, _real=os.replace: _real(s, t) if Path(t).name == MARKER else crash_after_one(s, t),
    )
    with pytest.raises(KeyboardInterrupt):
        write_file_set(out, _private_files({"a": "2", "b": "2"}), command="demo")
    monkeypatch.undo()
    assert file_set_marker(out)["complete"] is False  # readers refuse it (trainer.export.check_model_folder)
    write_file_set(out, _private_files({"a": "2", "b": "2"}), command="demo")
    assert file_set_marker(out)["complete"] is True and tree(out)["b"] == b"2"
    assert sorted(p.name for p in out.iterdir()) == [MARKER, "a", "b"]  # its staging folder is gone too
    for stale in (out / ".tokmaint-staging-files-99999", tmp_path / ".model.tokmaint-staging-99999"):
        stale.mkdir()  # what a crash (kill -9) of another process left staged
        (stale / "a").write_text("half")
    write_file_set(out, _private_files({"a": "3", "b": "3"}), command="demo")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"] and tree(out)["a"] == b"3"
    with pytest.raises(OutputError, match="holds the output of `tokmaint demo`"):  # evolve --out on a model folder
        OutputDir.claim(out, command="evolve", run={}, outputs=[])


@pytest.mark.parametrize("mask, folder_mode, file_mode", [(0o022, "0o755", "0o644"), (0o027, "0o750", "0o640")])
def test_a_file_set_follows_the_umask(tmp_path, mask, folder_mode, file_mode):
    previous = os.umask(mask)
    try:
        write_file_set(tmp_path / "new", _private_files({"weights": "1"}), command="demo")
        (tmp_path / "empty").mkdir()
        write_file_set(tmp_path / "empty", _private_files({"weights": "1"}), command="demo")
        write_file_set(tmp_path / "new", _private_files({"weights": "2", "config": "c"}), command="demo")
    finally:
        os.umask(previous)
    for out in (tmp_path / "new", tmp_path / "empty"):
        assert oct(out.stat().st_mode & 0o777) == folder_mode or out.name == "empty"
        assert {oct(p.stat().st_mode & 0o777) for p in out.iterdir()} == {file_mode}
