"""``tokmaint demo``: the whole loop on embedded defaults (``make demo``)."""

from __future__ import annotations

import argparse

from tokmaint.cli import print_result, show_progress


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


def add_commands(sub: argparse._SubParsersAction) -> None:
    demo = sub.add_parser("demo", help="the whole loop on one machine: broker, Redis, registry, pipeline and a "
                                       "trainer on the shipped stream; a report folder")
    demo.add_argument("--out", default="demo-report", help="the report folder (default: demo-report)")
    demo.add_argument("--corpus", help="the stream (default: data/git-commits-sample.jsonl.gz, shipped)")
    demo.add_argument("--initial-docs", type=int, help="oldest documents the initial tokenizer trains on "
                                                       "(default: 1500)")
    demo.add_argument("--chunks", type=int, help="parts the stream arrives in (default: 24)")
    demo.add_argument("--pause", type=float, help="seconds between two parts (default: 1.5)")
    demo.add_argument("--trainer-steps", type=int, help="the trainer's steps while the stream goes on (default: 1000)")
    demo.add_argument("--json", action="store_true", help="print JSON")
    demo.set_defaults(func=cmd_demo, parser=demo)
