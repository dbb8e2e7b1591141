"""A revision's new and respelled rows warmed up alone, before the model trains on with them.

A row a revision makes (``apply_revision``) starts as a guess from its parents' rows: the model
has never read or predicted the token. Trained on at the model's own learning rate among all
its weights, the row needs many steps to catch up, and meanwhile the model reads and predicts
the token's text worse than it did in two pieces: the revision costs bits per byte. A sink the
revision deletes costs more: its text is now spelled by its two old pieces, a sequence the model
never saw, since the merged token always stood there; on the Debian stream such a document cost
~11 bits more after the first revisions, a shorter one saved ~2. So the pieces' rows
(``AppliedRevision.respelled``) warm up beside the new ones. Here those rows alone take a few
Adam steps of the language-modelling loss on text the model has just trained on, encoded with the
new version (the texts that hold one of them), every other weight frozen: the rows learn what the
model already knows of their text, in the contexts it already reads, and nothing else moves (as
Token Distillation fits new input rows against the frozen model, arXiv 2505.20133; here the loss
is the next-token loss, which fits a tied input and output row together).

    applied = apply_revision(model, optimizer, diff)
    steps, count = warm_shape(steps_since, texts_since, steps=5, texts=512, budget=0.02)
    texts = newest_holding(new_version, recent_texts, applied.warm_ids, count=count)
    inputs, labels = token_batch(new_version, texts, seq_len=128)
    losses = warm_new_rows(model, applied.warm_ids, inputs, labels, steps=steps, lr=1.2e-2)

A warm-up is compute the training does not get, so it is bounded by the training it interrupts:
``warm_shape`` gives it as many steps and texts as cost at most a share (the revision budget)
of the training since the version before, and ``newest_holding`` picks the texts: the newest
that hold one of the rows' tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from tokenizer_service.bpe import BPETokenizer
from trainer.apply_revision import embedding_matrices

WARM_CHUNK = 64  # texts a warm-up step runs through the model at once


def holding(inputs: torch.Tensor, ids: Sequence[int]) -> torch.Tensor:
    """Which rows of ``inputs`` hold one of ``ids``.

    >>> holding(torch.tensor([[1, 2], [3, 4]]), [4]).tolist()
    [False, True]
    """
    return torch.isin(inputs, torch.tensor(list(ids), dtype=inputs.dtype, device=inputs.device)).any(dim=1)


def warm_shape(trained_steps: int, trained_texts: int, *, steps: int, texts: int, budget: float) -> tuple[int, int]:
    """The steps and the texts of a warm-up that costs at most ``budget`` (a share) of the
    training since the version before: ``trained_steps`` optimizer steps over ``trained_texts``
    texts. A warm-up step over a training batch of texts costs less than a training step (the
    same forward and backward passes, but no weight's gradient beyond the embeddings' and no
    optimizer step over the model), over k batches about k of them; so the warm-up gets
    ``budget × trained_steps`` training steps' worth: its steps first (at most ``steps``), then its
    texts (at most ``texts``). Counted, not timed: every run, and every rank, warms up alike.

    >>> warm_shape(75, 600, steps=5, texts=512, budget=0.02)  # 1.5 steps' worth: one step on a batch
    (1, 8)
    >>> warm_shape(3000, 24000, steps=5, texts=512, budget=0.02)  # 60: five steps on 12 batches each
    (5, 96)
    >>> warm_shape(40, 320, steps=5, texts=512, budget=0.02)  # less than a step's worth: none
    (0, 0)
    """
    allowed = int(budget * trained_steps + 1e-9)  # 0.02 × 50 is 1, not 0.99999...
    if allowed < 1 or steps < 1 or trained_texts < 1:
        return 0, 0
    taken = min(steps, allowed)
    return taken, min(texts, allowed // taken * max(trained_texts // trained_steps, 1))


def newest_holding(tokenizer: BPETokenizer, texts: Sequence[str], ids: Sequence[int], *, count: int) -> list[str]:
    """The newest ``count`` of ``texts`` (oldest first, as a warm-up reads them) whose encoding
    with ``tokenizer`` holds one of ``ids``, in their order: encoded a chunk at a time from the
    newest, so that a warm-up on a few of 512 recent texts does not encode them all (40 ms on
    two CPU cores, more than a cheap warm-up itself).

    >>> tok = BPETokenizer.train(["ab ab"], vocab_size=258)  # "ab" is id 256
    >>> newest_holding(tok, ["ab 1", "b", "ab 2", "ab 3"], [256], count=2)
    ['ab 2', 'ab 3']
    """
    wanted, found = set(ids), []
    size = min(max(2 * count, 8), WARM_CHUNK)  # encoded at once: a few more than wanted, up to a chunk
    for end in range(len(texts), 0, -size):
        chunk = list(texts[max(end - size, 0) : end])
        held = [text for text, encoded in zip(chunk, tokenizer.encode_batch(chunk)) if wanted.intersection(encoded)]
        found[:0] = held[max(len(held) - (count - len(found)), 0) :]
        if len(found) >= count:
            break
    return found


def warm_new_rows(
    model: nn.Module,
    ids: Sequence[int],
    inputs: torch.Tensor,
    labels: torch.Tensor,
    *,
    steps: int,
    lr: float,
    chunk: int = WARM_CHUNK,
) -> list[float]:
    """Train the rows ``ids`` of the embedding matrices (input and, untied, output) alone for
    ``steps`` full-batch Adam steps of the language-modelling loss on the rows of ``inputs`` that
    hold one of them; the losses before each step (empty when no row holds one). Every other
    weight and row is left bit for bit; the model's own optimizer is not touched. A step's
    gradient is summed over ``chunk`` texts at a time (each chunk weighted by its labelled
    tokens): the full batch's gradient, in the memory of one chunk.

    >>> from transformers import GPT2Config, GPT2LMHeadModel
    >>> model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=1, n_embd=8, vocab_size=16))
    >>> before = model.get_input_embeddings().weight.detach().clone()
    >>> batch = torch.tensor([[1, 5, 2, 5], [1, 2, 3, 4]])
    >>> losses = warm_new_rows(model, [5], batch, batch, steps=5, lr=0.1)
    >>> len(losses), losses[-1] < losses[0]
    (5, True)
    >>> moved = (model.get_input_embeddings().weight != before).any(dim=1).nonzero().flatten().tolist()
    >>> moved
    [5]
    """
    picked = holding(inputs, ids)
    if steps <= 0 or not ids or not bool(picked.any()):
        return []
    device = model.get_input_embeddings().weight.device
    inputs, labels = inputs[picked].to(device), labels[picked].to(device)
    matrices = embedding_matrices(model)
    mask = torch.zeros(matrices[0].shape[0], 1, device=device, dtype=matrices[0].dtype)
    mask[list(ids)] = 1
    trainable = [p.requires_grad for p in model.parameters()]
    grads = [p.grad for p in model.parameters()]  # the loop's own (accumulated) gradients stay as they were
    was_training = model.training
    losses = []
    try:
        for p in model.parameters():
            p.grad = None
            p.requires_grad_(any(p is m for m in matrices))
        # Adam without weight decay: a row with no gradient (every other one) never moves.
        optimizer = torch.optim.Adam(matrices, lr=lr)
        model.train()
        # The tokens each chunk's loss is a mean over (labels shifted by one, as the model's loss is).
        parts = [(inputs[k : k + chunk], labels[k : k + chunk]) for k in range(0, len(inputs), chunk)]
        counted = [int((part_labels[:, 1:] != -100).sum()) for _, part_labels in parts]
        total = max(sum(counted), 1)
        with torch.enable_grad():
            for _ in range(steps):
                loss = 0.0
                for (part_inputs, part_labels), n in zip(parts, counted):
                    if not n:
                        continue
                    # forward, not __call__: the loop's hooks on the model (a collator's) are for its batches
                    part_loss = model.forward(input_ids=part_inputs, labels=part_labels).loss * (n / total)
                    part_loss.backward()
                    loss += part_loss.item()
                for matrix in matrices:
                    matrix.grad.mul_(mask)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                losses.append(loss)
    finally:
        for p, flag, grad in zip(model.parameters(), trainable, grads):
            p.requires_grad_(flag)
            p.grad = grad
        model.train(was_training)
    return losses
