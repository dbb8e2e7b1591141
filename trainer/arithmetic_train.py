"""``tokmaint bench arithmetic-train``: Ted-Tok Table 1, SA row, by training the models.

The data and tokenizers are ``bench arithmetic``'s (appendix B): Old ("A+B=C" and non-negative
"A-B=C", A, B in [0, 50]) then New (A, B in [0, 200], 2,000 held out), character base,
vocabulary 50, one example one word. The model is appendix C.1's: a two-layer, four-head GPT-2
(``n_embd`` 12: ~4.6K parameters; see below for the default), Adam (the paper: a constant learning
rate; here it falls linearly to zero over the last ``decay`` share of the steps), random
initial weights.
Every run trains ``epochs`` epochs over Old, then as many over New (lifelong); only the
tokenizer differs:

* ``old``: Old's tokenizer throughout;
* ``new``: Old's, then New's from the first New step: the switch is applied as one revision
  (the diff Old → New, ``subtoken_mean``: a token both have keeps its row wherever its id went;
  the others start from their Old pieces' rows);
* ``tedtok``: Old's, evolved by Ted-Tok during training (one time step per batch; warmup 10%,
  Δ, α=0.3, β (below), no revision in the last 20%), each revision applied by ``apply_revision``
  between two optimizer steps, with ``strategy`` (default ``hyper``; the paper's is
  ``parents_mean``: below).

Exact match: for each held-out example, the model is given the example's tokens that end
before its answer begins (a token that spans "=" and the answer's first digits is the
answer's), generates greedily until the end-of-example token, and must reproduce the example's
text exactly. A token that spans the question's end and the answer's start can leave question
characters out of the prompt (with "0=4", "12+30=42" is prompted "12+3"): the generation is held
to them until they are generated (token healing), or the model would have to guess a digit of
the question. The end-of-example id is one row past the tokenizer's ids (a revision that grew
the vocabulary into it would be an error).

Loss jump, per initialisation strategy: at each Ted-Tok revision the model and optimizer are
copied; each other strategy than the run's applies the revision to a copy, which trains the
run's next ``window`` batches. The jump is the mean loss of those steps minus the mean loss of
the ``window`` steps before the revision (the same for every strategy), averaged over revisions
and seeds; the run's own strategy is measured on the run itself.

The paper's schedule (batch 4,096, 1,000 epochs per subset: 16,000 steps of 4,096 examples,
65M example passes) takes days on two CPU cores. The default is shortened to fit 30 minutes:
60 epochs per subset in batches of 256 (14,760 steps, 3.8M example passes), the learning rate
3e-3 instead of 5e-4, Δ = 100 steps instead of 300, the margin β = 2 instead of 1.2, and a
wider model (``n_embd`` 32, 27.6K parameters): the paper's ~4.6K-parameter model
(``--n-embd 12``) stays under 10% exact match in such a budget, where the comparison is noise.
Runs go two at a time, in processes of one torch thread each. A step's counts come from 256
examples, not 4,096: at β = 1.2 most revisions removed a token an earlier one had added
(near-equal pairs swapping places, each a row to learn again); at 2 one to four do in a run,
with ~27 revisions instead of 104 and the same compression of the held-out examples.

Why Δ = 100: the model learns the task late and suddenly (exact match on held-out examples
stays under 10% for thousands of steps, then climbs within a thousand or two), and in the
Ted-Tok run that came only once the vocabulary had mostly stopped moving. A revision swaps one
token, and 21–29 are made in a run: at Δ = 200 the first 20 of them took until step
5,400–6,600 of 14,760 (seeds 0–5), at 100 until 3,400–4,000, which leaves the final vocabulary
more steps to be learned (a few more revisions follow later, one at a time, at either Δ).

The Ted-Tok run starts the rows a revision changes with ``hyper`` by default: over seeds 0–5
(40 epochs) it scored 85.5% exact match against 83.0% with the paper's ``parents_mean`` (per
seed +1.6, +4.0, +6.0, +8.1, −4.9, +0.6 points), and its loss jump is the lowest of the three.
"""

from __future__ import annotations

import copy
import multiprocessing
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from queue import Empty
from typing import Any

import numpy as np
import torch
from tqdm import tqdm
from transformers import GPT2Config, GPT2LMHeadModel

from schemas.revision import RevisionDiff
from tokenizer_service.bench.arithmetic import NEW_EXAMPLES, arithmetic_dataset, split_new
from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.counting import WordVocabulary
from tokenizer_service.revision_diff import diff_entries
from tokenizer_service.tedtok import TedTok
from trainer.apply_revision import apply_revision
from trainer.config import CAUSAL_LM_LOSS, STRATEGIES, ArithmeticTrainSettings

PAPER = {"exact_match": {"old": 0.8230, "new": 0.8815, "tedtok": 0.9055}}
RUNS = ("old", "new", "tedtok")


def sa_model(rows: int, *, n_embd: int, seed: int) -> GPT2LMHeadModel:
    """Appendix C.1's model: two layers, four heads, tied embeddings, no dropout.

    >>> sum(p.numel() for p in sa_model(51, n_embd=12, seed=0).parameters())
    4596
    """
    torch.manual_seed(seed)
    config = GPT2Config(
        n_layer=2,
        n_head=4,
        n_embd=n_embd,
        n_positions=16,
        vocab_size=rows,
        bos_token_id=rows - 1,
        eos_token_id=rows - 1,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    model = GPT2LMHeadModel(config)
    model.loss_type = CAUSAL_LM_LOSS
    return model


class Encodings:
    """Every example's ids under the tokenizer of the moment (encoded once per version), each
    followed by the end-of-example id ``eos`` and padded with it into one table, so that a
    batch is a few tensor operations (row by row it took 12% of a training step).

    >>> tok = BPETokenizer(vocab={c: i for i, c in enumerate("12+=")} | {"12": 4}, merges=[("1", "2")], pipeline={})
    >>> inputs, labels = Encodings(["1+2=12", "12=1"], tok, eos=5).batch(np.array([1, 0]))
    >>> inputs.tolist()
    [[4, 3, 0, 5, 5, 5], [0, 2, 1, 3, 4, 5]]
    >>> labels.tolist()
    [[4, 3, 0, 5, -100, -100], [0, 2, 1, 3, 4, 5]]
    """

    def __init__(self, examples: list[str], tokenizer: BPETokenizer, *, eos: int) -> None:
        self.examples, self.eos = examples, eos
        self.set(tokenizer)

    def set(self, tokenizer: BPETokenizer) -> None:
        self.tokenizer = tokenizer
        encoded = tokenizer.encode_batch(self.examples)
        lengths = np.fromiter((len(ids) + 1 for ids in encoded), np.int64, len(encoded))
        flat = np.fromiter((i for ids in encoded for i in [*ids, self.eos]), np.int64, int(lengths.sum()))
        table = np.full((len(lengths), int(lengths.max())), self.eos, np.int64)
        table[np.arange(table.shape[1]) < lengths[:, None]] = flat  # a boolean mask fills row by row
        self._table, self._lengths = torch.from_numpy(table), torch.from_numpy(lengths)

    def batch(self, rows: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs (each example then end-of-example, padded with it to the batch's longest) and
        labels (-100: padding)."""
        index = torch.from_numpy(np.asarray(rows, np.int64))
        lengths = self._lengths[index]
        width = int(lengths.max())
        inputs = self._table[index, :width]
        labels = inputs.masked_fill(torch.arange(width) >= lengths[:, None], -100)
        return inputs, labels


def prompt_length(tokenizer: BPETokenizer, ids: list[int], example: str) -> int:
    """How many of the example's tokens ``ids`` end before its answer (after "=") begins.

    >>> tok = BPETokenizer(vocab={c: i for i, c in enumerate("0123456789+=")} | {"=1": 12},
    ...                    merges=[("=", "1")], pipeline={})
    >>> ids = tok.encode("1+1=12")
    >>> [tok.id_to_token[i] for i in ids[: prompt_length(tok, ids, "1+1=12")]]
    ['1', '+', '1']
    """
    end = example.index("=") + 1
    for k, i in enumerate(ids):
        end -= len(tokenizer.id_to_token[i])
        if end < 0:
            return k
    return len(ids)


def _question_rest(tokenizer: BPETokenizer, ids: list[int], example: str, length: int) -> str:
    """The end of the example's question ("A+B=") that its first ``length`` tokens leave out.

    >>> tok = BPETokenizer(vocab={c: i for i, c in enumerate("0123456789+=")} | {"0=": 12, "0=3": 13},
    ...                    merges=[("0", "="), ("0=", "3")], pipeline={})
    >>> ids = tok.encode("20+10=30")
    >>> _question_rest(tok, ids, "20+10=30", prompt_length(tok, ids, "20+10=30"))
    '0='
    """
    given = sum(len(tokenizer.id_to_token[i]) for i in ids[:length])
    return example[given : example.index("=") + 1]


@torch.no_grad()
def exact_match(
    model: GPT2LMHeadModel, tokenizer: BPETokenizer, examples: list[str], *, eos: int, max_new: int = 8
) -> float:
    """The share of ``examples`` the model completes exactly from their prompts (greedy).

    The prompt is the example's tokens that end before its answer begins. Where a token spans
    the end of the question and the start of the answer ("0=4" in "12+30=42"), the question's
    last characters are not in the prompt ("12+3"), so the generation is held to them (token
    healing): until they are generated, only tokens that agree with them can be chosen.
    Otherwise the model would have to guess a digit of the question.
    """
    model.eval()
    prompts: dict[int, list[int]] = {}
    rests: list[str] = []
    encoded = tokenizer.encode_batch(examples)
    for k, (ids, example) in enumerate(zip(encoded, examples)):
        length = prompt_length(tokenizer, ids, example)
        prompts.setdefault(length, []).append(k)
        rests.append(_question_rest(tokenizer, ids, example, length))
    allowed: dict[str, torch.Tensor] = {}

    def agreeing(rest: str) -> torch.Tensor:
        """The ids a generation with ``rest`` of the question still to come may choose."""
        if rest not in allowed:
            tokens = [tokenizer.id_to_token.get(i) for i in range(eos + 1)]  # None: eos, holes
            allowed[rest] = torch.tensor(
                [not rest or (t is not None and (t.startswith(rest) or rest.startswith(t))) for t in tokens]
            )
        return allowed[rest]

    correct = 0
    for length, members in prompts.items():
        seqs = torch.tensor([encoded[k][:length] for k in members], dtype=torch.long)
        rest = [rests[k] for k in members]
        done = torch.zeros(len(members), dtype=torch.bool)
        for _ in range(max_new):
            logits = model(input_ids=seqs).logits[:, -1]
            mask = torch.stack([agreeing(r) for r in rest])
            nxt = logits.masked_fill(~mask, float("-inf")).argmax(-1)
            nxt = torch.where(done, eos, nxt)
            seqs = torch.cat([seqs, nxt[:, None]], dim=1)
            done |= nxt == eos
            chosen = [tokenizer.id_to_token.get(i, "") for i in nxt.tolist()]
            rest = [r[len(t) :] if r.startswith(t) else "" for r, t in zip(rest, chosen)]
            if done.all():
                break
        for k, row in zip(members, seqs.tolist()):
            ids = row[: row.index(eos)] if eos in row else None
            correct += ids is not None and tokenizer.decode(ids) == examples[k]
    model.train()
    return correct / len(examples)


def _batches(rng: np.random.Generator, n: int, batch: int, epochs: int) -> Iterator[np.ndarray]:
    for _ in range(epochs):
        order = rng.permutation(n)
        yield from (order[s : s + batch] for s in range(0, n, batch))


def learning_rate(lr: float, step: int, total: int, *, decay: float) -> float:
    """The learning rate at ``step`` (0-based) of ``total``: ``lr``, then falling linearly to
    zero over the last ``decay`` share of the steps (Warmup–Stable–Decay's end, without warmup).

    >>> [learning_rate(1.0, t, 10, decay=0.2) for t in (0, 7, 8, 9)]
    [1.0, 1.0, 1.0, 0.5]
    """
    left = total - step
    return lr * min(1.0, left / (decay * total)) if decay else lr


def _step(
    model: GPT2LMHeadModel, optimizer: torch.optim.Optimizer, inputs: torch.Tensor, labels: torch.Tensor, lr: float
) -> float:
    for group in optimizer.param_groups:
        group["lr"] = lr
    loss = model(input_ids=inputs, labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return loss.item()


def _switch_diff(old: BPETokenizer, new: BPETokenizer) -> RevisionDiff:
    """The New run's tokenizer switch as one revision diff (Old → New)."""
    return RevisionDiff(
        lineage="arithmetic",
        version=2,
        parent_version=1,
        tokenizer_sha256=new.sha256,
        vocab_size=len(new),
        entries=diff_entries(old, new),
        config={},
        id_space=new.id_space,
    )


@dataclass
class _Jump:
    """One revision's loss jump under way: the run (its own strategy) and a copy per other strategy."""

    before: float
    start: int  # the run's first step after the revision
    copies: dict[str, tuple[GPT2LMHeadModel, torch.optim.Optimizer]]
    losses: dict[str, list[float]] = field(default_factory=dict)


@dataclass(frozen=True)
class _Schedule:
    """One seed's data, tokenizers and batches, the same for its three runs."""

    examples: list[str]
    held_out: list[str]
    old: BPETokenizer
    new: BPETokenizer
    order: list[np.ndarray]  # rows of ``examples``, a batch each: Old's epochs, then New's
    first_new: int  # the first batch of New

    @classmethod
    def for_seed(cls, settings: ArithmeticTrainSettings, seed: int) -> "_Schedule":
        rng = np.random.default_rng(seed)
        old_data = arithmetic_dataset(50)
        new_train, held_out = split_new(rng, settings.validation)
        vocab = dict(vocab_size=settings.vocab_size, byte_level=False)
        order = [
            *_batches(rng, len(old_data), settings.batch, settings.epochs),
            *(b + len(old_data) for b in _batches(rng, len(new_train), settings.batch, settings.epochs)),
        ]
        return cls(
            examples=old_data + new_train,
            held_out=held_out,
            old=BPETokenizer.train(old_data, **vocab),
            new=BPETokenizer.train(new_train, **vocab),
            order=order,
            first_new=-(-len(old_data) // settings.batch) * settings.epochs,
        )

    def tedtok(self, settings: ArithmeticTrainSettings) -> tuple[TedTok, np.ndarray]:
        """Ted-Tok from Old over this schedule (a time step per batch), and the examples' word
        ids: ``tedtok.observe_words(word_ids[rows], ...)`` is a step."""
        words = WordVocabulary()
        word_ids = words.ids(self.examples)
        config = settings.tedtok_config(len(self.order))
        return TedTok(self.old, config=config, words=words, lineage="arithmetic"), word_ids


def run_one(
    settings: ArithmeticTrainSettings, seed: int, name: str, *, report=None, steps: int | None = None
) -> dict[str, Any]:
    """One run (``old``, ``new`` or ``tedtok``) of one seed: its exact match, and for ``tedtok``
    the loss jump of each strategy at each revision (the run's own, ``settings.strategy``, and a
    copy's for each other). ``report(steps, loss)``: progress. ``steps``: only the schedule's
    first ``steps`` batches, as the whole run trains them (the learning rate and Ted-Tok's
    warm-up and freeze are still the whole schedule's); by default all."""
    plan = _Schedule.for_seed(settings, seed)
    eos, window = plan.old.id_space, settings.window
    model = sa_model(eos + 1, n_embd=settings.n_embd, seed=seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=settings.lr, betas=(0.9, 0.999))
    encodings = Encodings(plan.examples, plan.old, eos=eos)
    tedtok, word_ids = plan.tedtok(settings) if name == "tedtok" else (None, None)
    losses: list[float] = []
    jumps: dict[str, list[float]] = {s: [] for s in STRATEGIES}
    jump: _Jump | None = None
    for t, rows in enumerate(plan.order[:steps]):
        if name == "new" and t == plan.first_new:
            apply_revision(
                model, optimizer, _switch_diff(plan.old, plan.new), strategy="subtoken_mean", previous=plan.old
            )
            encodings.set(plan.new)
        inputs, labels = encodings.batch(rows)
        lr = learning_rate(settings.lr, t, len(plan.order), decay=settings.decay)
        losses.append(_step(model, optimizer, inputs, labels, lr))
        if jump is not None:
            for strategy, (copy_model, copy_optimizer) in jump.copies.items():
                jump.losses.setdefault(strategy, []).append(_step(copy_model, copy_optimizer, inputs, labels, lr))
            if len(losses) - jump.start == window:
                jump.losses[settings.strategy] = losses[jump.start :]
                for strategy, after in jump.losses.items():
                    jumps[strategy].append(float(np.mean(after)) - jump.before)
                jump = None
        if tedtok is not None and (revision := tedtok.observe_words(word_ids[rows], np.ones(len(rows)))):
            if revision.tokenizer.id_space > eos:
                raise RuntimeError("a revision grew the vocabulary into the end-of-example row")
            copies = {}
            for strategy in STRATEGIES:  # from the model as it is, before the run's own application
                if strategy != settings.strategy:
                    copies[strategy] = copy.deepcopy((model, optimizer))
                    apply_revision(*copies[strategy], revision.diff, strategy=strategy, previous=encodings.tokenizer)
            apply_revision(model, optimizer, revision.diff, strategy=settings.strategy, previous=encodings.tokenizer)
            jump = _Jump(before=float(np.mean(losses[-window:])), start=len(losses), copies=copies)
            encodings.set(revision.tokenizer)
        if report is not None and (t + 1) % 100 == 0:
            report(100, losses[-1])
    return {
        "seed": seed,
        "run": name,
        "exact_match": exact_match(model, encodings.tokenizer, plan.held_out, eos=eos),
        "final_loss": float(np.mean(losses[-window:])),
        "steps": len(losses),
        "revisions": len(tedtok.revisions) if tedtok else 0,
        "loss_jump": jumps,
    }


def _run_in_worker(settings: ArithmeticTrainSettings, seed: int, name: str, queue) -> dict[str, Any]:
    torch.set_num_threads(1)  # two processes of one thread each beat one of two on tiny matrices
    return run_one(settings, seed, name, report=lambda steps, loss: queue.put((steps, loss, name)))


def run_arithmetic_train(settings: ArithmeticTrainSettings | None = None, *, progress: bool = True) -> dict[str, Any]:
    """Every seed's three runs, ``workers`` at a time; the benchmark's JSON-ready result (means
    over seeds)."""
    settings = settings or ArithmeticTrainSettings()
    started = time.perf_counter()
    tasks = [(seed, name) for seed in range(settings.seed, settings.seed + settings.seeds) for name in RUNS]
    per_epoch = -(-len(arithmetic_dataset(50)) // settings.batch) - (
        -(NEW_EXAMPLES - settings.validation) // settings.batch
    )
    steps = per_epoch * settings.epochs * len(tasks)
    bar = tqdm(total=steps, desc="arithmetic-train", unit="step", disable=not progress)
    if settings.workers == 1:
        runs = [run_one(settings, seed, name, report=lambda n, loss: bar.update(n)) for seed, name in tasks]
    else:
        with (
            multiprocessing.get_context("spawn").Manager() as manager,
            ProcessPoolExecutor(settings.workers, mp_context=multiprocessing.get_context("spawn")) as pool,
        ):
            queue = manager.Queue()
            futures = [pool.submit(_run_in_worker, settings, seed, name, queue) for seed, name in tasks]
            while not all(f.done() for f in futures):
                try:
                    n, loss, name = queue.get(timeout=0.5)
                except Empty:
                    continue
                bar.update(n)
                bar.set_postfix({f"loss_{name}": f"{loss:.3f}"})
            runs = [f.result() for f in futures]
    bar.close()
    by = {name: [r for r in runs if r["run"] == name] for name in RUNS}
    jumps = {s: [j for r in by["tedtok"] for j in r["loss_jump"][s]] for s in STRATEGIES}
    return {
        "exact_match": {name: float(np.mean([r["exact_match"] for r in by[name]])) for name in RUNS},
        "exact_match_per_seed": {name: [r["exact_match"] for r in by[name]] for name in RUNS},
        "final_loss": {name: float(np.mean([r["final_loss"] for r in by[name]])) for name in RUNS},
        "loss_jump": {s: float(np.mean(v)) if v else None for s, v in jumps.items()},
        "loss_jump_revisions": len(jumps[settings.strategy]),
        "revisions_per_seed": [r["revisions"] for r in by["tedtok"]],
        "steps_per_run": by["old"][0]["steps"],
        "seeds": settings.seeds,
        "seconds": time.perf_counter() - started,
        "settings": settings.model_dump(),
        "paper": PAPER,
    }
