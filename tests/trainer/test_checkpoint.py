"""``trainer.checkpoint``: a checkpoint records the tokenizer version it was trained with, refuses
another, and a resume continues exactly (the same next loss as an uninterrupted run), also after
a revision grew the vocabulary and removed ids."""

import pytest
import torch

from schemas.revision import DiffEntry, RevisionDiff
from tests.support.models import tiny_llama
from trainer.apply_revision import apply_revision, removed_ids
from trainer.checkpoint import CheckpointMismatch, TokenizerStamp, load_checkpoint, save_checkpoint

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ROWS = 40


def _model_and_optimizer():
    model = tiny_llama(ROWS, max_position_embeddings=32).to(DEVICE)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2)


def _step(model, optimizer, ids) -> float:
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return loss.item()


def _batch(seed: int, rows: int) -> torch.Tensor:
    return torch.randint(0, rows, (2, 12), generator=torch.Generator().manual_seed(seed)).to(DEVICE)


def test_a_resume_continues_exactly_and_another_version_is_refused(tmp_path):
    model, optimizer = _model_and_optimizer()
    for seed in range(3):
        _step(model, optimizer, _batch(seed, ROWS))
    diff = RevisionDiff(
        lineage="ck",
        version=2,
        parent_version=1,
        tokenizer_sha256="b" * 64,
        vocab_size=ROWS,
        id_space=ROWS + 1,
        config={},
        entries=[
            DiffEntry(id=7, kind="removed", old_token="x", new_token=None, parents=[]),
            DiffEntry(id=ROWS, kind="added", old_token=None, new_token="ab", parents=[1, 2]),
        ],
    )
    apply_revision(model, optimizer, diff)
    _step(model, optimizer, _batch(3, ROWS))
    stamp = TokenizerStamp(lineage="ck", version=2, sha256="b" * 64)
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, model=model, optimizer=optimizer, tokenizer=stamp, position={"step": 4})
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]  # no part file left

    resumed, resumed_optimizer = _model_and_optimizer()  # as a restarted trainer builds it: the first rows
    assert load_checkpoint(path, model=resumed, optimizer=resumed_optimizer, tokenizer=stamp) == {"step": 4}
    assert removed_ids(resumed) == [7]
    for a, b in zip(model.parameters(), resumed.parameters()):
        assert torch.equal(a, b)
    ids = _batch(4, ROWS + 1)
    assert _step(model, optimizer, ids) == _step(resumed, resumed_optimizer, ids)  # the same next loss
    assert _step(model, optimizer, ids) == _step(resumed, resumed_optimizer, ids)  # and the one after

    other, other_optimizer = _model_and_optimizer()
    with pytest.raises(CheckpointMismatch, match=r"ck version 2 \(sha256 bbbbbbbbbbbb\), not ck version 3"):
        load_checkpoint(
            path,
            model=other,
            optimizer=other_optimizer,
            tokenizer=TokenizerStamp(lineage="ck", version=3, sha256="c" * 64),
        )


@pytest.mark.parametrize("damage", ["truncated", "random", "empty", "not a dict", "no optimizer"])
def test_a_damaged_checkpoint_is_refused_in_one_line(tmp_path, damage):
    """A resume (and tokmaint eval, export) from a file that is no checkpoint says so in one line,
    with no PyTorch message asking to file an issue."""
    from tokenizer_service.errors import TokmaintError

    model, optimizer = _model_and_optimizer()
    stamp = TokenizerStamp(lineage="ck", version=1, sha256="a" * 64)
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, model=model, optimizer=optimizer, tokenizer=stamp, position={"step": 1})
    data = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "random":
        path.write_bytes(
            torch.randint(0, 256, (4096,), generator=torch.Generator().manual_seed(0), dtype=torch.uint8)
            .numpy()
            .tobytes()
        )
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "not a dict":
        torch.save([1, 2], path)
    else:
        saved = torch.load(path, weights_only=True)
        del saved["optimizer"]
        torch.save(saved, path)
    with pytest.raises(TokmaintError) as refused:
        load_checkpoint(path, model=model, optimizer=optimizer, tokenizer=stamp)
    message = str(refused.value)
    assert message.startswith(f"{path} is not a trainer checkpoint") and "\n" not in message and "issue" not in message
    if damage == "no optimizer":
        assert message.endswith("no 'optimizer' in it")
