"""``tokmaint``: the command line. Every command prints a table, or JSON with ``--json``."""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from tqdm import tqdm


def _flatten(data: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """Nested dict to dotted rows: {"a": {"b": 1}} -> [("a.b", 1)]."""
    rows = []
    for key, value in data.items():
        name = f"{prefix}{key}"
        rows.extend(_flatten(value, name + ".") if isinstance(value, dict) else [(name, value)])
    return rows


def print_result(result: dict[str, Any], *, as_json: bool) -> None:
    if as_json:
        print(json.dumps(result, indent=2))
        return
    rows = _flatten(result)
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        shown = f"{value:.4f}" if isinstance(value, float) else str(value)
        print(f"{key:<{width}}  {shown}")


def _show_progress(args: argparse.Namespace) -> bool:
    """Progress bars go to an interactive stderr, never under ``--json``."""
    return not args.json and sys.stderr.isatty()


def _add_settings(parser: argparse.ArgumentParser, settings_type: type) -> None:
    """One ``--option`` per field of a settings dataclass, defaulting to the dataclass default."""
    for f in fields(settings_type):
        kind = type(f.default)
        parser.add_argument(f"--{f.name.replace('_', '-')}", type=kind, default=None,
                            help=f"default {f.default}")


def _settings(args: argparse.Namespace, settings_type: type):
    chosen = {f.name: getattr(args, f.name) for f in fields(settings_type) if getattr(args, f.name) is not None}
    return replace(settings_type(), **chosen)


def cmd_bench(args: argparse.Namespace) -> int:
    progress = _show_progress(args)
    if args.bench == "arithmetic":
        from tokenizer_service.bench.arithmetic import ArithmeticSettings, run_arithmetic

        result = run_arithmetic(_settings(args, ArithmeticSettings), progress=progress)
    elif args.bench == "drift":
        from tokenizer_service.bench.drift import DriftSettings, run_drift

        result = run_drift(args.corpus, _settings(args, DriftSettings), progress=progress)
    else:
        from tokenizer_service.bench.throughput import ThroughputSettings, run_throughput

        result = run_throughput(args.corpus, _settings(args, ThroughputSettings), progress=progress)
    print_result(result, as_json=args.json)
    return 0


def _write_directory(final: Path, write: Callable[[Path], None]) -> None:
    """Fill a directory atomically: ``write`` fills a staging directory next to ``final``, which
    then replaces ``final`` in one rename, so a crash never leaves a half-written one."""
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    try:
        write(staging)
        if final.exists():
            shutil.rmtree(final)
        os.replace(staging, final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _write_version(out: Path, version: int, tokenizer, diff=None) -> None:
    """One version directory: tokenizer.json, plus diff.json after the first."""

    def write(staging: Path) -> None:
        tokenizer.save(staging / "tokenizer.json")
        if diff is not None:
            (staging / "diff.json").write_text(diff.to_json(), encoding="utf-8")

    _write_directory(out / f"v{version:04d}", write)


def cmd_evolve(args: argparse.Namespace) -> int:
    from tokenizer_service.bpe import BPETokenizer
    from tokenizer_service.corpus import batches, read_corpus
    from tokenizer_service.tedtok import TedTok, TedTokConfig
    from tokenizer_service.validation import validate

    docs = read_corpus(args.corpus)
    if args.tokenizer:
        initial = BPETokenizer.from_file(args.tokenizer)
        stream = docs
    else:
        n_init = max(1, round(args.init_share * len(docs)))
        initial = BPETokenizer.train([d.text for d in docs[:n_init]], vocab_size=args.vocab_size)
        stream = docs[n_init:]
    validate(initial).raise_for_reasons()
    total = -(-len(stream) // args.step_docs)
    config = TedTokConfig.for_schedule(
        total, warmup=args.warmup, freeze_last=args.freeze_last, alpha=args.alpha, beta=args.beta,
        batch_size=args.batch_size, interval=args.interval, recycle_ids=not args.append_ids,
        base_token_cost=args.base_token_cost,
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    _write_version(out, 1, initial)
    tedtok = TedTok(initial, config=config, lineage=args.lineage)
    parent = initial
    with open(out / "steps.jsonl", "w", encoding="utf-8") as log, tqdm(
        total=total, desc="evolve", unit="step", disable=not _show_progress(args)
    ) as bar:
        for texts in batches(stream, args.step_docs):
            revision = tedtok.observe_texts(texts)
            counts = tedtok.last_counts
            log.write(json.dumps({"step": tedtok.store.step, "version": tedtok.version,
                                  "bytes_per_token": counts.bytes_per_token}) + "\n")
            if revision is not None:
                validate(revision.tokenizer, parent=parent).raise_for_reasons()
                _write_version(out, revision.diff.version, revision.tokenizer, revision.diff)
                parent = revision.tokenizer
            bar.update()
            bar.set_postfix(bpt=f"{counts.bytes_per_token:.3f}", version=tedtok.version)
    print_result({
        "steps": total,
        "versions": tedtok.version,
        "tokens_changed": sum(len(r.diff.entries) for r in tedtok.revisions),
        "bytes_per_token": {"first_step": json.loads((out / "steps.jsonl").open().readline())["bytes_per_token"],
                            "last_step": tedtok.last_counts.bytes_per_token},
        "revision_seconds": tedtok.revision_seconds,
        "out": str(out),
    }, as_json=args.json)
    return 0


def cmd_residues(args: argparse.Namespace) -> int:
    from tokenizer_service.bpe import BPETokenizer
    from tokenizer_service.corpus import read_corpus
    from tokenizer_service.residue_audit import ResidueOptions, audit_residues, write_audit

    tokenizer = BPETokenizer.from_file(args.tokenizer)
    texts = [d.text for d in read_corpus(args.corpus)]
    if args.min_count != "auto" and not args.min_count.isdigit():
        raise ValueError(f"--min-count must be a whole number or 'auto', got {args.min_count!r}")
    min_count = args.min_count if args.min_count == "auto" else int(args.min_count)
    options = ResidueOptions(r=args.r, s=args.s, log_base=args.log_base, scope=args.scope, min_count=min_count,
                             kind=None if args.kind == "auto" else args.kind)
    audit = audit_residues(tokenizer, texts, options, progress=_show_progress(args))
    if args.out:
        _write_directory(Path(args.out), lambda staging: write_audit(audit, tokenizer, options, staging))
    summary = dict(audit.summary)
    top = summary.pop("top_residues")
    if args.json:
        print_result(audit.summary, as_json=True)
        return 0
    print_result(summary, as_json=False)
    print("\nmost frequent residues (F1 emitted, F2 inside others, R = F1/(F1+F2), S = entropy):")
    for row in top:
        print(f"  {row['id']:>7}  {row['token']!r:<24} F1 {row['f1']:>9.0f}  F2 {row['f2']:>10.0f}"
              f"  R {row['ratio']:.4f}  S {row['entropy']:.2f}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from tokenizer_service.bench.arithmetic import ArithmeticSettings
    from tokenizer_service.bench.drift import DriftSettings
    from tokenizer_service.bench.throughput import ThroughputSettings

    parser = argparse.ArgumentParser(prog="tokmaint", description="Lifelong BPE tokenizer maintenance.")
    sub = parser.add_subparsers(dest="command", required=True)

    evolve = sub.add_parser("evolve", help="replay a timestamped corpus through Ted-Tok, writing every version")
    evolve.add_argument("--corpus", required=True, help="JSONL(.gz) with 'ts' and 'text' per line")
    evolve.add_argument("--out", required=True, help="output directory: v0001/, v0002/ ... and steps.jsonl")
    evolve.add_argument("--tokenizer", help="initial tokenizer.json (default: train one on the oldest documents)")
    evolve.add_argument("--vocab-size", type=int, default=4096, help="vocabulary of the trained initial tokenizer")
    evolve.add_argument("--init-share", type=float, default=0.2, help="share of oldest documents to train it on")
    evolve.add_argument("--step-docs", type=int, default=64, help="documents per time step")
    evolve.add_argument("--alpha", type=float, default=0.01, help="EMA smoothing factor")
    evolve.add_argument("--beta", type=float, default=1.2, help="margin: add only if τ_pair > β·τ_token[sink]")
    evolve.add_argument("--batch-size", type=int, default=20, help="adds+deletes per revision (K)")
    evolve.add_argument("--interval", type=int, default=10, help="steps between revisions (Δ)")
    evolve.add_argument("--warmup", type=float, default=0.03, help="share of steps before the first revision")
    evolve.add_argument("--freeze-last", type=float, default=0.0, help="share of final steps without revisions")
    evolve.add_argument("--base-token-cost", type=float, default=2.5e-5,
                        help="share of the stream's tokens a swap must save to delete a pre-trained token (0: paper)")
    evolve.add_argument("--append-ids", action="store_true", help="give new tokens fresh ids instead of recycling")
    evolve.add_argument("--lineage", default="default", help="lineage name recorded in every diff")
    evolve.add_argument("--json", action="store_true", help="print JSON")
    evolve.set_defaults(func=cmd_evolve)

    residues = sub.add_parser("residues", help="LiteToken: find a tokenizer's residues on a corpus and remove them")
    residues.add_argument("--tokenizer", required=True, help="a BPE tokenizer.json")
    residues.add_argument("--corpus", required=True, help="JSONL(.gz) with 'text' per line, or .txt (a document a line)")
    residues.add_argument("--r", type=float, help="FI ratio threshold (default: 0.15 classic BPE, 0.05 tiktoken-style)")
    residues.add_argument("--s", type=float, help="entropy threshold (default: 4.0 classic BPE, 3.5 tiktoken-style)")
    residues.add_argument("--kind", choices=["auto", "classic", "tiktoken"], default="auto",
                          help="which of the paper's threshold pairs r, s apply (auto: tiktoken-style when the "
                               "file has ignore_merges or several merges for one token; GPT-4o's has neither)")
    residues.add_argument("--log-base", type=float, default=math.e, help="entropy log base (default e: nats)")
    residues.add_argument("--scope", choices=["ascii", "all"], default="ascii",
                          help="tokens the share counts: all-ASCII tokens (the paper's) or all")
    residues.add_argument("--min-count", default="0",
                          help="evidence a test needs to flag a token: an int, or 'auto' = ceil(log_base^s); 0: paper")
    residues.add_argument("--out", help="write tokenizer.json (residue-free), diff.json and scores.parquet here")
    residues.add_argument("--json", action="store_true", help="print JSON")
    residues.set_defaults(func=cmd_residues)

    bench = sub.add_parser("bench", help="reproducible benchmarks")
    benches = bench.add_subparsers(dest="bench", required=True)
    for name, settings_type, needs_corpus, summary in (
        ("arithmetic", ArithmeticSettings, False, "Ted-Tok Table 2, synthetic arithmetic"),
        ("drift", DriftSettings, True, "Old / New / Ted-Tok on a timestamped corpus"),
        ("throughput", ThroughputSettings, True, "stats update vs raw encoding; revision latency"),
    ):
        p = benches.add_parser(name, help=summary)
        if needs_corpus:
            p.add_argument("--corpus", required=True, help="JSONL(.gz) with 'ts' and 'text' per line")
        _add_settings(p, settings_type)
        p.add_argument("--json", action="store_true", help="print JSON")
        p.set_defaults(func=cmd_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError) as exc:
        print(f"tokmaint: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
