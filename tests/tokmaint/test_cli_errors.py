"""Every bad input a user can give the CLI: one line on stderr, exit code 2, and nothing lost or half-written.

Each case is run in a scratch directory holding a good corpus, a good tokenizer, a bad input
and a user's file; afterwards every file there must be byte for byte what it was.
"""

import gzip
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.cli import run
from tokenizer_service.bpe import BPETokenizer

GOOD_LINES = [json.dumps({"ts": f"2020-01-01T00:00:{i:02d}Z", "text": f"doc {i} text"}) for i in range(40)]


def snapshot(root: Path) -> dict[str, bytes | None]:
    return {p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() else None) for p in root.rglob("*")}


def _tokenizer_with(edit):
    data = json.loads(BPETokenizer.train(["doc text words"] * 5, vocab_size=270).to_json())
    edit(data)
    return json.dumps(data, separators=(",", ":")).encode()


def _shared_token(data):
    data["model"]["vocab"]["te"] = data["model"]["vocab"]["do"]


def _drop_byte(data):
    del data["model"]["vocab"]["Ā"]


BAD_FILES = {
    "truncated.jsonl.gz": gzip.compress("\n".join(GOOD_LINES * 20).encode(), mtime=0)[:-40],
    "garbage.jsonl.gz": b"\x1f\x8b\x08\x00not really gzip at all",
    "binary.jsonl.gz": bytes(range(255, -1, -1)),
    "latin1.jsonl": ("\n".join(GOOD_LINES[:3]) + '\n{"text": "caf\xe9"}\n').encode("latin-1"),
    "number.jsonl": b'{"text": 7}\n',
    "null.jsonl": b'{"ts": "2020-01-01", "text": null}\n',
    "list-text.jsonl": b'{"text": ["a"]}\n',
    "bad-ts.jsonl": b'{"ts": "last tuesday", "text": "a"}\n',
    "empty.jsonl": b"",
    "list.json": json.dumps([1, 2]).encode(),
    "merge-outside.json": _tokenizer_with(lambda d: d["model"]["merges"].append(["q", "zz"])),
    "twice.json": _tokenizer_with(lambda d: None).replace(b'"vocab":{', b'"vocab":{"do":1,', 1),
    "negative.json": _tokenizer_with(lambda d: d["model"]["vocab"].update(do=-4)),
    "giant-id.json": _tokenizer_with(lambda d: d["model"]["vocab"].update(do=10**9)),
    "shared-id.json": _tokenizer_with(_shared_token),
    "lossy.json": _tokenizer_with(_drop_byte),
}

RESIDUES = ["residues", "--tokenizer", "tok.json", "--corpus", "corpus.jsonl"]
EVOLVE = ["evolve", "--corpus", "corpus.jsonl", "--out", "out", "--vocab-size", "280"]
DRIFT = ["bench", "drift", "--corpus", "corpus.jsonl"]
# Each command as REFUSED_OPTIONS runs it, before the options a case tries: on the scratch folder's corpus and
# tokenizer, and pipeline run pointed at ports where nothing listens (it refuses its options before it connects).
COMMANDS = {
    "residues": RESIDUES,
    "evolve": EVOLVE,
    "bench drift": DRIFT,
    "bench throughput": ["bench", "throughput", "--corpus", "corpus.jsonl"],
    "bench arithmetic": ["bench", "arithmetic"],
    "bench apply": ["bench", "apply"],
    "pipeline run": "pipeline run --redis redis://127.0.0.1:1/0 --registry http://127.0.0.1:1 --lineage x".split(),
    # The registry's commands, pointed at a port where nothing listens: they refuse their options first.
    "registry create": "registry create x --registry http://127.0.0.1:1 --train corpus.jsonl".split(),
    "registry download": "registry download x --registry http://127.0.0.1:1".split(),
    "registry serve": "registry serve --insecure-dev --db sqlite:///never.db".split(),
    "ingest-server": ["ingest-server"],
    "bench lifelong": ["bench", "lifelong"],
}

# The command, the options a case tries, and what the one line says; the case's id is the command and the options.
REFUSED_OPTIONS = [
    # output directories
    ("evolve", "--out corpus.jsonl", "--out corpus.jsonl is a file, not a directory"),
    ("evolve", "--out corpus.jsonl/v", "cannot write --out corpus.jsonl/v"),
    ("evolve", "--out .", ". is not empty and was not written by tokmaint"),
    ("residues", "--out .", ". is not empty and was not written by tokmaint"),
    ("residues", "--out sub", "sub is not empty and was not written by tokmaint"),
    ("evolve", "--out sub --force", "sub is not empty and was not written"),
    (
        "registry download",
        "--out tok.json",
        "--out tok.json exists and was not written by this command; choose another --out, or pass --force",
    ),
    ("registry download", "--out sub", "--out sub is a directory, not a file"),
    ("bench lifelong", "--plot sub", "sub is not empty and was not written by tokmaint (notes.txt)"),
    ("bench lifelong", "--plot tok.json --force", "--plot tok.json is a file, not a directory"),
    ("registry download", "--out none/tok.json --force", "cannot write --out none/tok.json: none is not a folder"),
    # numeric options, named with their range
    ("evolve", "--step-docs 0", "argument --step-docs: must be a whole number ≥ 1, got '0'"),
    ("evolve", "--vocab-size 0", "argument --vocab-size: must be a whole number in [257"),
    ("evolve", "--vocab-size -1", "argument --vocab-size: must be a whole number"),
    ("evolve", "--warmup-docs -1", "argument --warmup-docs: must be a whole number ≥ 0, got '-1'"),
    ("evolve", "--init-share 0", "argument --init-share: must be a number in (0, 1)"),
    ("evolve", "--horizon-docs 0", "argument --horizon-docs: must be a whole number"),
    ("evolve", "--interval-docs 2.5", "argument --interval-docs: must be a whole"),
    ("evolve", "--beta inf", "argument --beta: must be a number > 0, got 'inf'"),
    ("evolve", "--id-price nan", "argument --id-price: must be a number ≥ 0"),
    ("bench drift", "--sweep 1,-2", "argument --sweep: must be a number ≥ 0, got '-2'"),
    ("bench drift", "--sweep=,", "argument --sweep: must name at least one factor, got ','"),
    ("bench drift", "--corpus ./corpus.jsonl", "argument --corpus: the same corpus is given"),
    ("bench drift", "--plot tok.json", "--plot tok.json is a file, not a directory"),
    ("bench drift", "--compare tok.json", "argument --compare: draws into --plot's drift.png; give --plot DIR too"),
    ("bench drift", "--plot plot --compare tok.json", "tok.json: not a bench drift --json report: it needs 'rows'"),
    ("bench drift", "--plot plot --compare nothing.json", "nothing.json: cannot read an earlier bench drift report"),
    ("evolve", "--horizon-docs 10", "horizon-docs must be at least step-docs (64)"),
    ("evolve", "--lineage ../x", "argument --lineage: must be 1-64 letters"),
    ("residues", "--r 2", "argument --r: must be a number in [0, 1], got '2'"),
    ("residues", "--r nan", "argument --r: must be a number in [0, 1], got 'nan'"),
    ("residues", "--s -1", "argument --s: must be a number ≥ 0"),
    ("residues", "--log-base 0", "argument --log-base: must be a number > 1, got '0'"),
    ("residues", "--min-count many", "argument --min-count: must be a whole number ≥ 0"),
    ("bench arithmetic", "--batch 0", "argument --batch: must be a whole number ≥ 1"),
    ("bench arithmetic", "--epochs 0", "argument --epochs: must be a whole number"),
    ("bench arithmetic", "--validation 70000", "argument --validation: must be"),
    ("bench drift", "--held-out 0", "argument --held-out: must be a whole number ≥ 1, got '0'"),
    ("bench drift", "--new-share 1.5", "argument --new-share: must be a number in (0, 1)"),
    ("bench drift", "--old-share 0.9 --new-share 0.2", "old-share + new-share must be at most 1"),
    ("bench throughput", "--max-mb 0", "argument --max-mb: must be a number > 0"),
    ("pipeline run", "--commit-steps 0", "argument --commit-steps: must be a whole number ≥ 1, got '0'"),
    ("bench apply", "--changes 0", "argument --changes: must be a whole number ≥ 1"),
    ("pipeline run", "--step-seconds 0", "argument --step-seconds: must be a number > 0, got '0'"),
    (
        "registry create",
        "--vocab-size -1",
        "argument --vocab-size: must be a whole number in [257, 4,194,304], got '-1'",
    ),
    ("registry create", "--vocab-size 10", "argument --vocab-size: must be a whole number in [257, 4,194,304]"),
    ("registry create", "--vocab-size 256", "argument --vocab-size: must be a whole number in [257"),
    ("registry create", "--vocab-size 99999999999999999999", "argument --vocab-size: must be a whole number in [257"),
    ("registry create", "--train-docs 0", "argument --train-docs: must be a whole number ≥ 1, got '0'"),
    ("registry create", "--train-docs -1", "argument --train-docs: must be a whole number ≥ 1, got '-1'"),
    ("registry serve", "--port 70000", "argument --port: must be a whole number in [1, 65,535], got '70000'"),
    ("registry serve", "--port -1", "argument --port: must be a whole number in [1, 65,535], got '-1'"),
    ("registry serve", "--port 0", "argument --port: must be a whole number in [1, 65,535], got '0'"),
    ("ingest-server", "--port 65536", "argument --port: must be a whole number in [1, 65,535], got '65536'"),
    # a corpus too small for the benchmark's slices says which option to change
    ("evolve", "--init-share 0.99", "40 documents: --init-share 0.99 leaves none to stream"),
]

CASES = [
    # corpora, for each command that reads one
    *[
        (
            f"{cmd[0]} {name}",
            [*cmd[:-1], name] if cmd is DRIFT else [*cmd, "--corpus", name],
            f"{name}{where}: {reason}",
        )
        for cmd in (EVOLVE, RESIDUES, DRIFT)
        for name, where, reason in (
            ("truncated.jsonl.gz", "", "corrupt or truncated gzip"),
            ("garbage.jsonl.gz", "", "corrupt or truncated gzip"),
            ("binary.jsonl.gz", ":1", "not UTF-8"),
            ("latin1.jsonl", ":4", "not UTF-8 (byte 0xe9"),
            ("number.jsonl", ":1", "'text' must be a string, got a number"),
            ("null.jsonl", ":1", "'text' must be a string, got null"),
            ("list-text.jsonl", ":1", "'text' must be a string, got a list"),
            ("bad-ts.jsonl", ":1", "'ts' is not an ISO-8601 time"),
            ("empty.jsonl", "", "no documents"),
            ("sub", "", "is a directory"),
            ("missing.jsonl", "", "corpus not found"),
        )
    ],
    # tokenizers: residues and evolve follow the same loader rules
    *[
        (f"{cmd[0]} {name}", [*cmd, "--tokenizer", name], f"{name}: invalid tokenizer: {reason}")
        for cmd in (RESIDUES, EVOLVE)
        for name, reason in (
            ("list.json", "the top level must be a JSON object, got a list"),
            ("merge-outside.json", "model.merges: 1 merges name tokens outside the vocabulary"),
            ("twice.json", "model.vocab: key 'do' appears more than once"),
            ("negative.json", "model.vocab: 1 negative ids, e.g. 'do': -4"),
            ("giant-id.json", "model.vocab: 1 ids of 4,194,304 or more, e.g. 'do': 1000000000"),
            ("shared-id.json", "model.vocab: 1 ids given to two tokens"),
            ("lossy.json", "byte alphabet incomplete"),
            ("sub", "is a directory without a tokenizer.json"),
        )
    ],
    # output directories
    (
        "evolve without --out or --registry",
        ["evolve", "--corpus", "corpus.jsonl"],
        "give --out, --registry or both: where the versions go",
    ),
    # output directories, numeric options named with their range, too small a corpus for --init-share
    *[
        (f"{command} {options}", [*COMMANDS[command], *options.split()], message)
        for command, options, message in REFUSED_OPTIONS
    ],
    # a corpus too small for the benchmark's slices says which option to change
    (
        "drift small corpus",
        DRIFT,
        "40 documents: --new-share 0.2 is 8 documents, not more than --held-out 2000; lower --held-out below 8",
    ),
]


@pytest.fixture
def scratch(tmp_path, monkeypatch, corpus_tokenizer):
    (tmp_path / "corpus.jsonl").write_text("\n".join(GOOD_LINES) + "\n")
    (tmp_path / "tok.json").write_bytes(corpus_tokenizer.read_bytes())
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "notes.txt").write_text("a user's file")
    for name, data in BAD_FILES.items():
        (tmp_path / name).write_bytes(data)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("case, argv, message", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_exit_2_and_loses_nothing(scratch, capsys, case, argv, message):
    before = snapshot(scratch)
    started = time.perf_counter()
    code, out, err = run(argv, capsys)
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err and err.startswith("tokmaint"), err
    assert message in err
    assert out == ""
    assert snapshot(scratch) == before  # nothing deleted, changed or left half-written
    assert time.perf_counter() - started < 30  # refused, not ground through (a 10**9 id once hung)


def test_debug_adds_the_traceback(scratch, capsys):
    code, _, err = run(["--debug", *RESIDUES[:2], "list.json", *RESIDUES[3:]], capsys)
    assert code == 2 and "Traceback" in err and err.rstrip().endswith("got a list")


def test_skip_bad_reports_the_count_and_goes_on(scratch, capsys):
    (scratch / "mixed.jsonl").write_text("\n".join(GOOD_LINES[:30] + ['{"text": null}', "{", *GOOD_LINES[30:]]))
    code, out, err = run([*EVOLVE, "--corpus", "mixed.jsonl", "--skip-bad", "--json"], capsys)
    assert code == 0
    assert err.startswith("tokmaint: warning: skipped 2 bad records of mixed.jsonl (--skip-bad); the first: line 31")
    assert json.loads(out)["skipped_records"] == 2


def test_allow_invalid_audits_and_says_why(scratch, capsys):
    code, out, err = run([*RESIDUES[:2], "lossy.json", *RESIDUES[3:], "--allow-invalid", "--json"], capsys)
    assert code == 0
    assert "tokmaint: warning: lossy.json fails validation (byte alphabet incomplete" in err
    assert "auditing it anyway (--allow-invalid)" in err
    assert json.loads(out)["documents"] == len(GOOD_LINES)


def test_ctrl_c_while_the_commands_load_exits_130(monkeypatch, capsys):
    import tokmaint.cli as cli

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", interrupted)
    assert run(["evolve"], capsys)[::2] == (130, "tokmaint: interrupted; everything written so far is complete\n")


def test_an_entropy_threshold_too_large_for_auto_evidence_flags_nothing(scratch, capsys):
    code, out, _ = run([*RESIDUES, "--s", "710", "--min-count", "auto", "--json"], capsys)
    result = json.loads(out)
    assert code == 0 and result["thresholds"]["min_count"] == 2**62 and result["residues"] == 0


def test_settings_come_from_the_environment_under_the_options(scratch, capsys, monkeypatch):
    monkeypatch.setenv("TOKMAINT_EVOLVE_STEP_DOCS", "0")
    code, _, err = run(EVOLVE, capsys)
    assert code == 2 and err.count("\n") == 1
    assert "TOKMAINT_EVOLVE_STEP_DOCS: Input should be greater than or equal to 1" in err
    assert not (scratch / "out").exists()
    steps = {}
    for docs in (1, 2):
        monkeypatch.setenv("TOKMAINT_EVOLVE_STEP_DOCS", "1000")  # the option wins over the variable
        code, out, _ = run([*EVOLVE, "--step-docs", str(docs), "--force", "--json"], capsys)
        monkeypatch.setenv("TOKMAINT_EVOLVE_STEP_DOCS", str(docs))
        again, out_env, _ = run([*EVOLVE, "--force", "--json"], capsys)
        assert (code, again) == (0, 0) and json.loads(out)["steps"] == json.loads(out_env)["steps"]
        steps[docs] = json.loads(out)["steps"]
    assert steps[1] > steps[2] > 1


@pytest.mark.parametrize(
    "argv, field, topic",
    [
        (["registry", "relay", "--once", "--topic", "events.x"], "revisions_topic", "events.x"),
        (["trainer", "run", "--lineage", "x", "--topic", "docs.x"], "docs_topic", "docs.x"),
    ],
    ids=["relay", "trainer"],
)
def test_relay_and_trainer_read_the_stream_s_settings_as_every_command(
    scratch, capsys, monkeypatch, argv, field, topic
):
    """Their --topic is a field of the stream's settings under the command's own name, and a bad
    value from the environment is named by its variable, before anything is opened."""
    from pipeline.config import PipelineSettings
    from tokmaint.cli import build_parser
    from tokmaint.options import chosen_settings

    args = build_parser().parse_args(argv)
    assert getattr(chosen_settings(args.parser, args, PipelineSettings), field) == topic
    monkeypatch.setenv("TOKMAINT_PIPELINE_MAX_RECORD_BYTES", "0")
    code, out, err = run(argv, capsys)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert "TOKMAINT_PIPELINE_MAX_RECORD_BYTES: Input should be greater than or equal to 1" in err


def _one_line_exit_2(code: int, out: str, err: str, message: str) -> None:
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err and err.startswith("tokmaint"), err
    assert message in err, err
    assert out == ""


def test_trainer_run_names_a_broker_that_does_not_answer(scratch, capsys):
    """``trainer run --topic`` where no broker answers says so, as the pipeline's commands do,
    not that the broker lacks the topic (it said "no topic 'docs'", after 30 s); the registry at
    :9 is never asked."""
    from registry.local_server import free_port

    nobody = f"127.0.0.1:{free_port()}"  # nothing listens there
    before = snapshot(scratch)
    argv = f"trainer run --lineage x --topic docs --bootstrap {nobody} --wait 0 --registry http://127.0.0.1:9"
    code, out, err = run(argv.split(), capsys)
    _one_line_exit_2(code, out, err, f"the Kafka broker at {nobody} did not answer in 0 s")
    assert "no topic" not in err and snapshot(scratch) == before


# Against a live registry: alias names it refuses, and references it reads as no version, each with its reason.
REFUSED_ALIASES = (
    [
        (["alias", "NAME", alias], f"alias {alias!r} would shadow a version reference: names are case-exact")
        for alias in ("MAIN", "LATEST", "Main", "Latest")
    ]
    + [
        (["alias", "NAME", alias], f"alias {alias!r} would shadow a version reference: {alias!r} is git's name")
        for alias in ("HEAD", "head")
    ]
    + [
        (["alias", "NAME", "_serving"], "alias name must be 1-64 letters, digits, '.', '_' or '-' starting with"),
        (["alias", "NAME", "a" * 65], "alias name must be 1-64 letters"),
        (["show", "NAME", "MAIN"], "has no version 'MAIN' here: names are case-exact: 'MAIN' is not 'main'"),
        (["show", "NAME", "HEAD"], "has no version 'HEAD' here: 'HEAD' is git's name for the newest commit"),
    ]
)


def test_alias_names_are_case_exact_and_named_as_aliases(registry_server, scratch, capsys, monkeypatch):
    """``MAIN``, ``LATEST``, ``HEAD`` and ``head`` are no aliases (``revision="MAIN"`` would give one version
    while ``main`` gives another), and a bad alias name is reported as an alias's, not a lineage's."""
    import httpx

    from registry.client import RegistryClient
    from tests.conftest import REGISTRY_TOKEN

    url, _ = registry_server
    monkeypatch.setenv("TOKMAINT_REGISTRY_TOKEN", REGISTRY_TOKEN)
    name = f"cases-{os.getpid()}"
    client = RegistryClient(url, token=REGISTRY_TOKEN)
    client.create(name, (scratch / "tok.json").read_bytes())
    for argv, message in REFUSED_ALIASES:
        code, out, err = run(["registry", *[name if a == "NAME" else a for a in argv], "--registry", url], capsys)
        _one_line_exit_2(code, out, err, message)
        assert "lineage name" not in err
    assert run(["registry", "alias", name, "serving", "--registry", url], capsys)[0] == 0  # a plain name is one
    assert client.version(name, "serving").number == client.version(name, "main").number == 1
    for revision in ("MAIN", "HEAD", "head"):  # nor does the Hub protocol read them
        assert httpx.head(f"{url}/{name}/resolve/{revision}/tokenizer.json").status_code == 404
    assert httpx.head(f"{url}/{name}/resolve/main/tokenizer.json").status_code == 200


def test_publish_model_refuses_file_names_that_differ_only_in_case(registry_server, model_scratch, capsys, monkeypatch):
    """``CONFIG.JSON`` beside ``config.json``: a download to a case-insensitive file system keeps one of them."""
    from registry.client import RegistryClient
    from tests.conftest import REGISTRY_TOKEN

    url, _ = registry_server
    monkeypatch.setenv("TOKMAINT_REGISTRY_TOKEN", REGISTRY_TOKEN)
    name = f"cased-{os.getpid()}"
    model = model_scratch / "model"
    RegistryClient(url, token=REGISTRY_TOKEN).create(name, (model / "tokenizer.json").read_bytes())
    _edit_json(model / "tokmaint.json", lambda stamp: stamp.update(lineage=name, version=1))
    (model / "CONFIG.JSON").write_bytes((model / "config.json").read_bytes())
    argv = ["registry", "publish-model", name, "--model", "model", "--registry", url]
    _one_line_exit_2(*run(argv, capsys), "file names 'CONFIG.JSON' and 'config.json' differ only in case")
    (model / "CONFIG.JSON").unlink()
    assert run(argv, capsys)[0] == 0  # the same folder without it is published


def test_stats_snapshot_refuses_a_step_folder_that_is_no_snapshot(redis_url, registry_server, scratch, capsys):
    """A step folder of the user's (its meta.json not JSON, or another lineage's) is kept as it is and
    refused in one line, never read as the snapshot."""
    import redis

    from pipeline.redis_store import RedisStatsStore
    from registry.client import RegistryClient
    from tests.conftest import REGISTRY_TOKEN

    url, _ = registry_server
    name = f"snap-{os.getpid()}"
    RegistryClient(url, token=REGISTRY_TOKEN).create(name, (scratch / "tok.json").read_bytes())
    RedisStatsStore(redis.Redis.from_url(redis_url), lineage=name, alpha=0.9)  # its statistics, at step 0
    step = scratch / "snapshots" / name / "step-000000000"
    step.mkdir(parents=True)
    argv = ["stats", "snapshot", "--redis", redis_url, "--registry", url, "--lineage", name, "--out", "snapshots"]
    for meta, reason in (
        ("{", "its meta.json is not JSON"),
        ('{"lineage": "other", "step": 0}', "its meta.json is of lineage 'other' at step 0"),
    ):
        (step / "meta.json").write_text(meta)
        before = snapshot(scratch)
        _one_line_exit_2(*run(argv, capsys), f"is not a snapshot of lineage {name!r} at step 0 ({reason}")
        assert snapshot(scratch) == before


def test_output_into_a_closed_pipe_ends_quietly_after_the_publish(registry_server, scratch):
    """``tokmaint registry create ... | head -0``: the lineage is created, and the reader that went away
    is no error (exit 0, nothing on stderr), as it is none for the shell's own commands."""
    from registry.client import RegistryClient
    from tests.conftest import REGISTRY_TOKEN

    url, _ = registry_server
    name = f"piped-{os.getpid()}"
    root = str(Path(__file__).resolve().parents[2])  # this checkout's code, from the scratch folder
    env = {**os.environ, "PYTHONPATH": root, "TOKMAINT_REGISTRY_TOKEN": REGISTRY_TOKEN}
    argv = [sys.executable, "-m", "tokmaint.cli", "registry", "create", name, "tok.json", "--registry", url, "--json"]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    process.stdout.close()  # the reader is gone before the command prints
    err = process.stderr.read().decode()
    assert process.wait(timeout=300) == 0 and err == "", err
    assert RegistryClient(url).version(name, 1).number == 1


# The byte-level and trainer commands: model folders, checkpoints and zip2zip folders, and their
# options. Each case copies good models into a scratch folder, breaks one thing, and runs the command.
MODEL_TEXTS = ["the theme then 12 123 1234", "héllo hé hélène", "a  b   c", "don't it's we've"] * 4
OTHER_TEXTS = ["zyx wvu tsr 98 987 9876", "ñoño ña ñuñez", "q  r   s", "won't can't shan't"] * 4


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A trainer checkpoint of a tiny GPT-2, its exported folder, a zip2zip folder of it, and two
    other tokenizers: one of the same size (another lineage's), one larger than the model's rows."""
    import torch
    from transformers import GPT2LMHeadModel

    from trainer.checkpoint import TokenizerStamp, save_checkpoint
    from trainer.export import export_model
    from trainer.loop import tiny_gpt2_config
    from trainer.zip2zip import Zip2zipLM

    root = tmp_path_factory.mktemp("models")
    tokenizer = BPETokenizer.train(MODEL_TEXTS, vocab_size=280, special_tokens=["<|endoftext|>"])
    torch.manual_seed(0)
    gpt = GPT2LMHeadModel(tiny_gpt2_config(tokenizer.id_space, n_embd=32))
    save_checkpoint(
        root / "checkpoint.pt",
        model=gpt,
        optimizer=torch.optim.AdamW(gpt.parameters()),
        tokenizer=TokenizerStamp("demo", 3, tokenizer.sha256),
        position={"step": 0},
        tokenizer_json=tokenizer.to_json(),
    )
    export_model(root / "checkpoint.pt", root / "model")
    Zip2zipLM(gpt, max_merge=3, layers=1, bos_token_id=0).save(
        root / "z2z", tokenizer, {"lineage": "demo", "version": 3}
    )
    other = BPETokenizer.train(OTHER_TEXTS, vocab_size=280, special_tokens=["<|endoftext|>"])
    assert other.id_space == tokenizer.id_space and other.sha256 != tokenizer.sha256
    (root / "other.json").write_bytes(other.to_json_bytes())
    larger = BPETokenizer.train(MODEL_TEXTS + OTHER_TEXTS, vocab_size=320, special_tokens=["<|endoftext|>"])
    assert larger.id_space > tokenizer.id_space
    (root / "larger.json").write_bytes(larger.to_json_bytes())
    return root


def _edit_json(path: Path, edit) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def _cut(path: Path, keep: int) -> None:
    path.write_bytes(path.read_bytes()[:keep])


NOT_UTF8 = os.fsdecode(b"ab\xff")  # what Python makes of the bytes a\x62\xff the shell passes
EVAL = ["eval", "bytes", "--model", "model", "--text", "the th"]
# Options the commands refuse before they read a model: the command line as a user types it (split as a shell
# would; it is the case's id), and what its one line says.
REFUSED_LINES = [
    # free text: UTF-8, and "--" is a value
    (
        f"eval bytes --model model --text {NOT_UTF8}",
        "argument --text: must be UTF-8 text, got the byte 0xff at byte 2",
    ),
    (
        f"eval bytes --model z2z --zip2zip --text {NOT_UTF8}",
        "argument --text: must be UTF-8 text, got the byte 0xff at byte 2",
    ),
    (f"eval next-byte --model model --text {NOT_UTF8}", "argument --text: must be UTF-8 text"),
    (f"generate --model model --prompt {NOT_UTF8}", "argument --prompt: must be UTF-8 text"),
    (f"generate --model z2z --zip2zip --prompt {NOT_UTF8}", "argument --prompt: must be UTF-8 text"),
    ("eval bytes --model model --text ''", "argument --text: empty: it has no bytes to score"),
    (
        f"stats hypertokens --lineage x --version {NOT_UTF8} --corpus corpus.jsonl --registry http://127.0.0.1:9",
        "argument --version: must be UTF-8 text, got the byte 0xff at byte 2",
    ),
    (
        f"stats hypertokens --lineage {NOT_UTF8} --corpus corpus.jsonl --registry http://127.0.0.1:9",
        "argument --lineage: must be 1-64 letters",
    ),
    (
        "trainer run --lineage=-- --data corpus.jsonl",
        "argument --lineage: must be 1-64 letters, digits, '.', '_' or '-' starting with a letter or digit, got '--'",
    ),
    (f"revise --lineage {NOT_UTF8}", "argument --lineage: must be 1-64"),
    # ranges
    ("generate --model model --prompt a --max-bytes -1", "argument --max-bytes: must be a whole number ≥ 1, got '-1'"),
    ("generate --model model --prompt a --max-bytes 0", "argument --max-bytes: must be a whole number ≥ 1, got '0'"),
    ("generate --model model --prompt a --seed -1", "argument --seed: must be a whole number ≥ 0"),
    ("eval next-byte --model model --text a --top 0", "argument --top: must be a whole number in [1, 256], got '0'"),
    ("pipeline run --lineage x --wait nan", "argument --wait: must be a number ≥ 0, got 'nan'"),
    ("ingest corpus.jsonl --wait -1", "argument --wait: must be a number ≥ 0, got '-1'"),
    ("ingest corpus.jsonl --wait inf", "argument --wait: must be a number ≥ 0, got 'inf'"),
    ("ingest corpus.jsonl --max-record-bytes 0", "argument --max-record-bytes: must be a whole number ≥ 1, got '0'"),
    ("stats show --lineage x --top -1", "argument --top: must be a whole number ≥ 1, got '-1'"),
    ("registry relay --interval nan", "argument --interval: must be a number > 0, got 'nan'"),
    ("registry relay --wait -1", "argument --wait: must be a number ≥ 0, got '-1'"),
    ("registry list x --offset -1", "argument --offset: must be a whole number ≥ 0, got '-1'"),
    ("registry list x --limit 0", "argument --limit: must be a whole number ≥ 1, got '0'"),
    ("pipeline run --lineage x --max-steps 0", "argument --max-steps: must be a whole number ≥ 1, got '0'"),
    (
        "pipeline run --lineage x --metrics-port 70000",
        "argument --metrics-port: must be a whole number in [1, 65,535], got '70000'",
    ),
    ("registry publish x tokenizer.json --parent -1", "argument --parent: must be a whole number ≥ 1, got '-1'"),
    ("eval bytes --model model --corpus corpus.jsonl --max-documents 0", "argument --max-documents: must be a whole"),
    (
        "trainer export --checkpoint checkpoint.pt --out o --bos-id -1",
        "argument --bos-id: must be a whole number ≥ 0, got '-1'",
    ),
    (
        "trainer run --lineage x --data corpus.jsonl --steps -1",
        "argument --steps: must be a whole number ≥ 0, got '-1'",
    ),
    # learning rates past 1 diverge (1e308 gave NaN losses and exit 0)
    (
        "trainer run --lineage x --data corpus.jsonl --warm-lr 1e308",
        "argument --warm-lr: must be a number in (0, 1], got '1e308'",
    ),
    ("trainer run --lineage x --data corpus.jsonl --lr 2", "argument --lr: must be a number in (0, 1], got '2'"),
    (
        "trainer zip2zip --model model --corpus corpus.jsonl --out o --lr inf",
        "argument --lr: must be a number in (0, 1]",
    ),
    ("bench lifelong --lr 10", "argument --lr: must be a number in (0, 1], got '10'"),
    ("eval bytes --model model --text 'the th' --max-documents 3", "--max-documents goes with --corpus"),
    # files and folders of the user's, refused before any work (the registry at :9 is never asked)
    (
        "trainer run --lineage x --data corpus.jsonl --registry http://127.0.0.1:9 --report tok.json",
        "--report tok.json exists and was not written by this command; choose another --report, or pass --force",
    ),
    (
        "trainer run --lineage x --data corpus.jsonl --registry http://127.0.0.1:9 --report sub",
        "--report sub is a directory, not a file",
    ),
    (
        "trainer run --lineage x --data corpus.jsonl --registry http://127.0.0.1:9 --report sub --force",
        "--report sub is a directory, not a file",
    ),
    (
        "trainer run --lineage x --data corpus.jsonl --registry http://127.0.0.1:9 --report /proc/report.json",
        "cannot write --report /proc/report.json: /proc takes no new file (",
    ),
    ("registry download x --registry http://127.0.0.1:9 --out /proc/tok.json", "/proc takes no new file ("),
    ("demo --out sub", "sub is not empty and was not written by tokmaint (notes.txt); choose a new or empty directory"),
    ("demo --out tok.json", "--out tok.json is a file, not a directory"),
    (
        "trainer zip2zip --model model --corpus corpus.jsonl --out model",
        "--out model is --model's folder: the fine-tuned model would replace the one it is made from",
    ),
    (
        "trainer zip2zip --model ./model/ --corpus corpus.jsonl --out model",
        "is --model's folder",
    ),
    (
        "trainer zip2zip --model model --corpus missing.jsonl --out sub",
        "sub is not empty and was not written by tokmaint (notes.txt)",
    ),
    ("trainer zip2zip --model model --corpus missing.jsonl --out tok.json", "--out tok.json is a file"),
    (
        "trainer export --checkpoint missing.pt --out sub",
        "sub is not empty and was not written by tokmaint (notes.txt)",
    ),
    ("generate --model model --prompt a --max-merge 2", "--max-merge goes with --zip2zip"),
]
MODEL_CASES = [
    *[(line, shlex.split(line), None, message) for line, message in REFUSED_LINES],
    # model folders
    (
        "model.safetensors truncated",
        EVAL,
        lambda d: _cut(d / "model" / "model.safetensors", 1000),
        "model is not a model folder tokmaint can use: model.safetensors is truncated or corrupt",
    ),
    (
        "model.safetensors cut short",
        EVAL,
        lambda d: _cut(d / "model" / "model.safetensors", 50_000),
        "model.safetensors is truncated or corrupt",
    ),
    (
        "model.safetensors random",
        EVAL,
        lambda d: (d / "model" / "model.safetensors").write_bytes(os.urandom(4096)),
        "model.safetensors is truncated or corrupt",
    ),
    (
        "model.safetensors empty",
        EVAL,
        lambda d: (d / "model" / "model.safetensors").write_bytes(b""),
        "model.safetensors is truncated or corrupt",
    ),
    (
        "config.json disagrees",
        EVAL,
        lambda d: _edit_json(d / "model" / "config.json", lambda c: c.update(n_embd=64)),
        "model.safetensors disagrees with config.json: transformer.wte.weight [280, 32] where config.json makes "
        "[280, 64]",
    ),
    ("config.json broken", EVAL, lambda d: (d / "model" / "config.json").write_text("{"), "config.json is not a model"),
    (
        "config.json bos outside",
        EVAL,
        lambda d: _edit_json(d / "model" / "config.json", lambda c: c.update(bos_token_id=10**6)),
        "config.json's bos_token_id is 1000000, not one of the model's 280 rows",
    ),
    (
        "tokenizer.json larger than the rows",
        EVAL,
        lambda d: (d / "model" / "tokenizer.json").write_bytes((d / "larger.json").read_bytes()),
        "tokenizer.json has ids up to",
    ),
    (
        "another lineage's tokenizer.json",
        EVAL,
        lambda d: (d / "model" / "tokenizer.json").write_bytes((d / "other.json").read_bytes()),
        "tokenizer.json is not the version the model was trained with (tokmaint.json: demo version 3",
    ),
    (
        "generate on a broken folder",
        ["generate", "--model", "model", "--prompt", "a"],
        lambda d: _cut(d / "model" / "model.safetensors", 1000),
        "model.safetensors is truncated or corrupt",
    ),
    (
        "trainer zip2zip from a broken folder",
        ["trainer", "zip2zip", "--model", "model", "--corpus", "corpus.jsonl", "--out", "z"],
        lambda d: _cut(d / "model" / "model.safetensors", 1000),
        "model.safetensors is truncated or corrupt",
    ),
    # zip2zip folders
    (
        "zip2zip.safetensors corrupt",
        ["generate", "--model", "z2z", "--zip2zip", "--prompt", "a"],
        lambda d: _cut(d / "z2z" / "zip2zip.safetensors", 100),
        "zip2zip.safetensors is not the hyper-encoder",
    ),
    (
        "zip2zip.json missing a field",
        ["eval", "bytes", "--model", "z2z", "--zip2zip", "--text", "a"],
        lambda d: _edit_json(d / "z2z" / "zip2zip.json", lambda c: c.pop("heads")),
        "zip2zip.json is not a zip2zip config: no 'heads'",
    ),
    (
        "zip2zip.json not an object",
        ["eval", "bytes", "--model", "z2z", "--zip2zip", "--text", "a"],
        lambda d: (d / "z2z" / "zip2zip.json").write_text("[3]"),
        "zip2zip.json is not a zip2zip config: not a JSON object",
    ),
    # checkpoints
    (
        "checkpoint truncated",
        ["eval", "bytes", "--model", "checkpoint.pt", "--text", "a"],
        lambda d: _cut(d / "checkpoint.pt", 100),
        "checkpoint.pt is not a trainer checkpoint: truncated, corrupt",
    ),
    (
        "checkpoint random",
        ["trainer", "export", "--checkpoint", "checkpoint.pt", "--out", "o"],
        lambda d: (d / "checkpoint.pt").write_bytes(os.urandom(4096)),
        "checkpoint.pt is not a trainer checkpoint",
    ),
    # what the commands read besides
    (
        "generate --prompt longer than the context",
        ["generate", "--model", "model", "--prompt", "the theme " * 200],
        None,
        "the text needs",
    ),
    (
        "eval bytes --corpus without a byte",
        ["eval", "bytes", "--model", "model", "--corpus", "blank.jsonl"],
        lambda d: (d / "blank.jsonl").write_text('{"text": ""}\n'),
        "blank.jsonl: no document with a byte to score",
    ),
    (
        "eval bytes --zip2zip --corpus without a byte",
        ["eval", "bytes", "--model", "z2z", "--zip2zip", "--corpus", "blank.jsonl"],
        lambda d: (d / "blank.jsonl").write_text('{"text": ""}\n'),
        "blank.jsonl: no document with a byte to score",
    ),
    (
        "trainer export --tokenizer not UTF-8",
        ["trainer", "export", "--checkpoint", "checkpoint.pt", "--out", "o", "--tokenizer", "latin1.jsonl"],
        None,
        "argument --tokenizer: latin1.jsonl is not UTF-8 text",
    ),
    (
        "trainer run --model-config a list",
        "trainer run --lineage x --data corpus.jsonl --registry http://127.0.0.1:9 --model-config list.json".split(),
        None,
        "--model-config list.json is not a JSON object of GPT2Config fields",
    ),
    (
        "trainer run --model-config unknown field",
        "trainer run --lineage x --data corpus.jsonl --registry http://127.0.0.1:9 --model-config mc.json".split(),
        lambda d: (d / "mc.json").write_text('{"n_layers": 2}'),
        "GPT2Config has no field n_layers",
    ),
    *[
        (
            f"trainer run --model-config {fields}",
            "trainer run --lineage x --data corpus.jsonl --registry http://127.0.0.1:9 --model-config mc.json".split(),
            lambda d, fields=fields: (d / "mc.json").write_text(fields),
            message,
        )
        for fields, message in [
            ('{"n_positions": 0}', "--model-config mc.json: n_positions must be a whole number ≥ 1, got 0"),
            ('{"n_layer": -1}', "--model-config mc.json: n_layer must be a whole number ≥ 1, got -1"),
            ('{"n_head": 0}', "--model-config mc.json: n_head must be a whole number ≥ 1, got 0"),
            ('{"n_embd": 65}', "--model-config mc.json: n_embd (65) must be a multiple of n_head (2)"),
            ('{"n_positions": 32}', "--seq-len 64 is more tokens than --model-config mc.json's n_positions (32)"),
            ('{"n_positions": 1.5}', "--model-config mc.json: TypeError: Field 'n_positions' expected int"),
            ('{"vocab_size": 500}', "--model-config mc.json: vocab_size is each version's own"),
            (
                '{"n_embd": 32, "hidden_size": 48}',
                "--model-config mc.json gives n_embd twice (as n_embd and hidden_size)",
            ),
            ('{"resid_pdrop": 2}', "--model-config mc.json: dropout probability has to be between 0 and 1"),
        ]
    ],
    (
        "trainer run --seq-len past the default model's positions",
        "trainer run --lineage x --data corpus.jsonl --registry http://127.0.0.1:9 --seq-len 300".split(),
        None,
        "--seq-len 300 is more tokens than the default model's n_positions (256)",
    ),
    (
        "demo over a user's report page",
        ["demo", "--out", "site"],
        lambda d: [
            (d / "site").mkdir(),
            (d / "site" / "index.html").write_text("<p>mine"),
            (d / "site" / "summary.json").write_text("{}"),
        ],
        "site is not empty and was not written by tokmaint (index.html, summary.json)",
    ),
    (
        "demo over another demo's report",
        ["demo", "--out", "site", "--chunks", "3"],
        lambda d: [(d / "site").mkdir(), (d / "site" / ".tokmaint.json").write_text('{"command": "demo", "run": {}}')],
        "site holds a different `tokmaint demo` run",
    ),
    # publish-model reads the folder's tokmaint.json
    (
        "publish-model tokmaint.json a list",
        ["registry", "publish-model", "demo", "--model", "model", "--registry", "http://127.0.0.1:9"],
        lambda d: (d / "model" / "tokmaint.json").write_text("[3]"),
        "model/tokmaint.json is not a JSON object",
    ),
]


@pytest.fixture
def model_scratch(scratch, models):
    import shutil

    for name in ("model", "z2z"):
        shutil.copytree(models / name, scratch / name)
    for name in ("checkpoint.pt", "other.json", "larger.json"):
        shutil.copy(models / name, scratch / name)
    return scratch


@pytest.mark.parametrize("case, argv, edit, message", MODEL_CASES, ids=[c[0] for c in MODEL_CASES])
def test_bad_models_and_options_are_one_line_exit_2(model_scratch, capsys, case, argv, edit, message):
    if edit is not None:
        edit(model_scratch)
    before = snapshot(model_scratch)
    code, out, err = run(argv, capsys)
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err and err.startswith("tokmaint"), err
    assert message in err, err
    assert "issue" not in err  # no library asking to file one
    assert out == ""
    assert snapshot(model_scratch) == before


def test_a_value_of_two_dashes_reaches_the_command(model_scratch, capsys):
    code, out, err = run(["eval", "bytes", "--model", "model", "--text=--", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["bytes"] == 2
    code, out, err = run(["generate", "--model", "model", "--prompt=--", "--max-bytes", "3", "--json"], capsys)
    assert code == 0 and json.loads(out)["prompt"] == "--", err


def test_text_that_is_no_utf8_from_the_shell_is_one_line(model_scratch):
    """The real thing: the bytes go through exec and Python's own decoding of argv."""
    argv = [
        sys.executable.encode(),
        b"-m",
        b"tokmaint.cli",
        b"eval",
        b"bytes",
        b"--model",
        b"model",
        b"--text",
        b"caf\xe9",
    ]
    root = str(Path(__file__).resolve().parents[2])  # this checkout's code, from the scratch folder
    done = subprocess.run(argv, capture_output=True, timeout=300, env={**os.environ, "PYTHONPATH": root})
    err = done.stderr.decode("utf-8", errors="replace")
    assert done.returncode == 2 and "Traceback" not in err and err.count("\n") == 1, err
    assert "argument --text: must be UTF-8 text, got the byte 0xe9 at byte 3" in err


def test_pipeline_flink_refuses_what_cannot_run_in_one_line(registry_server, redis_url, broker, scratch, capsys):
    """``pipeline flink`` checks what its job needs before it submits (a window Flink takes, the
    lineage, Redis, the broker, a JobManager), and ``--drain`` the JobManager: each refusal one
    line, exit 2, at once (``--wait 0``), naming the option or the part."""
    from registry.client import RegistryClient
    from registry.local_server import free_port
    from tests.conftest import REGISTRY_TOKEN

    url, _ = registry_server
    name = f"flink-{os.getpid()}"
    RegistryClient(url, token=REGISTRY_TOKEN).create(name, (scratch / "tok.json").read_bytes())
    nobody = f"127.0.0.1:{free_port()}"  # no JobManager answers there
    parts = ["--registry", url, "--redis", redis_url, "--bootstrap", broker, "--wait", "0", "--flink-master", nobody]
    window = "argument --step-seconds: must be a number in [0.001, 1e+09] for the Flink job"
    cases = [
        ([name, *parts, "--step-seconds", "0.0004"], window),
        ([name, *parts, "--step-seconds", "1e11"], window),
        (["nosuchlineage", *parts, "--step-seconds", "60"], "no lineage 'nosuchlineage'"),
        ([name, *parts, "--step-seconds", "60", "--redis", "redis://127.0.0.1:1/0"], "Redis at redis://127.0.0.1:1/0"),
        ([name, *parts, "--step-seconds", "60"], f"the Flink JobManager at {nobody} did not answer in 0 s"),
        ([name, "--drain", "--flink-master", nobody, "--wait", "0"], f"the Flink JobManager at {nobody} did not"),
        (
            [name, "--drain", "--flink-master", url.removeprefix("http://"), "--wait", "0"],
            "is not a Flink JobManager's REST API (check --flink-master)",
        ),
    ]
    for argv, message in cases:
        asked = time.monotonic()
        code, out, err = run(["pipeline", "flink", "--lineage", *argv], capsys)
        assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err, err
        assert message in err and time.monotonic() - asked < 20, (argv, err)
