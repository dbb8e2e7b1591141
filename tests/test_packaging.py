"""The wheel ``pip install .`` builds holds every package of the repository, with its data files
(a hand-made package list once left ``tokenizer_service.bench`` out, and ``tokmaint`` crashed), and
runs in a fresh virtualenv that has only the core dependencies: a command imports its own
modules only, so the algorithms' commands need no service's or trainer's packages."""

import ast
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements.lock"
# Packages of the extras (services, trainer): none may be imported to run a core command.
EXTRAS = (
    "torch",
    "transformers",
    "accelerate",
    "pyflink",
    "kafka",
    "confluent_kafka",
    "redis",
    "sqlalchemy",
    "fastapi",
    "uvicorn",
    "httpx",
)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation", "-q", "-w", str(out)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (built,) = out.glob("tokmaint-*.whl")
    return built


def test_the_wheel_holds_every_package_and_its_data(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    packages = {
        str(p.parent.relative_to(ROOT))
        for p in ROOT.glob("*/**/__init__.py")
        if not {".venv", "tests", "build"} & set(p.relative_to(ROOT).parts)
    }
    assert {"tokenizer_service/bench", "tokmaint/commands"} <= packages
    assert {p for p in packages if f"{p}/__init__.py" not in names} == set()
    assert {
        "schemas/document.schema.json",
        "registry/api/templates/lineage.html",
        "registry/migrations/script.py.mako",
    } <= names


def test_the_wheel_runs_evolve_with_only_the_core_dependencies(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    # The pins of the lock file, for the core dependencies only (the wheel names no extra); the
    # modules are compiled as they are imported, as in `make setup`.
    subprocess.run(
        [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile", "-c", LOCK, wheel],
        check=True,
        capture_output=True,
        timeout=600,
    )
    installed = subprocess.run(
        [python, "-c", f"import importlib.util as u; print([m for m in {EXTRAS!r} if u.find_spec(m)])"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert installed.stdout.strip() == "[]"
    tokmaint = venv / "bin" / "tokmaint"
    # Run from elsewhere than the repository, so nothing is imported from the source tree.
    listing = subprocess.run([tokmaint, "--help"], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert listing.returncode == 0 and "evolve" in listing.stdout and "trainer" in listing.stdout
    run = subprocess.run(
        [
            tokmaint,
            "evolve",
            "--corpus",
            ROOT / "data" / "git-commits-sample.jsonl.gz",
            "--out",
            tmp_path / "out",
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["versions"] > 1 and (tmp_path / "out" / "v0001" / "tokenizer.json").is_file()
    # A command of an extra says which package it lacks and how to install it, in one line.
    missing = subprocess.run(
        [tokmaint, "registry", "list", "--registry", "http://127.0.0.1:9"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1
    assert "'httpx'" in missing.stderr and "pip install 'tokmaint[services,trainer]'" in missing.stderr


# The floors, from the ground up: a package imports only those below it. The schemas are the
# contract and depend on nothing of ours; the command line sits on top.
LAYERS = ("schemas", "tokenizer_service", "registry", "pipeline", "trainer", "demo", "tokmaint")


def test_no_import_runs_back_up():
    upward = []
    for floor, package in enumerate(LAYERS):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                upward += [
                    f"{path.relative_to(ROOT)}:{node.lineno} imports {name}"
                    for name in names
                    if name.split(".")[0] in LAYERS[floor + 1 :]
                ]
    assert upward == []
