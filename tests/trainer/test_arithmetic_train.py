"""``tokmaint bench arithmetic-train`` (Ted-Tok Table 1, SA row): the exact-match evaluation on
models whose answers are known, and a tiny schedule run twice (through the command line too)."""

import json

import numpy as np
import pytest
import torch
from torch import nn

from tokenizer_service.bench.arithmetic import arithmetic_dataset
from tokenizer_service.bpe import BPETokenizer
from trainer.arithmetic_train import _Schedule, exact_match, prompt_length, run_one
from trainer.config import STRATEGIES, ArithmeticTrainSettings


class Answers(nn.Module):
    """A model that continues ``example``'s tokens (then the end-of-example id), ``wrong`` after
    ``slip`` tokens: the evaluation must score it by what it generates."""

    def __init__(self, tokenizer: BPETokenizer, example: str, eos: int, *, slip: int | None = None) -> None:
        super().__init__()
        self.ids, self.eos, self.slip = tokenizer.encode(example) + [eos], eos, slip
        self.rows = eos + 1

    def forward(self, input_ids: torch.Tensor):
        n = input_ids.shape[1]
        target = self.ids[n] if n < len(self.ids) else self.eos
        if self.slip is not None and n >= self.slip:
            target = (target + 1) % self.eos  # another token
        logits = torch.zeros((*input_ids.shape, self.rows))
        logits[:, -1, target] = 1.0
        return type("Output", (), {"logits": logits})()


@pytest.fixture(scope="module")
def old_tokenizer():
    return BPETokenizer.train(arithmetic_dataset(50), vocab_size=50, byte_level=False)


def test_the_prompt_ends_where_the_answer_begins(old_tokenizer):
    tokens_spanning = 0
    for example in ["12+5=17", "50-49=1", "7+3=10", "44+44=88"]:
        ids = old_tokenizer.encode(example)
        k = prompt_length(old_tokenizer, ids, example)
        prompt = old_tokenizer.decode(ids[:k])
        assert example.startswith(prompt) and len(prompt) <= example.index("=") + 1
        assert len(old_tokenizer.decode(ids[: k + 1])) > example.index("=") + 1  # the next token is the answer's
        tokens_spanning += len(prompt) < example.index("=") + 1
    assert tokens_spanning  # some "=d" token starts the answer with this tokenizer


@pytest.mark.parametrize("example", ["12+5=17", "50-49=1", "199+200=399"])
def test_exact_match_scores_what_the_model_generates(old_tokenizer, example):
    eos = old_tokenizer.id_space
    ids = old_tokenizer.encode(example)
    k = prompt_length(old_tokenizer, ids, example)
    assert exact_match(Answers(old_tokenizer, example, eos), old_tokenizer, [example], eos=eos) == 1.0
    for slip in (k, len(ids) - 1, len(ids)):  # the answer's first or last token wrong, or no end
        assert exact_match(Answers(old_tokenizer, example, eos, slip=slip), old_tokenizer, [example], eos=eos) == 0.0


def test_a_tiny_schedule_gives_the_same_results_in_workers_and_reports_every_key(capsys):
    from tokmaint.cli import main

    # n_embd 8: a step costs ~40% of the default width's, and the test's subject is the schedule.
    options = {"epochs": 1, "batch": 1024, "validation": 100, "interval": 10, "window": 5, "lr": 3e-3, "n_embd": 8}
    settings = ArithmeticTrainSettings(seeds=1, **options)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in a worker: the sums' order, and so the bits, depend on the threads
    try:
        tedtok = run_one(settings, 0, "tedtok")
    finally:
        torch.set_num_threads(threads)
    assert tedtok["revisions"] >= 2
    jumps = tedtok["loss_jump"]
    assert {len(v) for v in jumps.values()} == {tedtok["revisions"]}
    assert jumps["hyper"] != jumps["parents_mean"]  # the copies train apart from the run
    # At the first revision a copy trains as a run of its strategy would: the same jump. The
    # schedule's first half holds the first revisions: the rest of that run is not needed.
    torch.set_num_threads(1)
    try:
        other_settings = ArithmeticTrainSettings(seeds=1, strategy="parents_mean", **options)
        other = run_one(other_settings, 0, "tedtok", steps=tedtok["steps"] // 2)
    finally:
        torch.set_num_threads(threads)
    assert other["steps"] == tedtok["steps"] // 2 and other["revisions"] >= 2
    assert {s: v[0] for s, v in other["loss_jump"].items()} == {s: v[0] for s, v in jumps.items()}
    # From the second revision on, the two runs' own models differ (each took its own strategy).
    assert settings.strategy == "hyper" and other["loss_jump"]["hyper"][1] != jumps["hyper"][1]

    argv = ["bench", "arithmetic-train", "--seeds", "1", "--workers", "2", "--json"]
    for name, value in options.items():
        argv += [f"--{name.replace('_', '-')}", str(value)]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result["exact_match"]) == {"old", "new", "tedtok"}
    assert result["exact_match"]["tedtok"] == tedtok["exact_match"]
    assert result["loss_jump"] == {s: pytest.approx(float(np.mean(jumps[s]))) for s in STRATEGIES}
    assert result["seeds"] == 1 and result["seconds"] > 0 and result["revisions_per_seed"] == [tedtok["revisions"]]


def test_a_prompt_that_leaves_out_the_end_of_the_question_is_held_to_it():
    # "0=3" spans the question's end and the answer's start: the prompt is "20+1", and a model
    # that would rather say "1" (20+11=...) must still be held to the question's "0=".
    tokenizer = BPETokenizer(
        vocab={c: i for i, c in enumerate("0123456789+=")} | {"0=": 12, "0=3": 13},
        merges=[("0", "="), ("0=", "3")],
        pipeline={"decoder": {"type": "Fuse"}},
    )
    example, eos = "20+10=30", tokenizer.id_space
    ids = tokenizer.encode(example)
    assert [tokenizer.id_to_token[i] for i in ids[: prompt_length(tokenizer, ids, example)]] == ["2", "0", "+", "1"]

    class PrefersAnotherQuestion(Answers):
        def forward(self, input_ids):
            output = super().forward(input_ids)
            if input_ids.shape[1] == 4:
                output.logits[:, -1, tokenizer.vocab["1"]] = 2.0  # above the right "0=3"
            return output

    assert exact_match(PrefersAnotherQuestion(tokenizer, example, eos), tokenizer, [example], eos=eos) == 1.0
    wrong_answer = Answers(tokenizer, example, eos, slip=5)  # "0=3" then not "0"
    assert exact_match(wrong_answer, tokenizer, [example], eos=eos) == 0.0


def _churn(settings: ArithmeticTrainSettings, seed: int) -> tuple[int, int, float]:
    """Ted-Tok's revisions over a seed's schedule, how many of them removed a token that an
    earlier one added, and the final version's bytes/token on the held-out examples."""
    plan = _Schedule.for_seed(settings, seed)
    tedtok, word_ids = plan.tedtok(settings)
    added: set[str] = set()
    revisions = churn = 0
    for rows in plan.order:
        if revision := tedtok.observe_words(word_ids[rows], np.ones(len(rows))):
            revisions += 1
            churn += sum(token in added for token in revision.removed)
            added |= set(revision.added)
    return revisions, churn, tedtok.tokenizer.bytes_per_token(plan.held_out)


def test_the_training_margin_stops_revisions_that_swap_tokens_back_and_forth():
    """Batches of 256 make noisy steps: at the paper's β=1.2 Ted-Tok keeps removing tokens it
    added a few revisions before (near-equal pairs swap places); at the bench's β it seldom
    does, and its tokenizer compresses the held-out examples as well."""
    settings = ArithmeticTrainSettings()
    revisions, churn, compression = _churn(settings, seed=1)
    paper_revisions, paper_churn, paper_compression = _churn(ArithmeticTrainSettings(beta=1.2), seed=1)
    assert settings.beta > 1.2 and 0 < revisions < paper_revisions
    assert paper_churn >= 0.5 * paper_revisions and churn <= 0.2 * revisions
    assert compression >= 0.99 * paper_compression
