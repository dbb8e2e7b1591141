"""The byte-level commands (``trainer.byte_level``): ``tokmaint eval bytes``, ``tokmaint eval
next-byte`` and ``tokmaint generate``, over model folders (``tokmaint trainer export``'s) or
trainer checkpoints; several ``--model``: their byte-level ensemble. ``--zip2zip``: one model
reading and writing LZW hypertokens (``trainer.zip2zip``; ``tokmaint trainer zip2zip``'s folders)."""

from __future__ import annotations

import argparse

from tokmaint.commands import add_sample_corpus_option
from tokmaint.options import add_bench_options, chosen_settings, finish_command, free_text
from tokmaint.output import print_result, show_progress


def _models(args: argparse.Namespace) -> list:
    from trainer.byte_level import ByteLevelModel

    if getattr(args, "max_merge", None) is not None:
        args.parser.error("--max-merge goes with --zip2zip")
    return [ByteLevelModel.load(path) for path in args.model]


def _zip2zip_model(args: argparse.Namespace) -> tuple:
    from trainer.zip2zip import Zip2zipLM

    if len(args.model) > 1:
        args.parser.error("--zip2zip reads one --model (an ensemble's members would each make their own hypertokens)")
    return Zip2zipLM.load(args.model[0], max_merge=args.max_merge)


def _scored_texts(args: argparse.Namespace) -> list[str]:
    """``--corpus``'s first ``--max-documents`` documents; refused when none has a byte to score
    (bits per byte of no bytes would read as a figure)."""
    from tokenizer_service.corpus import read_corpus
    from tokenizer_service.errors import CorpusError

    texts = read_corpus(args.corpus).texts[: args.max_documents]
    if not any(texts):
        raise CorpusError(args.corpus, "no document with a byte to score")
    return texts


def _eval_zip2zip(args: argparse.Namespace) -> int:
    from trainer.zip2zip import bits_per_byte, byte_lengths

    model, tokenizer = _zip2zip_model(args)
    texts = [args.text] if args.corpus is None else _scored_texts(args)
    fits = model.positions - 1  # what one context reads after the bos
    encoded = tokenizer.encode_batch(texts)
    result = bits_per_byte(model, [i[:fits] for i in encoded if i], byte_lengths(tokenizer))
    print_result(
        {
            "documents": sum(map(bool, encoded)),
            "truncated": sum(len(i) > fits for i in encoded),
            **result,
            "max_merge": model.max_merge,
        },
        as_json=args.json,
    )
    return 0


def cmd_eval_bytes(args: argparse.Namespace) -> int:
    from trainer.byte_level import ensemble_log_prob, evaluate_texts, fit_text

    if (args.text is None) == (args.corpus is None):
        args.parser.error("evaluate one of --text TEXT or --corpus PATH")
    if args.text == "":
        args.parser.error("argument --text: empty: it has no bytes to score")
    if args.max_documents is not None and args.corpus is None:
        args.parser.error("--max-documents goes with --corpus")
    if args.zip2zip:
        return _eval_zip2zip(args)
    models = _models(args)
    if args.corpus is not None:
        texts = _scored_texts(args)
        print_result(evaluate_texts(models, texts, progress=show_progress(args)), as_json=args.json)
        return 0
    if fit_text(models, args.text) != args.text:
        args.parser.error(
            "--text is longer than the model reads in one context: give a shorter one, or --corpus "
            "(documents are cut to fit there)"
        )
    n_bytes = len(args.text.encode("utf-8"))
    if len(models) == 1:
        result = models[0].prefix(args.text)
        print_result(
            {
                "log_prob": result.log_prob,
                "log_prob_canonical": result.log_prob_canonical,
                "bits_per_byte": result.bits_per_byte,
                "bits_per_byte_canonical": result.bits_per_byte_canonical,
                "bytes": n_bytes,
                "model_tokens": result.model_tokens,
                "leaves": result.leaves,
            },
            as_json=args.json,
        )
        return 0
    log_prob, evaluated = ensemble_log_prob(models, args.text)
    each = [model.prefix(args.text) for model in models]
    print_result(
        {
            "log_prob": log_prob,
            "bits_per_byte": -log_prob / 0.6931471805599453 / max(1, n_bytes),
            "bytes": n_bytes,
            "model_tokens": evaluated,
            "models": [
                {
                    "model": path,
                    "log_prob": r.log_prob,
                    "bits_per_byte": r.bits_per_byte,
                    "log_prob_canonical": r.log_prob_canonical,
                }
                for path, r in zip(args.model, each)
            ],
        },
        as_json=args.json,
    )
    return 0


def cmd_eval_next_byte(args: argparse.Namespace) -> int:
    from trainer.byte_level import ensemble_next_byte

    distribution = ensemble_next_byte(_models(args), args.text)
    top = sorted(range(256), key=lambda b: -distribution[b])[: args.top]
    print_result(
        {
            "distribution": {str(b): float(p) for b, p in enumerate(distribution)},
            "top": [
                {"byte": b, "char": chr(b) if 32 <= b < 127 else f"\\x{b:02x}", "p": float(distribution[b])}
                for b in top
            ],
        }
        if args.json
        else {"top": {(chr(b) if 32 < b < 127 else f"\\x{b:02x}"): float(distribution[b]) for b in top}},
        as_json=args.json,
    )
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    extra = {}
    if args.zip2zip:
        from trainer.zip2zip import generate as generate_zip2zip

        model, tokenizer = _zip2zip_model(args)
        made = generate_zip2zip(
            model, tokenizer, args.prompt, max_bytes=args.max_bytes, seed=args.seed, progress=show_progress(args)
        )
        out, generated = made.data, made.codes[made.prompt_codes :]
        extra = {
            "codes": len(generated),
            "hypertokens": sum(c >= model.rows for c in generated),
            "base_tokens": len(made.base_ids),
            "max_merge": model.max_merge,
        }
    else:
        from trainer.byte_level import generate

        out = generate(
            _models(args), args.prompt, max_bytes=args.max_bytes, seed=args.seed, progress=show_progress(args)
        )
    continuation = out.decode("utf-8", errors="replace")
    if args.json:
        print_result({"prompt": args.prompt, "continuation": continuation, "bytes": len(out), **extra}, as_json=True)
    else:
        print(args.prompt + continuation)
    return 0


def _add_models(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        action="append",
        required=True,
        metavar="DIR",
        help="a model folder (tokmaint trainer export) or a trainer checkpoint; give it several times "
        "for the byte-level ensemble of the models (their next-byte distributions averaged)",
    )


def _add_zip2zip(parser: argparse.ArgumentParser, what: str) -> None:
    from tokenizer_service.settings import whole

    parser.add_argument(
        "--zip2zip",
        action="store_true",
        help=f"{what} with LZW hypertokens (one --model: a folder "
        "tokmaint trainer zip2zip wrote, or any model with a mean-pooling hyper-encoder)",
    )
    parser.add_argument(
        "--max-merge",
        type=whole(1, 64),
        help="with --zip2zip: most base tokens a hypertoken (default: the folder's, or 3)",
    )


def add_eval(parser: argparse.ArgumentParser) -> None:
    from tokenizer_service.settings import whole

    commands = parser.add_subparsers(dest="eval_command", required=True, metavar="COMMAND")
    evaluate = commands.add_parser(
        "bytes",
        help="the exact probability that the model's text begins with TEXT's bytes (ByteSampler), and bits per byte",
    )
    _add_models(evaluate)
    evaluate.add_argument("--text", type=free_text, help="the text (UTF-8, at least one byte)")
    evaluate.add_argument("--corpus", help="or every document of a JSONL(.gz) or .txt(.gz) corpus")
    evaluate.add_argument(
        "--max-documents", type=whole(1), help="with --corpus: its first N documents; a whole number ≥ 1 (default: all)"
    )
    _add_zip2zip(
        evaluate,
        "score each text's codes (a document a context, from the start of the text) in bits per byte of the same bytes",
    )
    finish_command(evaluate, cmd_eval_bytes)
    next_byte = commands.add_parser("next-byte", help="the distribution of the byte that follows TEXT")
    _add_models(next_byte)
    next_byte.add_argument(
        "--text", type=free_text, required=True, help="the text so far (UTF-8; it may end inside a word, or be empty)"
    )
    next_byte.add_argument(
        "--top",
        type=whole(1, 256),
        default=10,
        help="the most likely bytes shown; a whole number in [1, 256] (default: 10)",
    )
    finish_command(next_byte, cmd_eval_next_byte, json_help="print JSON (every byte's probability)")


def add_generate(parser: argparse.ArgumentParser) -> None:
    from tokenizer_service.settings import whole

    _add_models(parser)
    parser.add_argument(
        "--prompt",
        type=free_text,
        required=True,
        help="the text to continue (UTF-8; it may end inside a word, or be empty)",
    )
    parser.add_argument(
        "--max-bytes", type=whole(1), default=64, help="bytes to sample; a whole number ≥ 1 (default: 64)"
    )
    parser.add_argument("--seed", type=whole(0), default=0, help="the sampler's seed; a whole number ≥ 0 (default: 0)")
    _add_zip2zip(
        parser,
        "sample codes after the prompt's tokens (it ends on a token boundary there), the codebook "
        "growing with the output, and print their text",
    )
    finish_command(parser, cmd_generate)


def cmd_bench_lifelong(args: argparse.Namespace) -> int:
    from tokenizer_service.output_dir import OutputDir
    from trainer.lifelong import LifelongBenchSettings, run_lifelong_bench

    settings = chosen_settings(args.parser, args, LifelongBenchSettings)
    if args.plot is None:
        print_result(run_lifelong_bench(args.corpus, settings, progress=show_progress(args)), as_json=args.json)
        return 0
    # Claimed before the benchmark, which takes minutes: a folder it may not draw into fails at once.
    run = {"corpus": args.corpus, **settings.model_dump(mode="json")}  # flat: a refusal names the option that differs
    reports: list[dict] = []
    with OutputDir.claim(
        args.plot, command="bench lifelong", run=run, outputs=[r"lifelong\.png"], force=args.force, option="--plot"
    ) as out:
        out.replace_files(
            lambda staging: reports.append(
                run_lifelong_bench(args.corpus, settings, plot=staging, progress=show_progress(args))
            )
        )
    print_result({**reports[0], "plot": str(out.path / "lifelong.png")}, as_json=args.json)
    return 0


def add_bench_lifelong(parser: argparse.ArgumentParser) -> None:
    from trainer.lifelong import LifelongBenchSettings

    add_sample_corpus_option(parser, what="a timestamped JSONL(.gz) stream")
    parser.add_argument(
        "--plot",
        metavar="DIR",
        help="draw lifelong.png (bits per byte by part) into this folder: new, empty, or one this "
        "benchmark drew into with the same options",
    )
    parser.add_argument("--force", action="store_true", help="redraw a --plot folder of a run with other options")
    add_bench_options(parser, LifelongBenchSettings, cmd_bench_lifelong)


def cmd_bench_bytelevel(args: argparse.Namespace) -> int:
    from trainer.bytelevel_bench import BytelevelBenchSettings, run_bytelevel_bench

    settings = chosen_settings(args.parser, args, BytelevelBenchSettings)
    print_result(run_bytelevel_bench(args.corpus, settings, progress=show_progress(args)), as_json=args.json)
    return 0


def add_bench_bytelevel(parser: argparse.ArgumentParser) -> None:
    from trainer.bytelevel_bench import BytelevelBenchSettings

    add_sample_corpus_option(parser, what="a JSONL(.gz) or .txt(.gz) corpus")
    add_bench_options(parser, BytelevelBenchSettings, cmd_bench_bytelevel)


def cmd_bench_zip2zip(args: argparse.Namespace) -> int:
    from trainer.zip2zip_bench import Zip2zipBenchSettings, run_zip2zip_bench

    settings = chosen_settings(args.parser, args, Zip2zipBenchSettings)
    print_result(
        run_zip2zip_bench(
            args.corpus, args.tokenizer, settings, max_merges=args.max_merge, progress=show_progress(args)
        ),
        as_json=args.json,
    )
    return 0


def add_bench_zip2zip(parser: argparse.ArgumentParser) -> None:
    from tokenizer_service.settings import whole
    from trainer.zip2zip_bench import Zip2zipBenchSettings

    parser.add_argument("--corpus", required=True, help="a JSONL(.gz) or .txt(.gz) corpus")
    parser.add_argument("--tokenizer", required=True, help="the base tokenizer.json (or a folder holding one)")
    parser.add_argument(
        "--max-merge",
        type=whole(1, 64),
        action="append",
        help="most base tokens a hypertoken (M); give it several times for a row each (default: 3)",
    )
    add_bench_options(parser, Zip2zipBenchSettings, cmd_bench_zip2zip)
