"""``tokmaint demo``: the whole loop on embedded defaults (``make demo``); ``bench soak``: the
whole system under load and faults."""

from __future__ import annotations

import argparse

from tokmaint.options import add_bench_options, add_settings, chosen_settings, finish_command
from tokmaint.output import print_result, show_progress


def cmd_demo(args: argparse.Namespace) -> int:
    from pathlib import Path

    from demo.run import DemoSettings, run_demo

    summary = run_demo(
        Path(args.out), chosen_settings(args.parser, args, DemoSettings), force=args.force, progress=show_progress(args)
    )
    shown = {k: v for k, v in summary.items() if k not in ("parts", "changes", "files")}
    if not args.json:  # the table shows the first and last bits per byte; summary.json has every evaluation
        shown["trainer"] = {k: v for k, v in shown["trainer"].items() if k != "evaluations"}
    print_result({**shown, "report": str(Path(args.out) / "index.html")}, as_json=args.json)
    return 0


def cmd_bench_soak(args: argparse.Namespace) -> int:
    from demo.soak import SoakSettings, run_soak

    report = run_soak(chosen_settings(args.parser, args, SoakSettings), progress=show_progress(args))
    print_result(report, as_json=args.json)
    documents, versions = report["documents"], report["versions"]
    held = (
        documents["lost"] == 0
        and documents["duplicated"] == 0
        and documents["dead_lettered"] >= documents["refused"]
        and versions["gaps"] == 0
        and versions["duplicates"] == 0
        and report["trainer"]["versions_taken"]
        and report["trainer_deaths"] == 0
        and report["http"]["unexplained_server_errors"] == 0
        and not report["processes_left"]
        and not report["exited_on_their_own"]
        and all(report["statistics"][k] for k in ("versions_equal", "tokens_equal", "pairs_equal"))
    )
    if "hostile" in report:
        hostile = report["hostile"]
        held = held and (
            report["http"]["starved"] == 0
            and not hostile["missing_artifacts"]
            and not hostile["gc_errors"]
            and hostile["accepted_bad"] == 0
        )
    return 0 if held else 1


def add_demo(demo: argparse.ArgumentParser) -> None:
    from demo.run import DemoSettings

    demo.add_argument(
        "--out",
        default="demo-report",
        help="the report folder: new, empty, or a demo's report of the same settings (default: demo-report)",
    )
    demo.add_argument(
        "--force", action="store_true", help="replace the report of a demo of other settings in --out (only its files)"
    )
    add_settings(demo, DemoSettings, skip=("redis", "stream"))
    finish_command(demo, cmd_demo)


def add_bench_soak(soak: argparse.ArgumentParser) -> None:
    from demo.soak import SoakSettings

    add_bench_options(soak, SoakSettings, cmd_bench_soak)
