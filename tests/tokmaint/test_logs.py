"""tokmaint/logs.py: the CLI's log lines, plain or JSON (TOKMAINT_LOG_FORMAT)."""

import json
import os
import subprocess
import sys


def test_log_lines_are_json_when_asked(tmp_path):
    missing = tmp_path / "nothing.jsonl"
    argv = [sys.executable, "-m", "tokmaint.cli", "evolve", "--corpus", str(missing), "--out", str(tmp_path / "o")]
    plain = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    as_json = subprocess.run(
        argv, capture_output=True, text=True, timeout=120, env={**os.environ, "TOKMAINT_LOG_FORMAT": "json"}
    )
    assert plain.returncode == as_json.returncode == 2
    assert plain.stderr.startswith("tokmaint: error: ") and str(missing) in plain.stderr
    (line,) = as_json.stderr.splitlines()
    record = json.loads(line)
    assert (record["level"], record["logger"]) == ("error", "tokmaint") and str(missing) in record["message"]
    assert record["ts"].endswith("+00:00")
    bad = subprocess.run(
        argv, capture_output=True, text=True, timeout=120, env={**os.environ, "TOKMAINT_LOG_FORMAT": "xml"}
    )
    assert "TOKMAINT_LOG_FORMAT must be plain or json" in bad.stderr and "tokmaint: error: " in bad.stderr
