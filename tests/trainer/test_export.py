"""``trainer.export``: a model folder written again keeps what the user put beside it, follows the
umask, and a folder is checked whole before it is used (every reason in one error)."""

import json
import os
import shutil

import pytest

from tests.trainer.conftest import TEXTS
from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.errors import TokmaintError
from tokenizer_service.output_dir import MARKER
from tokmaint.cli import main
from trainer.export import check_model_folder, export_model, load_model


def _files(root):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_export_again_keeps_the_users_readme_and_folder(checkpoint, tmp_path, capsys):
    path, _, _ = checkpoint
    out = tmp_path / "model"
    argv = ["trainer", "export", "--checkpoint", str(path), "--out", str(out), "--json"]
    assert main(argv) == 0
    first = json.loads(capsys.readouterr().out)["files"]
    (out / "README.md").write_text("# my model card")
    (out / "evals").mkdir()
    (out / "evals" / "scores.csv").write_text("step,bpb\n1,2.5\n")
    assert main(argv) == 0
    assert (out / "README.md").read_text() == "# my model card"
    assert (out / "evals" / "scores.csv").read_text() == "step,bpb\n1,2.5\n"
    assert sorted(p.name for p in out.iterdir()) == sorted([*first, "README.md", "evals", MARKER])
    assert [p.name for p in tmp_path.iterdir()] == ["model"]  # nothing staged left beside it
    load_model(out, device="cpu")


def test_zip2zip_again_keeps_the_users_files(checkpoint, tmp_path, capsys):
    path, _, _ = checkpoint
    corpus = tmp_path / "docs.txt"
    corpus.write_text("\n".join(TEXTS) + "\n")
    argv = [
        "trainer",
        "zip2zip",
        "--model",
        str(path),
        "--corpus",
        str(corpus),
        "--out",
        str(tmp_path / "z2z"),
        "--steps",
        "1",
    ]
    assert main(argv) == 0
    (tmp_path / "z2z" / "README.md").write_text("mine")
    (tmp_path / "z2z" / "notes").mkdir()
    (tmp_path / "z2z" / "notes" / "a.txt").write_text("mine too")
    assert main(argv) == 0
    capsys.readouterr()
    assert (tmp_path / "z2z" / "README.md").read_text() == "mine"
    assert (tmp_path / "z2z" / "notes" / "a.txt").read_text() == "mine too"
    assert (tmp_path / "z2z" / "zip2zip.safetensors").is_file()


def test_an_exported_folder_follows_the_umask(checkpoint, tmp_path):
    path, _, _ = checkpoint
    previous = os.umask(0o022)
    try:
        export_model(path, tmp_path / "model")
    finally:
        os.umask(previous)
    out = tmp_path / "model"
    assert oct(out.stat().st_mode & 0o777) == "0o755"
    assert {p.name: oct(p.stat().st_mode & 0o777) for p in out.iterdir()} == {
        p.name: "0o644" for p in out.iterdir()
    }  # model.safetensors was 0600, the folder 0700


def test_a_folder_exported_before_the_marker_is_replaced_in_place(checkpoint, tmp_path):
    path, _, _ = checkpoint
    out = tmp_path / "model"
    export_model(path, out)
    (out / MARKER).unlink()  # as the exports before it wrote them: tokmaint.json only
    (out / "README.md").write_text("mine")
    export_model(path, out)
    assert (out / "README.md").read_text() == "mine" and (out / MARKER).is_file()


def test_a_folder_is_checked_whole_with_every_reason(checkpoint, tmp_path):
    path, _, tokenizer = checkpoint
    out = tmp_path / "model"
    export_model(path, out)
    assert check_model_folder(out)[0].sha256 == tokenizer.sha256
    bad = tmp_path / "bad"
    shutil.copytree(out, bad)
    config = json.loads((bad / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**config, "n_layer": 3}))
    larger = BPETokenizer.train(TEXTS + ["zyx wvu tsr 98 987 9876 ñoño"] * 4, vocab_size=320)
    (bad / "tokenizer.json").write_bytes(larger.to_json_bytes())
    with pytest.raises(TokmaintError) as refused:
        load_model(bad, device="cpu")
    message = str(refused.value)
    assert "model.safetensors lacks 12 tensors config.json's model has (e.g. transformer.h.2" in message
    assert larger.id_space > tokenizer.id_space
    rows = tokenizer.id_space  # the checkpoint's model has a row for each of its version's ids
    assert f"tokenizer.json has ids up to {larger.id_space - 1}, more than the model's {rows} rows" in message
    assert "tokenizer.json is not the version the model was trained with" in message
    assert "\n" not in message
    stamp = json.loads((out / "tokmaint.json").read_text())
    assert stamp["sha256"] == tokenizer.sha256 and stamp["version"] == 3


def test_an_unfinished_export_is_refused_until_run_again(checkpoint, tmp_path):
    path, _, _ = checkpoint
    out = tmp_path / "model"
    export_model(path, out)
    marker = json.loads((out / MARKER).read_text())
    (out / MARKER).write_text(json.dumps({**marker, "complete": False}))  # as a crash mid-replace leaves it
    with pytest.raises(TokmaintError, match="an export into it did not finish"):
        load_model(out, device="cpu")
    export_model(path, out)
    load_model(out, device="cpu")
