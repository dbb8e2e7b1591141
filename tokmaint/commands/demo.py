"""``tokmaint demo``: the whole loop on embedded defaults (``make demo``); ``bench soak``: the
whole system under load and faults."""

from __future__ import annotations

import argparse

from tokmaint.output import print_result, show_progress


def cmd_demo(args: argparse.Namespace) -> int:
    from pathlib import Path

    from demo.run import DemoSettings, run_demo

    chosen = {k: v for k, v in (("corpus", args.corpus and Path(args.corpus)), ("initial_docs", args.initial_docs),
                                ("chunks", args.chunks), ("pause", args.pause),
                                ("trainer_steps", args.trainer_steps)) if v is not None}
    summary = run_demo(Path(args.out), DemoSettings(**chosen), progress=show_progress(args))
    shown = {k: v for k, v in summary.items() if k not in ("parts", "changes", "files")}
    print_result({**shown, "report": str(Path(args.out) / "index.html")}, as_json=args.json)
    return 0


def cmd_bench_soak(args: argparse.Namespace) -> int:
    from demo.soak import SoakSettings, run_soak

    from pathlib import Path

    chosen = {k: v for k, v in (("minutes", args.minutes), ("seed", args.seed), ("fault_every", args.fault_every),
                                ("logs", args.logs and Path(args.logs))) if v is not None}
    report = run_soak(SoakSettings(**chosen), progress=show_progress(args))
    print_result(report, as_json=args.json)
    documents, versions = report["documents"], report["versions"]
    held = (documents["lost"] == 0 and documents["duplicated"] == 0
            and documents["dead_lettered"] >= documents["refused"]
            and versions["gaps"] == 0 and versions["duplicates"] == 0 and report["trainer"]["versions_taken"]
            and report["http"]["unexplained_server_errors"] == 0 and not report["processes_left"]
            and not report["exited_on_their_own"]
            and all(report["statistics"][k] for k in ("versions_equal", "tokens_equal", "pairs_equal")))
    return 0 if held else 1


def add_demo(demo: argparse.ArgumentParser) -> None:
    demo.add_argument("--out", default="demo-report", help="the report folder (default: demo-report)")
    demo.add_argument("--corpus", help="the stream (default: data/git-commits-sample.jsonl.gz, shipped)")
    demo.add_argument("--initial-docs", type=int, help="oldest documents the initial tokenizer trains on "
                                                       "(default: 1500)")
    demo.add_argument("--chunks", type=int, help="parts the stream arrives in (default: 24)")
    demo.add_argument("--pause", type=float, help="seconds between two parts (default: 1.5)")
    demo.add_argument("--trainer-steps", type=int, help="the trainer's steps while the stream goes on (default: 1000)")
    demo.add_argument("--json", action="store_true", help="print JSON")
    demo.set_defaults(func=cmd_demo, parser=demo)


def add_bench_soak(soak: argparse.ArgumentParser) -> None:
    soak.add_argument("--minutes", type=float, help="how long the load and the faults go on (default: 5)")
    soak.add_argument("--seed", type=int, help="the seed of the load and the fault schedule (default: 0)")
    soak.add_argument("--fault-every", type=float, help="the longest gap between two faults, in seconds (default: 10)")
    soak.add_argument("--logs", help="copy each part's log into this folder at the end")
    soak.add_argument("--json", action="store_true", help="print JSON")
    soak.set_defaults(func=cmd_bench_soak, parser=soak)
