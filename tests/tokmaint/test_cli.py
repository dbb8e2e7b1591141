import argparse
import gzip
import json

import pytest
from tokenizers import Tokenizer

from schemas.revision import RevisionDiff
from tests.support.cli import run_json
from tokmaint.cli import main


def test_evolve_writes_valid_versions(drifting_corpus, tmp_path, capsys):
    out = tmp_path / "versions"
    result = run_json(
        capsys,
        "evolve",
        "--corpus",
        str(drifting_corpus),
        "--out",
        str(out),
        "--vocab-size",
        "300",
        "--step-docs",
        "10",
        "--horizon-docs",
        "30",
        "--interval-docs",
        "50",
        "--warmup-docs",
        "0",
        "--batch-size",
        "10",
        "--init-share",
        "0.3",
    )
    versions = sorted(p.name for p in out.glob("v*"))
    assert len(versions) == result["versions"] > 1
    assert not list(out.glob(".tokmaint-staging-*"))  # no staging leftovers
    for name in versions[1:]:
        diff = RevisionDiff.from_dict(json.loads((out / name / "diff.json").read_text()))
        assert Tokenizer.from_file(str(out / name / "tokenizer.json"))
        assert diff.version == int(name[1:]) and diff.entries
    steps = (out / "steps.jsonl").read_text().splitlines()
    assert len(steps) == result["steps"] == 42
    assert result["bytes_per_token"]["last_step"] > result["bytes_per_token"]["first_step"]


def test_bench_drift_closes_the_gap_within_its_id_budget(drifting_corpus, capsys):
    result = run_json(
        capsys,
        "bench",
        "drift",
        "--corpus",
        str(drifting_corpus),
        "--vocab-size",
        "300",
        "--held-out",
        "50",
        "--old-share",
        "0.3",
        "--new-share",
        "0.3",
        "--step-docs",
        "10",
        "--horizon-docs",
        "30",
        "--interval-docs",
        "50",
        "--warmup-docs",
        "50",
        "--batch-size",
        "20",
    )
    [row] = result["rows"]
    assert row["bpt_new"] > row["bpt_old"] and row["bpt_tedtok"] > row["bpt_old"]
    assert row["gap_closed"] > 0.5
    # A revision changes at most K = 20 ids of the 300, and it did change some.
    assert row["revisions"] >= 1
    assert 1 - row["revisions"] * 20 / 300 <= row["ids_stable"] < 1
    assert row["stream_docs"] == 370
    assert result["worst"] == [
        {"price": 1.0, "gap_closed": row["gap_closed"], "ids_stable": row["ids_stable"], "gap_undefined": 0}
    ]


def test_bench_drift_sweeps_several_corpora_and_plots(drifting_corpus, tmp_path, capsys):
    other = tmp_path / "reversed.jsonl"
    with gzip.open(drifting_corpus, "rt", encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    other.write_text(
        "\n".join(json.dumps({"ts": r["ts"], "text": t["text"]}) for r, t in zip(records, reversed(records)))
    )
    argv = [
        "bench",
        "drift",
        "--corpus",
        str(drifting_corpus),
        "--corpus",
        str(other),
        "--vocab-size",
        "300",
        "--held-out",
        "50",
        "--old-share",
        "0.3",
        "--new-share",
        "0.3",
        "--step-docs",
        "10",
        "--horizon-docs",
        "30",
        "--interval-docs",
        "50",
        "--warmup-docs",
        "50",
        "--sweep",
        "0,1,8",
        "--plot",
        str(tmp_path / "plot"),
    ]
    result = run_json(capsys, *argv)
    rows = result["rows"]
    assert [(r["corpus"], r["price"]) for r in rows] == [
        (name, p) for name in ("stream", "reversed") for p in (0.0, 1.0, 8.0)
    ]
    for w in result["worst"]:
        at = [r for r in rows if r["price"] == w["price"]]
        assert w["gap_closed"] == min(r["gap_closed"] for r in at)
        assert w["ids_stable"] == min(r["ids_stable"] for r in at)
    # A higher price buys fewer changes: ids_stable never falls as the price rises.
    for name in ("stream", "reversed"):
        ids = [r["ids_stable"] for r in rows if r["corpus"] == name]
        assert ids[1] <= ids[2]
    assert (tmp_path / "plot" / "drift.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_residues_audits_each_family_in_a_process_of_its_own(
    drifting_corpus, byte_tokenizer, sp_tokenizer, tmp_path, capsys
):
    paths = []
    for name, tokenizer in (("byte", byte_tokenizer), ("sp", sp_tokenizer)):
        paths += ["--tokenizer", str(tmp_path / f"{name}.json")]
        tokenizer.save(tmp_path / f"{name}.json")
    result = run_json(capsys, "bench", "residues", *paths, "--corpus", str(drifting_corpus))
    assert result["documents"] == 600 and [r["tokenizer"] for r in result["tokenizers"]] == paths[1::2]
    byte, sp = result["tokenizers"]
    assert (byte["family"], byte["kind"], byte["thresholds"]) == ("byte-level BPE", "classic", {"r": 0.15, "s": 4.0})
    assert 0 <= byte["residue_share_r025"] - byte["residue_share"] <= 1  # r = 0.25 flags at least as many
    assert sp["family"] == "SentencePiece-style BPE with byte fallback (Prepend + Replace)"
    for row in (byte, sp):
        assert row["lossless"] and row["export_loads"] and row["export_agreement"] >= 0.99
        assert row["paper"] is None and row["kind_from"] == "file" and row["peak_rss_mb"] > 0
        assert row["residues"] == round(row["residue_share"] * row["scope_size"])
    with pytest.raises(SystemExit) as usage:
        main(["bench", "residues", *paths[:2], *paths[:2], "--corpus", str(drifting_corpus)])
    assert usage.value.code == 2 and "the same tokenizer is given twice" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert main(["bench", "residues", "--tokenizer", str(bad), "--corpus", str(drifting_corpus)]) == 2
    assert "bad.json: invalid tokenizer: model: must be an object" in capsys.readouterr().err


def test_bench_throughput_times_what_it_says(drifting_corpus, capsys):
    result = run_json(
        capsys,
        "bench",
        "throughput",
        "--corpus",
        str(drifting_corpus),
        "--vocab-size",
        "400",
        "--tracked-pairs",
        "5000",
        "--step-docs",
        "100",
        "--batch-size",
        "10",
    )
    with gzip.open(drifting_corpus, "rt", encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f]
    assert result["documents"] == len(texts)
    assert result["megabytes"] == pytest.approx(sum(len(t.encode("utf-8")) for t in texts) / 1e6)
    assert result["tracked_pairs"] >= 5000
    assert result["revision_changes"] == 10  # K=10 adds, each recycling one deleted id


def test_bench_arithmetic_reproduces_table_2():
    """The full SA schedule (16,000 steps, ~1 min): Ted-Tok Table 2's targets, by running it."""
    from tokenizer_service.bench.arithmetic import run_arithmetic

    result = run_arithmetic(progress=False)
    bpt, bare = result["bytes_per_token"], result["bytes_per_token_bare"]
    assert bpt["tedtok"] >= 1.359  # Table 2, on the paper's convention (one delimiter per example)
    assert result["jaccard"]["tedtok_vs_new"] <= 0.2456
    assert bpt["old"] < bpt["new"] and result["jaccard"]["old_vs_new"] > 0.5
    assert all(bare[k] > bpt[k] for k in bpt)  # a delimiter is one byte for one token: it lowers every ratio


def test_the_delimiter_convention_gives_table_2s_new_exactly():
    """New, trained as the benchmark trains it, scores Table 2's 1.366 on the full 60.7K New set."""
    import numpy as np

    from tokenizer_service.bench.arithmetic import ArithmeticSettings, arithmetic_dataset, split_new
    from tokenizer_service.bpe import BPETokenizer

    settings = ArithmeticSettings()
    new_all = arithmetic_dataset(200)
    train, _ = split_new(np.random.default_rng(settings.seed), settings.validation)
    new = BPETokenizer.train(train, vocab_size=settings.vocab_size, byte_level=False)
    assert round(new.bytes_per_token(new_all, delimited=True), 3) == 1.366
    assert round(new.bytes_per_token(new_all), 3) != 1.366


def test_residues_writes_outputs_that_agree_with_the_report(drifting_corpus, corpus_tokenizer, tmp_path, capsys):
    import pyarrow.parquet as pq

    out = tmp_path / "lite"
    result = run_json(
        capsys,
        "residues",
        "--tokenizer",
        str(corpus_tokenizer),
        "--corpus",
        str(drifting_corpus),
        "--r",
        "0.5",
        "--s",
        "3",
        "--log-base",
        "2",
        "--out",
        str(out),
    )
    source = json.loads(corpus_tokenizer.read_text())["model"]["vocab"]
    table = pq.read_table(out / "scores.parquet").to_pydict()
    assert table["id"] == sorted(source.values()) and result["vocab_size"] == len(source)
    # The scope is every all-ASCII token; tokenizers' own decoder says which those are.
    hf = Tokenizer.from_file(str(corpus_tokenizer))
    in_scope = [hf.decode([i]).isascii() for i in table["id"]]
    assert result["scope_size"] == sum(in_scope) > 0
    merged = {t for t in source if len(t) > 1}  # a byte-level tokenizer's base tokens are single symbols
    unseen = sum(
        s and t in merged and f1 == 0 and f2 == 0
        for s, t, f1, f2 in zip(in_scope, table["token"], table["f1"], table["f2"])
    )
    assert result["unseen"] == unseen
    flagged = [
        r and s and f1 / (f1 + f2) <= 0.5 and e <= 3
        for r, s, f1, f2, e in zip(table["residue"], in_scope, table["f1"], table["f2"], table["entropy"])
    ]
    assert sum(table["residue"]) == sum(flagged) == result["residues"] > 0
    assert result["tokens"]["split"] >= result["tokens"]["remerged"] >= result["tokens"]["original"]
    assert result["lossless"] is True and 0.99 <= result["export_agreement"] <= 1
    assert result["thresholds"] == {"r": 0.5, "s": 3.0, "log_base": 2.0, "min_count": 0}
    diff = RevisionDiff.from_dict(json.loads((out / "diff.json").read_text()))
    assert sorted(e.old_token for e in diff.entries) == sorted(
        t for t, removed in zip(table["token"], table["removed"]) if removed
    )
    assert len(diff.entries) == result["export"]["removed"]
    exported = Tokenizer.from_file(str(out / "tokenizer.json"))
    assert exported.get_vocab_size() == result["export"]["vocab_size"] == len(source) - len(diff.entries)


def test_residues_table_lists_the_top_residues(drifting_corpus, corpus_tokenizer, capsys):
    assert (
        main(
            [
                "residues",
                "--tokenizer",
                str(corpus_tokenizer),
                "--corpus",
                str(drifting_corpus),
                "--r",
                "0.5",
                "--s",
                "3",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "residue_share" in out and "most frequent residues" in out


def test_a_command_imports_only_its_own_modules():
    """``tokmaint --help`` imports no command's module, and ``evolve`` none of the services' or the
    trainer's packages (seconds of start-up; a `regex` finalizer in transformers once ate a SIGTERM)."""
    import subprocess
    import sys

    extras = ("torch", "transformers", "pyflink", "kafka", "confluent_kafka", "redis", "sqlalchemy", "fastapi", "httpx")
    for argv, unwanted in (
        (["--help"], ("tokmaint.commands.tokenizer", "numpy", *extras)),
        (["evolve", "--help"], extras),
        (["trainer", "run", "--help"], ("torch", "transformers")),
    ):
        probe = (
            f"import contextlib, io, sys; from tokmaint.cli import build_parser\n"
            f"with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
            f"    build_parser().parse_args({argv!r})\n"
            f"print(sorted(m for m in {unwanted!r} if m in sys.modules))"
        )
        imported = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
        assert (argv, imported.stdout.strip()) == (argv, "[]")


def _command_lines(parser, prefix=()):
    """Every command line that names a command (``registry serve``, ``bench drift`` ...)."""
    from tokmaint.cli import LazyCommands

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name in list(action.choices):
                sub = action.build(name) if isinstance(action, LazyCommands) else action.choices[name]
                yield (*prefix, name)
                yield from _command_lines(sub, (*prefix, name))


def test_every_command_has_help(capsys):
    from tokmaint.cli import BENCHES, COMMANDS, build_parser

    lines = list(_command_lines(build_parser()))
    assert {(name,) for name, _, _ in COMMANDS} | {("bench", name) for name, _, _ in BENCHES} <= set(lines)
    assert {("registry", "serve"), ("pipeline", "run"), ("stats", "snapshot"), ("trainer", "run")} <= set(lines)
    for argv in lines:
        with pytest.raises(SystemExit) as stop:
            build_parser().parse_args([*argv, "--help"])
        assert stop.value.code == 0
        assert capsys.readouterr().out.startswith(f"usage: tokmaint {' '.join(argv)}")


def test_a_setting_of_numbered_choices_takes_a_number():
    from tokmaint.cli import build_parser

    args = build_parser().parse_args(["bench", "zip2zip", "--corpus", "c", "--tokenizer", "t", "--layers", "0"])
    assert args.layers == 0
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "zip2zip", "--corpus", "c", "--tokenizer", "t", "--layers", "3"])
