"""The trainer's commands: ``tokmaint bench apply``."""

from __future__ import annotations

import argparse

from tokmaint.cli import add_settings, chosen_settings, print_result, subcommands


def cmd_bench_apply(args: argparse.Namespace) -> int:
    from trainer.bench import ApplyBenchSettings, run_apply_bench

    print_result(run_apply_bench(chosen_settings(args.parser, args, ApplyBenchSettings)), as_json=args.json)
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    from trainer.bench import ApplyBenchSettings

    summary = "apply: apply_revision's latency for K changed ids on a GPT-2-124M-shaped model with AdamW state"
    bench = subcommands(sub.choices["bench"]).add_parser("apply", help=summary, description=summary)
    add_settings(bench, ApplyBenchSettings)
    bench.add_argument("--json", action="store_true", help="print JSON")
    bench.set_defaults(func=cmd_bench_apply, parser=bench)
