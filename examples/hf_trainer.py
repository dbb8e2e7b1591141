"""Follow a lineage from a ``transformers.Trainer`` script: an ordinary one, and two lines of
tokmaint (``trainer.callbacks.TokmaintCallback``, and its collator of raw texts given to the
Trainer). Checkpoints in --out hold their version; ``save_model`` writes the version's
tokenizer.json beside the weights.

    python examples/hf_trainer.py --registry http://127.0.0.1:8000 --lineage git --steps 200 --out out/hf
    python examples/hf_trainer.py ... --steps 400 --resume out/hf/checkpoint-200
"""

from __future__ import annotations

import argparse
import logging

from transformers import GPT2LMHeadModel, Trainer, TrainingArguments

from tokenizer_service.corpus import read_corpus
from trainer.callbacks import TokmaintCallback
from trainer.loop import tiny_gpt2_config

log = logging.getLogger("examples.hf_trainer")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Train a tiny GPT-2 with transformers.Trainer, following a lineage.")
    parser.add_argument("--registry", required=True, help="the registry's URL")
    parser.add_argument("--lineage", required=True, help="the lineage to follow")
    parser.add_argument("--data", default="data/git-commits-sample.jsonl.gz", help="the corpus to train on")
    parser.add_argument("--steps", type=int, default=200, help="optimizer steps in all")
    parser.add_argument("--batch-size", type=int, default=8, help="texts a step")
    parser.add_argument("--seq-len", type=int, default=128, help="ids a text, at most")
    parser.add_argument("--save-steps", type=int, default=100, help="steps between two checkpoints")
    parser.add_argument("--out", default="out/hf-trainer", help="checkpoints, then the model and its version")
    parser.add_argument("--resume", help="a checkpoint folder of --out to resume from")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    texts = [{"text": doc.text} for doc in read_corpus(args.data).documents]
    callback = TokmaintCallback(args.registry, args.lineage, checkpoint=args.resume)  # tokmaint's first line
    model = GPT2LMHeadModel(tiny_gpt2_config(callback.tokenizer.id_space))
    training = TrainingArguments(
        output_dir=args.out,
        max_steps=args.steps,
        per_device_train_batch_size=args.batch_size,
        learning_rate=1e-3,
        save_steps=args.save_steps,
        logging_steps=args.save_steps,
        report_to=[],
        disable_tqdm=True,
    )
    trainer = Trainer(
        model=model,
        args=training,
        train_dataset=texts,
        callbacks=[callback],
        data_collator=callback.collator(seq_len=args.seq_len),
    )  # and its second
    try:
        trainer.train(resume_from_checkpoint=args.resume)
    finally:
        callback.close()
    trainer.save_model(args.out)
    log.info(
        "ended on %s version %s after %s steps: the model and its version in %s",
        args.lineage,
        callback.version,
        trainer.state.global_step,
        args.out,
    )


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line for each of the registry watch's long polls
    main()
