"""trainer.new_rows: a revision's new rows warmed up alone on recent text."""

import pytest
import torch
from transformers import GPT2LMHeadModel

from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.tedtok import TedTok, TedTokConfig
from trainer.apply_revision import apply_revision
from trainer.follow import token_batch
from trainer.loop import tiny_gpt2_config
from trainer.new_rows import newest_holding, warm_new_rows

OLD = ["the stream of words goes on"] * 8
NEW = ["kubernetes kubernetes pods and kubernetes nodes"] * 8


def _revised():
    """A model trained a little on the old text, a revision that adds the new text's merges
    (applied), the new version and the model's optimizer."""
    old = BPETokenizer.train(OLD, vocab_size=290, special_tokens=["<|endoftext|>"])
    torch.manual_seed(0)
    model = GPT2LMHeadModel(tiny_gpt2_config(old.id_space))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(5):
        model(**dict(zip(("input_ids", "labels"), token_batch(old, OLD, seq_len=32)))).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    tedtok = TedTok(old, config=TedTokConfig(alpha=0.5, beta=1.0, batch_size=8, interval=1))
    revision = None
    while revision is None:
        revision = tedtok.observe_texts(NEW)
    applied = apply_revision(model, optimizer, revision.diff, previous=old)
    return model, optimizer, applied, revision.tokenizer


def _loss(model, tokenizer, texts):
    with torch.no_grad():
        inputs, labels = token_batch(tokenizer, texts, seq_len=32)
        return model(input_ids=inputs, labels=labels).loss.item()


def test_the_new_rows_learn_the_new_text_and_nothing_else_moves():
    model, optimizer, applied, new = _revised()
    assert applied.changed
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    state = {k: v.clone() for k, v in optimizer.state[model.get_input_embeddings().weight].items()}
    loss_before = _loss(model, new, NEW)
    losses = warm_new_rows(model, applied.changed, *token_batch(new, NEW + OLD, seq_len=32), steps=10, lr=1e-2)
    assert len(losses) == 10 and _loss(model, new, NEW) < loss_before
    for name, p in model.named_parameters():
        moved = (p != before[name]).reshape(p.shape[0], -1).any(dim=1).nonzero().flatten().tolist()
        if name == "transformer.wte.weight":  # tied: the input and the output rows
            assert moved and set(moved) <= set(applied.changed)
        else:
            assert moved == [], name
    after = optimizer.state[model.get_input_embeddings().weight]
    assert all(torch.equal(after[k], v) for k, v in state.items())  # the loop's optimizer untouched


def test_only_texts_that_hold_a_new_token_are_read_and_the_loop_keeps_its_gradients():
    model, _, applied, new = _revised()
    weight = model.get_input_embeddings().weight
    weight.grad = torch.ones_like(weight)  # a loop that accumulates gradients over micro-batches
    frozen = model.transformer.h[0].attn.c_attn.weight
    frozen.requires_grad_(False)
    assert warm_new_rows(model, applied.changed, *token_batch(new, OLD, seq_len=32), steps=5, lr=1e-2) == []
    assert warm_new_rows(model, applied.changed, *token_batch(new, NEW, seq_len=32), steps=0, lr=1e-2) == []
    assert len(warm_new_rows(model, applied.changed, *token_batch(new, NEW, seq_len=32), steps=2, lr=1e-2)) == 2
    assert torch.equal(weight.grad, torch.ones_like(weight)) and not frozen.requires_grad and weight.requires_grad


def test_a_step_in_chunks_is_the_full_batch_step():
    """Texts of different lengths, run a chunk of one at a time or all at once: the same losses
    and the same rows (each chunk's loss weighted by its labelled tokens)."""
    texts = ["kubernetes", "kubernetes pods and kubernetes nodes", "and kubernetes"] * 2
    runs = []
    for chunk in (1, 64):
        model, _, applied, new = _revised()
        for module in model.modules():  # no dropout: the two runs differ by their chunks alone
            if isinstance(module, torch.nn.Dropout):
                module.p = 0.0
        losses = warm_new_rows(
            model, applied.changed, *token_batch(new, texts, seq_len=32), steps=3, lr=1e-2, chunk=chunk
        )
        runs.append((losses, model.get_input_embeddings().weight.detach().clone()))
    (one_losses, one_rows), (all_losses, all_rows) = runs
    assert one_losses == pytest.approx(all_losses, rel=1e-5)
    assert torch.allclose(one_rows, all_rows, atol=1e-6)


def test_a_warm_up_reads_the_newest_texts_that_hold_a_new_token():
    """``newest_holding`` gives the newest texts whose encoding holds a new token, in order,
    however far back the texts go, and the texts without one are left out."""
    _, _, applied, new = _revised()
    newest = ["pods and kubernetes nodes", "kubernetes pods"]
    texts = NEW + OLD * 20 + [newest[0]] + OLD + [newest[1]] + OLD
    assert newest_holding(new, texts, applied.changed, count=2) == newest
    assert newest_holding(new, texts, applied.changed, count=3) == [NEW[-1], *newest]
    assert newest_holding(new, OLD * 100, applied.changed, count=2) == []
