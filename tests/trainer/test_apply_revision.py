"""``trainer.apply_revision`` on tiny GPT-2 (tied embeddings) and Llama (untied) models built from
configs, with AdamW state, on the revisions Ted-Tok makes of the drifting corpus: unchanged rows
stay bit for bit (weights and optimizer state), new rows are their strategy's, removed ids are
never generated, a composed diff equals the versions one by one, growth resizes cleanly. On CUDA
when there is one."""

import copy

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from schemas.revision import DiffEntry, RevisionDiff
from tests.support.models import tiny_llama
from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.corpus import batches, read_corpus
from tokenizer_service.evolve import quick_revisions_config
from tokenizer_service.revision_diff import composed_diff
from tokenizer_service.tedtok import TedTok
from trainer.apply_revision import apply_revision, embedding_matrices, removed_ids

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture(scope="module")
def versions(drifting_corpus):
    """The initial tokenizer and Ted-Tok's revisions of it over the drifting corpus."""
    docs = read_corpus(drifting_corpus).documents
    initial = BPETokenizer.train([d.text for d in docs[:200]], vocab_size=300)
    tedtok = TedTok(initial, config=quick_revisions_config(), lineage="trainer")
    for texts in batches(docs, 32):
        tedtok.observe_texts(texts)
    assert len(tedtok.revisions) >= 3
    return initial, tedtok.revisions


def _model(kind: str, rows: int):
    if kind == "llama":
        return tiny_llama(rows, num_hidden_layers=2).to(DEVICE)
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=2, n_embd=16, n_positions=64, vocab_size=rows)).to(DEVICE)


def _trained(kind: str, rows: int):
    """A model and its AdamW after a few steps, so that every row has optimizer state."""
    model = _model(kind, rows)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    generator = torch.Generator().manual_seed(1)
    for _ in range(3):
        ids = torch.randint(0, rows, (4, 16), generator=generator).to(DEVICE)
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return model, optimizer


def _by_hand(
    entries: list[DiffEntry],
    vocab_size: int,
    *,
    version: int = 2,
    parent_version: int = 1,
    id_space: int | None = None,
    config: dict | None = None,
) -> RevisionDiff:
    """A revision of the test lineage written out by hand, its tokenizer's hash a stand-in (the version's).

    >>> _by_hand([], 300, version=3, parent_version=2).tokenizer_sha256[-4:]
    '0003'
    """
    return RevisionDiff(
        lineage="trainer",
        version=version,
        parent_version=parent_version,
        tokenizer_sha256=f"{version:064x}",
        vocab_size=vocab_size,
        id_space=id_space,
        entries=entries,
        config=config or {},
    )


def _snapshot(model, optimizer):
    return [
        (m.detach().clone(), {k: v.clone() for k, v in optimizer.state[m].items() if torch.is_tensor(v)})
        for m in embedding_matrices(model)
    ]


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_only_the_changed_rows_move_and_they_are_their_parents_mean(versions, kind):
    initial, revisions = versions
    diff = revisions[0].diff
    model, optimizer = _trained(kind, initial.id_space)
    assert len(embedding_matrices(model)) == (1 if kind == "gpt2" else 2)
    before = _snapshot(model, optimizer)
    applied = apply_revision(model, optimizer, diff)
    changed = {e.id for e in diff.entries}
    assert set(applied.changed) | set(applied.removed) == changed and applied.changed
    for (old, old_state), matrix in zip(before, embedding_matrices(model)):
        kept = torch.tensor(sorted(set(range(old.shape[0])) - changed), device=DEVICE)
        assert torch.equal(matrix[kept], old[kept])  # bit for bit
        for key, value in old_state.items():
            now = optimizer.state[matrix][key]
            if value.shape == matrix.shape:
                assert torch.equal(now[kept], value[kept]) and not now[sorted(changed)].any()
        made = {e.id: e for e in diff.entries if e.kind != "removed"}
        for i, entry in made.items():
            u, v = entry.parents
            if u not in made and v not in made:
                assert torch.equal(matrix[i], (old[u] + old[v]) / 2)
        for i in applied.removed:
            assert not matrix[i].any()


def test_respelled_are_the_unchanged_pieces_of_the_tokens_taken_away(versions):
    """A revision's sinks leave their text to their old merge parents: those rows are respelled
    (the warm-up trains them beside the new ones), never one the revision changed."""
    initial, revisions = versions
    previous, model = initial, _model("gpt2", initial.id_space)
    seen = 0
    for revision in revisions:
        applied = apply_revision(model, None, revision.diff)
        entries = revision.diff.entries
        changed = {e.id for e in entries}
        assert not set(applied.respelled) & changed
        inverse = previous.id_to_token
        for entry in (e for e in entries if e.kind != "added"):
            pieces = entry.parents if entry.kind == "removed" else entry.old_parents
            assert "".join(inverse[i] for i in pieces) == entry.old_token or not pieces  # its two halves
            assert set(pieces) - changed <= set(applied.respelled)
            seen += bool(set(pieces) - changed)
        assert applied.warm_ids == sorted(set(applied.changed) | set(applied.respelled))
        previous = revision.tokenizer
    assert seen  # the revisions took merged tokens away


def test_subtoken_mean_is_the_mean_of_the_previous_encoding(versions):
    initial, revisions = versions
    model, optimizer = _trained("llama", initial.id_space)
    old = model.get_input_embeddings().weight.detach().clone()
    applied = apply_revision(model, optimizer, revisions[0].diff, strategy="subtoken_mean", previous=initial)
    for entry in revisions[0].diff.entries:
        if entry.kind != "removed":
            pieces = initial.tokenize_word(entry.new_token)
            assert len(pieces) >= 2
            assert torch.allclose(model.get_input_embeddings().weight[entry.id], old[pieces].mean(dim=0))
    assert applied.changed


def test_removed_ids_are_never_generated(versions):
    initial, revisions = versions
    removal = next((r for r in revisions if any(e.kind == "removed" for e in r.diff.entries)), None)
    model, optimizer = _trained("gpt2", initial.id_space)
    if removal is None:  # Ted-Tok recycles ids: remove some by hand, as a LiteToken removal does
        entries = [
            DiffEntry(id=i, kind="removed", old_token=initial.id_to_token[i], new_token=None, parents=[])
            for i in (270, 280)
        ]
        diff = _by_hand(entries, len(initial) - 2)
    else:
        diff = removal.diff
    applied = apply_revision(model, optimizer, diff)
    logits = model(input_ids=torch.tensor([[1, 2, 3]], device=DEVICE)).logits
    assert applied.removed and torch.isneginf(logits[..., applied.removed]).all()
    assert torch.isfinite(logits[..., applied.changed]).all()
    out = model.generate(
        torch.tensor([[1, 2]], device=DEVICE), max_new_tokens=8, do_sample=True, top_k=0, pad_token_id=0
    )
    assert not set(out[0, 2:].tolist()) & set(applied.removed)


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_a_composed_diff_equals_the_versions_one_by_one(versions, kind):
    initial, revisions = versions
    final = revisions[2].tokenizer
    one_by_one, optimizer_1 = _trained(kind, initial.id_space)
    composed, optimizer_2 = copy.deepcopy(one_by_one), None
    optimizer_2 = torch.optim.AdamW(composed.parameters(), lr=1e-2)
    optimizer_2.load_state_dict(optimizer_1.state_dict())
    for revision in revisions[:3]:
        apply_revision(one_by_one, optimizer_1, revision.diff)
    apply_revision(composed, optimizer_2, composed_diff(initial, final, lineage="trainer", start=1, end=4))
    used = torch.tensor(sorted(final.vocab.values()), device=DEVICE)  # free ids are nobody's
    for a, b in zip(embedding_matrices(one_by_one), embedding_matrices(composed)):
        assert torch.equal(a[used], b[used])
        for key, value in optimizer_1.state[a].items():
            if torch.is_tensor(value) and value.shape == a.shape:
                assert torch.equal(value[used], optimizer_2.state[b][key][used])


@pytest.mark.parametrize("strategy", ["parents_mean", "subtoken_mean", "hyper"])
def test_deterministic(versions, strategy):
    initial, revisions = versions
    results = []
    for _ in range(2):
        model, optimizer = _trained("llama", initial.id_space)
        apply_revision(model, optimizer, revisions[0].diff, strategy=strategy, previous=initial)
        results.append([m.detach().clone() for m in embedding_matrices(model)])
    assert all(torch.equal(a, b) for a, b in zip(*results))


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_growth_resizes_the_model_and_the_optimizer(versions, kind):
    initial, revisions = versions
    model, optimizer = _trained(kind, initial.id_space)
    before = _snapshot(model, optimizer)
    rows = initial.id_space
    a, b = initial.vocab["a"], initial.vocab["b"]
    entries = [
        DiffEntry(id=rows, kind="added", old_token=None, new_token="ab", parents=[a, b]),
        DiffEntry(id=rows + 1, kind="added", old_token=None, new_token="ba", parents=[b, a]),
    ]
    diff = _by_hand(entries, len(initial) + 2, id_space=rows + 2)
    applied = apply_revision(model, optimizer, diff)
    assert applied.rows == rows + 2 == model.config.vocab_size
    params = {id(p) for group in optimizer.param_groups for p in group["params"]}
    for (old, old_state), matrix in zip(before, embedding_matrices(model)):
        assert matrix.shape[0] == rows + 2 and id(matrix) in params
        assert torch.equal(matrix[:rows], old) and torch.equal(matrix[rows], (old[a] + old[b]) / 2)
        for key, value in old_state.items():
            if value.shape == old.shape:
                state = optimizer.state[matrix][key]
                assert torch.equal(state[:rows], value) and not state[rows:].any()
    ids = torch.tensor([[rows, rows + 1, a]], device=DEVICE)
    model(input_ids=ids, labels=ids).loss.backward()  # and training goes on
    optimizer.step()
    assert all(torch.isfinite(m).all() for m in embedding_matrices(model))


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_growth_while_the_last_step_s_loss_lives_trains_on(versions, kind):
    """A training loop holds its last step's loss (and so its graph) when the next version comes:
    the grown matrices still take their gradients (transformers' resize swapped the parameter's
    data, and its gradient accumulator kept the old shape: "TBackward0 returned an invalid
    gradient")."""
    initial, _ = versions
    rows = initial.id_space
    model = _model(kind, rows)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ids = torch.randint(0, rows, (2, 8), generator=torch.Generator().manual_seed(2)).to(DEVICE)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    a, b = initial.vocab["a"], initial.vocab["b"]
    entry = DiffEntry(id=rows + 40, kind="added", old_token=None, new_token="ab", parents=[a, b])
    apply_revision(model, optimizer, _by_hand([entry], len(initial) + 1, id_space=rows + 41))
    grown = torch.tensor([[rows + 40, a, b, rows + 40]], device=DEVICE)
    loss = model(input_ids=grown, labels=grown).loss
    loss.backward()
    optimizer.step()
    assert all(m.shape[0] == rows + 41 and m.grad is not None for m in embedding_matrices(model))
    assert embedding_matrices(model)[-1].grad[rows + 40].any()


def test_hyper_learns_the_models_own_merges_and_moves_nothing_else(versions):
    """On a model whose merged tokens' rows are a fixed map of their pieces' rows, the hyper-encoder
    predicts a new merge's rows far better than the parents' mean; unchanged rows stay."""
    initial, revisions = versions
    model, optimizer = _trained("llama", initial.id_space)
    matrix = model.get_input_embeddings().weight
    vocab = initial.vocab
    with torch.no_grad():  # every merged token's row: a fixed function of its pieces' rows
        for a, b in initial.merges:
            matrix[vocab[a + b]] = torch.tanh(matrix[vocab[a]] - 0.5 * matrix[vocab[b]])
    before = matrix.detach().clone()
    diff = revisions[0].diff
    apply_revision(model, optimizer, diff, strategy="hyper", previous=initial)
    made = {e.id: e for e in diff.entries if e.kind != "removed"}
    errors = {"hyper": [], "mean": []}
    for i, entry in made.items():
        u, v = entry.parents
        if u in made or v in made:
            continue
        truth = torch.tanh(before[u] - 0.5 * before[v])
        errors["hyper"].append((matrix[i] - truth).norm().item())
        errors["mean"].append(((before[u] + before[v]) / 2 - truth).norm().item())
    assert errors["hyper"] and sum(errors["hyper"]) < 0.5 * sum(errors["mean"])
    kept = torch.tensor(sorted(set(range(before.shape[0])) - {e.id for e in diff.entries}), device=DEVICE)
    assert torch.equal(matrix[kept], before[kept])


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_ids_removed_earlier_stay_masked_when_a_later_revision_grows_the_model(versions, kind):
    initial, _ = versions
    rows = initial.id_space
    model, optimizer = _trained(kind, rows)
    gone = DiffEntry(id=280, kind="removed", old_token=initial.id_to_token[280], new_token=None, parents=[])
    apply_revision(model, optimizer, _by_hand([gone], len(initial) - 1))
    a, b = initial.vocab["a"], initial.vocab["b"]
    grown = DiffEntry(id=rows, kind="added", old_token=None, new_token="ab", parents=[a, b])
    apply_revision(model, optimizer, _by_hand([grown], len(initial), version=3, parent_version=2, id_space=rows + 1))
    logits = model(input_ids=torch.tensor([[a, b, rows]], device=DEVICE)).logits
    assert removed_ids(model) == [280] and torch.isneginf(logits[..., 280]).all()
    assert torch.isfinite(logits[..., rows]).all()
    model.to("cpu")  # the mask moves with the model
    assert torch.isneginf(model(input_ids=torch.tensor([[a, b]])).logits[..., 280]).all()


def test_a_row_a_composed_diff_grows_but_fills_not_is_masked(versions):
    """Version 2 adds two tokens past the id space, version 3 removes the first: the composed
    diff from 1 to 3 names only the second, yet the model grows by both rows and the free one
    must never be generated."""
    initial, _ = versions
    rows = initial.id_space
    model, optimizer = _trained("gpt2", rows)
    a, b = initial.vocab["a"], initial.vocab["b"]
    second = DiffEntry(id=rows + 1, kind="added", old_token=None, new_token="ab", parents=[a, b])
    composed = _by_hand([second], len(initial) + 1, version=3, id_space=rows + 2, config={"composed": True})
    applied = apply_revision(model, optimizer, composed)
    logits = model(input_ids=torch.tensor([[a, b]], device=DEVICE)).logits
    assert applied.rows == rows + 2 and applied.removed == [rows]
    assert torch.isneginf(logits[..., rows]).all() and torch.isfinite(logits[..., rows + 1]).all()
