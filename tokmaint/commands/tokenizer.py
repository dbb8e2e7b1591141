"""The algorithms' commands: ``evolve``, ``residues`` and the benchmarks ``bench residues``,
``arithmetic``, ``drift`` and ``throughput``.

Every command prints a table, or JSON with ``--json``; the errors a user can fix are raised as
``TokmaintError`` and printed by the front as one line.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
from pathlib import Path

from tokenizer_service.errors import CorpusError
from tokenizer_service.settings import Number, whole
from tokmaint.options import add_bench_options, add_settings, chosen_settings, finish_command
from tokmaint.output import print_result, print_rows, show_progress, warn


def _report_skipped(corpus) -> None:
    if corpus.skipped:
        warn(f"skipped {len(corpus.skipped)} bad records of {corpus.path} (--skip-bad); the first: {corpus.skipped[0]}")


def cmd_bench(args: argparse.Namespace) -> int:
    progress = show_progress(args)
    if args.bench == "arithmetic":
        from tokenizer_service.bench.arithmetic import ArithmeticSettings, run_arithmetic

        result = run_arithmetic(chosen_settings(args.parser, args, ArithmeticSettings), progress=progress)
    elif args.bench == "drift":
        return _bench_drift(args, progress=progress)
    elif args.bench == "residues":
        return _bench_residues(args, progress=progress)
    else:
        from tokenizer_service.bench.throughput import ThroughputSettings, run_throughput

        result = run_throughput(args.corpus, chosen_settings(args.parser, args, ThroughputSettings), progress=progress)
    print_result(result, as_json=args.json)
    return 0


def _bench_drift(args: argparse.Namespace, *, progress: bool) -> int:
    from tokenizer_service.bench.drift import DriftSettings, drift_table, plot_drift, read_drift_report
    from tokenizer_service.output_dir import OutputDir

    settings = chosen_settings(args.parser, args, DriftSettings)
    resolved = [Path(c).resolve() for c in args.corpus]
    if len(set(resolved)) < len(resolved):
        args.parser.error("argument --corpus: the same corpus is given twice")
    if args.compare and not args.plot:
        args.parser.error("argument --compare: draws into --plot's drift.png; give --plot DIR too")
    earlier = read_drift_report(args.compare) if args.compare else None
    prices = args.sweep
    out = None
    if args.plot:
        run = {
            "corpora": [_file_sha256(p) for p in resolved],
            "prices": prices,
            "settings": settings.model_dump(),
            "compare": _file_sha256(Path(args.compare)) if args.compare else None,
        }
        out = OutputDir.claim(
            args.plot, command="bench drift", run=run, outputs=[r"drift\.png"], force=args.force, option="--plot"
        )
    try:
        table = drift_table(args.corpus, settings, prices=prices, progress=progress)
        if out is not None:
            out.replace_files(lambda staging: plot_drift(table, staging / "drift.png", compare=earlier))
    finally:
        if out is not None:
            out.release()
    if args.json:
        print_result(table, as_json=True)
        return 0
    print_rows(table["rows"])
    print()
    print_rows([{"worst case": "all corpora", **w} for w in table["worst"]])
    if table["verdicts"]:
        print()
        print_rows(
            [
                {"default (price 1)": v["corpus"], **{k: x for k, x in v.items() if k != "corpus"}}
                for v in table["verdicts"]
            ]
        )
    print(
        f"\ntargets: gap_closed >= {table['targets']['gap_closed']}, ids_stable >= {table['targets']['ids_stable']}"
        + (f"; plot: {out.path / 'drift.png'}" if out is not None else "")
    )
    return 0


def _bench_residues(args: argparse.Namespace, *, progress: bool) -> int:
    from tokenizer_service.bench.residues import run_residues_bench

    if len({Path(t).resolve() for t in args.tokenizer}) < len(args.tokenizer):
        args.parser.error("argument --tokenizer: the same tokenizer is given twice")
    result = run_residues_bench(args.tokenizer, args.corpus, progress=progress)
    if args.json:
        print_result(result, as_json=True)
        return 0
    print(f"{result['corpus']}: {result['documents']:,} documents, {result['megabytes']} MB")
    print_rows(
        [
            {
                "tokenizer": r["model"] or Path(r["tokenizer"]).parent.name,
                "kind": r["kind"],
                "r": r["thresholds"]["r"],
                "s": r["thresholds"]["s"],
                "scope": r["scope_size"],
                "share %": round(100 * r["residue_share"], 2),
                "paper %": "" if r["paper"] is None else round(100 * r["paper"]["residue_share"], 2),
                "re-merge %": round(100 * r["remerge_token_change"], 2),
                "lossless": r["lossless"],
                "export agrees": round(r["export_agreement"], 4),
                "export loads": r["export_loads"],
                "seconds": r["seconds"],
                "peak MB": r["peak_rss_mb"],
            }
            for r in result["tokenizers"]
        ]
    )
    return 0


def _file_sha256(path: Path) -> str | None:
    """A file's content hash (None when it cannot be read: the command then says why)."""
    try:
        with open(path, "rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest()
    except OSError:
        return None


def _prices(text: str) -> list[float]:
    """``--sweep``: comma-separated price factors, each a number ≥ 0, in order, each once."""
    price = Number(float, low=0)
    factors = list(dict.fromkeys(price(p.strip()) for p in text.split(",") if p.strip()))
    if not factors:
        raise argparse.ArgumentTypeError(f"must name at least one factor, got {text!r}")
    return factors


def cmd_evolve(args: argparse.Namespace) -> int:
    from tokenizer_service.corpus import read_corpus
    from tokenizer_service.evolve import EvolveSettings, run_evolve
    from tokenizer_service.validation import load_tokenizer

    settings = chosen_settings(args.parser, args, EvolveSettings)
    if args.out is None and args.registry is None:
        args.parser.error("give --out, --registry or both: where the versions go")
    progress = show_progress(args)
    initial = load_tokenizer(args.tokenizer) if args.tokenizer else None
    corpus = read_corpus(args.corpus, skip_bad=args.skip_bad, progress=progress)
    _report_skipped(corpus)
    with contextlib.ExitStack() as stack:
        publish = None
        if args.registry is not None:
            # The registry adapter is imported only when asked for: the algorithms need no HTTP.
            from registry.client import RegistryClient
            from registry.publisher import LineagePublisher

            publish = LineagePublisher(stack.enter_context(RegistryClient(args.registry)), settings.lineage)
        result = run_evolve(
            corpus, args.out, settings, initial=initial, force=args.force, progress=progress, publish=publish
        )
    if args.registry is not None:
        result["registry"] = {"url": args.registry, "lineage": settings.lineage}
    print_result(result, as_json=args.json)
    return 0


def cmd_residues(args: argparse.Namespace) -> int:
    from tokenizer_service.corpus import read_corpus
    from tokenizer_service.output_dir import OutputDir
    from tokenizer_service.residue_audit import AUDIT_OUTPUTS, ResidueOptions, audit_residues, write_audit
    from tokenizer_service.validation import load_tokenizer

    options = chosen_settings(args.parser, args, ResidueOptions)
    tokenizer = load_tokenizer(
        args.tokenizer,
        allow_invalid=args.allow_invalid,
        on_invalid=lambda reasons: warn(
            f"{args.tokenizer} fails validation ({'; '.join(reasons)}); auditing it anyway (--allow-invalid)"
        ),
    )
    corpus = read_corpus(args.corpus, skip_bad=args.skip_bad, progress=show_progress(args))
    _report_skipped(corpus)
    texts = corpus.texts
    if not any(texts):
        raise CorpusError(corpus.path, "every document is empty: nothing to audit")
    out = None  # claimed before the audit, so a bad --out fails in a second, not after minutes
    if args.out:
        run = {
            "tokenizer_sha256": tokenizer.sha256,
            "corpus_sha256": corpus.sha256,
            "skipped_records": len(corpus.skipped),
            "options": options.model_dump(),
        }
        out = OutputDir.claim(args.out, command="residues", run=run, outputs=AUDIT_OUTPUTS, force=args.force)
    try:
        audit = audit_residues(tokenizer, texts, options, progress=show_progress(args))
        if out is not None:
            out.replace_files(lambda staging: write_audit(audit, tokenizer, options, staging))
    finally:
        if out is not None:
            out.release()
    summary = dict(audit.summary)
    top = summary.pop("top_residues")
    if args.json:
        print_result(audit.summary, as_json=True)
        return 0
    print_result(summary, as_json=False)
    print("\nmost frequent residues (F1 emitted, F2 inside others, R = F1/(F1+F2), S = entropy):")
    for row in top:
        print(
            f"  {row['id']:>7}  {row['token']!r:<24} F1 {row['f1']:>9.0f}  F2 {row['f2']:>10.0f}"
            f"  R {row['ratio']:.4f}  S {row['entropy']:.2f}"
        )
    return 0


def _min_count(text: str) -> int | str:
    """``--min-count``: a whole number ≥ 0 or ``auto``."""
    return text if text == "auto" else whole(0)(text)


def _add_corpus_options(parser: argparse.ArgumentParser, *, skip_bad: bool) -> None:
    parser.add_argument(
        "--corpus",
        required=True,
        help="JSONL(.gz): an object a line with a string 'text' and an ISO-8601 'ts' (on every line "
        "or none); or .txt(.gz): a document a line",
    )
    if skip_bad:
        parser.add_argument(
            "--skip-bad",
            action="store_true",
            help="skip records that are not valid documents (counted and reported) instead of stopping at the first",
        )


def add_evolve(evolve: argparse.ArgumentParser) -> None:
    from tokenizer_service.evolve import EvolveSettings

    _add_corpus_options(evolve, skip_bad=True)
    evolve.add_argument(
        "--out",
        help="new or empty directory for v0001/, v0002/ ... and steps.jsonl; the same "
        "command again continues a run there",
    )
    evolve.add_argument(
        "--registry",
        help="also (or instead) publish every version to this registry URL, into "
        "the lineage --lineage (TOKMAINT_REGISTRY_TOKEN authorises)",
    )
    evolve.add_argument(
        "--force",
        action="store_true",
        help="replace the files an earlier, different evolve run wrote in --out (never others)",
    )
    evolve.add_argument("--tokenizer", help="initial tokenizer.json (default: train one on the oldest documents)")
    add_settings(evolve, EvolveSettings)
    finish_command(evolve, cmd_evolve)


def add_residues(residues: argparse.ArgumentParser) -> None:
    from tokenizer_service.residue_audit import ResidueOptions

    residues.add_argument("--tokenizer", required=True, help="a BPE tokenizer.json (or a folder holding one)")
    _add_corpus_options(residues, skip_bad=True)
    add_settings(residues, ResidueOptions, skip=("min_count",))
    residues.add_argument(
        "--min-count",
        type=_min_count,
        help=ResidueOptions.model_fields["min_count"].description + " (default: 0; TOKMAINT_RESIDUES_MIN_COUNT)",
    )
    residues.add_argument(
        "--out",
        help="write tokenizer.json (residue-free), diff.json and scores.parquet into this new or empty directory",
    )
    residues.add_argument(
        "--force", action="store_true", help="replace an earlier, different audit's files in --out (never others)"
    )
    residues.add_argument(
        "--allow-invalid",
        action="store_true",
        help="audit a tokenizer that fails validation (say why on stderr) instead of refusing it",
    )
    finish_command(residues, cmd_residues)


def add_bench_residues(p: argparse.ArgumentParser) -> None:
    p.description += (
        " (each tokenizer audited as `tokmaint residues` does, at the paper's thresholds for its "
        "kind, in a process of its own)"
    )
    p.add_argument(
        "--tokenizer",
        required=True,
        action="append",
        help="a BPE tokenizer.json (or a folder holding one); give it once per tokenizer",
    )
    _add_corpus_options(p, skip_bad=False)
    finish_command(p, cmd_bench)


def add_bench_arithmetic(p: argparse.ArgumentParser) -> None:
    from tokenizer_service.bench.arithmetic import ArithmeticSettings

    add_bench_options(p, ArithmeticSettings, cmd_bench)


def add_bench_drift(p: argparse.ArgumentParser) -> None:
    from tokenizer_service.bench.drift import SWEEP_PRICES, DriftSettings

    p.add_argument(
        "--corpus",
        required=True,
        action="append",
        help="JSONL(.gz) with 'text' and 'ts'; give it several times for one row per corpus and the worst case",
    )
    p.add_argument(
        "--sweep",
        type=_prices,
        nargs="?",
        const=list(SWEEP_PRICES),
        metavar="PRICES",
        help="run each corpus with both id prices times each factor (comma-separated; alone: "
        f"{','.join(f'{x:g}' for x in SWEEP_PRICES)}; 0 is the paper's rule) to show "
        "the trade-off",
    )
    p.add_argument(
        "--plot", metavar="DIR", help="write drift.png (gap_closed against ids_stable) into this new or empty directory"
    )
    p.add_argument("--force", action="store_true", help="replace an earlier plot's drift.png in --plot")
    p.add_argument(
        "--compare",
        metavar="REPORT",
        help="an earlier bench drift --json report: its frontiers are drawn dashed in --plot's drift.png",
    )
    add_bench_options(p, DriftSettings, cmd_bench)


def add_bench_throughput(p: argparse.ArgumentParser) -> None:
    from tokenizer_service.bench.throughput import ThroughputSettings

    _add_corpus_options(p, skip_bad=False)
    add_bench_options(p, ThroughputSettings, cmd_bench)
