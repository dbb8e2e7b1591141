"""Follow a lineage from a ``transformers.Trainer`` script: an ordinary one, and two lines of
tokmaint (``trainer.callbacks.TokmaintCallback``, and its collator of raw texts given to the
Trainer). Its options are ``TrainingArguments``' own and the four of :class:`FollowArguments`.
Checkpoints in --output_dir hold their version; ``save_model`` writes the version's tokenizer.json
beside the weights.

    python examples/hf_trainer.py --registry http://127.0.0.1:8000 --lineage git --max_steps 200
    python examples/hf_trainer.py ... --max_steps 400 --resume_from_checkpoint out/hf-trainer/checkpoint-200
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from transformers import GPT2LMHeadModel, HfArgumentParser, Trainer, TrainingArguments

from tokenizer_service.corpus import read_corpus
from trainer.callbacks import TokmaintCallback
from trainer.loop import tiny_gpt2_config

log = logging.getLogger("examples.hf_trainer")


@dataclass
class FollowArguments:
    """The lineage the model follows, and the texts it trains on."""

    registry: str = field(metadata={"help": "the registry's URL"})
    lineage: str = field(metadata={"help": "the lineage to follow"})
    data: str = field(default="data/git-commits-sample.jsonl.gz", metadata={"help": "the corpus to train on"})
    seq_len: int = field(default=128, metadata={"help": "ids a text, at most"})


def parse_args(argv: list[str] | None = None) -> tuple[FollowArguments, TrainingArguments]:
    parser = HfArgumentParser((FollowArguments, TrainingArguments))
    # A tiny model from scratch learns at a higher rate than TrainingArguments' fine-tuning
    # default; progress goes to the log, without tqdm's bar.
    parser.set_defaults(
        output_dir="out/hf-trainer",
        max_steps=200,
        learning_rate=1e-3,
        save_steps=100,
        logging_steps=100,
        disable_tqdm=True,
    )
    return parser.parse_args_into_dataclasses(argv)


def main(argv: list[str] | None = None) -> None:
    follow, training = parse_args(argv)
    texts = [{"text": doc.text} for doc in read_corpus(follow.data).documents]
    resume = training.resume_from_checkpoint
    callback = TokmaintCallback(follow.registry, follow.lineage, checkpoint=resume)  # tokmaint's first line
    model = GPT2LMHeadModel(tiny_gpt2_config(callback.tokenizer.id_space))
    trainer = Trainer(
        model=model,
        args=training,
        train_dataset=texts,
        callbacks=[callback],
        data_collator=callback.collator(seq_len=follow.seq_len),
    )  # and its second
    try:
        trainer.train(resume_from_checkpoint=resume)
    finally:
        callback.close()
    trainer.save_model(training.output_dir)
    log.info(
        "ended on %s version %s after %s steps: the model and its version in %s",
        follow.lineage,
        callback.version,
        trainer.state.global_step,
        training.output_dir,
    )


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line for each of the registry watch's long polls
    main()
