"""tokmaint/output.py: results as rows, tables, and whether progress bars show."""

import argparse
import io

from tokmaint.output import print_result, print_rows, show_progress


def test_a_result_s_rows_are_aligned_and_lists_of_results_numbered(capsys):
    print_result({"runs": [{"ms": 1.5}, {"ms": 20.0}], "name": "git", "tags": ["a", "b"]}, as_json=False)
    assert capsys.readouterr().out.splitlines() == [
        "runs.1.ms  1.5000",
        "runs.2.ms  20.0000",
        "name       git",
        "tags       ['a', 'b']",
    ]


def test_a_table_s_columns_are_as_wide_as_their_widest_cell(capsys):
    print_rows(
        [{"corpus": "a", "documents": 12345678, "ratio": None}, {"corpus": "wikipedia", "documents": 1, "ratio": 0.5}]
    )
    assert capsys.readouterr().out.splitlines() == [
        "corpus     documents   ratio",
        "a           12345678       -",
        "wikipedia          1  0.5000",
    ]


def test_progress_shows_only_on_an_interactive_stderr_and_never_under_json(monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr("sys.stderr", Terminal())
    assert show_progress(argparse.Namespace(json=False))
    assert not show_progress(argparse.Namespace(json=True))
    monkeypatch.setattr("sys.stderr", io.StringIO())
    assert not show_progress(argparse.Namespace(json=False))
