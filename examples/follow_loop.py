"""Follow a lineage from a plain PyTorch loop: a tiny GPT-2 trained on a corpus, each version the
registry publishes applied between two optimizer steps, every batch encoded in the model's version
(``trainer.follow.LineageFollower``).

    python examples/follow_loop.py --registry http://127.0.0.1:8000 --lineage git --steps 200
"""

from __future__ import annotations

import argparse
import logging

import torch
from transformers import GPT2LMHeadModel

from tokenizer_service.corpus import read_corpus
from trainer.follow import LineageFollower
from trainer.loop import tiny_gpt2_config

log = logging.getLogger("examples.follow_loop")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Train a tiny GPT-2 that follows a lineage's versions.")
    parser.add_argument("--registry", required=True, help="the registry's URL")
    parser.add_argument("--lineage", required=True, help="the lineage to follow")
    parser.add_argument("--data", default="data/git-commits-sample.jsonl.gz", help="the corpus to train on")
    parser.add_argument("--steps", type=int, default=200, help="optimizer steps")
    parser.add_argument("--batch-size", type=int, default=8, help="texts a step")
    parser.add_argument("--seq-len", type=int, default=128, help="ids a text, at most")
    parser.add_argument("--out", help="a checkpoint written at the end, with the version it was trained with")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    texts = [doc.text for doc in read_corpus(args.data).documents]
    with LineageFollower(args.registry, args.lineage) as follower:
        model = GPT2LMHeadModel(tiny_gpt2_config(follower.tokenizer.id_space))
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        log.info("training %s version %s", args.lineage, follower.version)
        for step in range(args.steps):
            batch = [texts[(step * args.batch_size + k) % len(texts)] for k in range(args.batch_size)]
            model = follower.between_steps(model, optimizer)  # a newer version is applied here
            inputs, labels = follower.encode(batch, seq_len=args.seq_len)  # in the version the model has
            loss = model(input_ids=inputs, labels=labels).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        if args.out:  # a resume starts its LineageFollower at the checkpoint's version (version=...)
            torch.save(
                {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "tokenizer": follower.state_dict()},
                args.out,
            )
        log.info("ended on %s version %s after %s steps", args.lineage, follower.version, args.steps)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line for each of the registry watch's long polls
    main()
