"""A tokenizer revision applied to a causal language model and its optimizer, between two
optimizer steps (issue 11): the rows of the ids a revision changed are made anew, in the input
embedding and the output layer alike, and nothing else moves.

For each entry of the revision diff (``schemas.revision.RevisionDiff``):

* ``added`` / ``reassigned``: the id's rows are initialised by a strategy: ``parents_mean``
  (Ted-Tok: the mean of the rows of the merge's two parents, a parent changed by the same
  revision taken as it is made, so the order of a batch does not matter), ``subtoken_mean``
  (the mean of the rows of the previous version's encoding of the new token) or ``hyper``
  (``PairEncoder``, after zip2zip's hyper-encoder, fitted on the model's own merged tokens to
  predict a token's row from its two pieces' rows, applied to the new merges as ``parents_mean``
  is);
* ``removed``: the id's rows are zeroed and its logit masked to −inf (never generated, never a
  target: the tokenizer no longer emits it); so are the rows a growing vocabulary adds that no
  entry fills (a composed diff over a token added and removed again names neither);
* the optimizer's per-row state (Adam's moments) of every changed row is zeroed.

A vocabulary that grows resizes the model (its config follows) and moves the optimizer's
parameters and state to the new matrices; old rows keep their values bit for bit. A model
sharded by ``fully_shard`` (FSDP) has its rows changed where they live (``trainer.ranks``) and
cannot grow: it is built with room for the versions to come.

    applied = apply_revision(model, optimizer, diff)
    applied.changed        # the ids whose rows were made anew
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from schemas.revision import DiffEntry, RevisionDiff
from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.errors import TokmaintError
from trainer.ranks import is_sharded, whole_rows
from trainer.config import STRATEGIES

Strategy = Literal["parents_mean", "subtoken_mean", "hyper"]  # trainer.config.STRATEGIES


@dataclass(frozen=True)
class AppliedRevision:
    """What a revision did to the model: the ids made anew, those removed, the rows now, and
    ``respelled``: the unchanged ids that now spell a token the revision took away (its old merge
    parents), which the model has never read or predicted in its place."""

    changed: list[int]
    removed: list[int]
    rows: int
    respelled: list[int]

    @property
    def warm_ids(self) -> list[int]:
        """The rows a warm-up trains (``trainer.new_rows``): the new ones and the respelled ones.

        >>> AppliedRevision(changed=[7], removed=[], rows=8, respelled=[2, 3]).warm_ids
        [2, 3, 7]
        """
        return sorted({*self.changed, *self.respelled})


def embedding_matrices(model: nn.Module) -> list[nn.Parameter]:
    """The input embedding and, when untied, the output layer's weight (one each, tied or not).

    >>> from transformers import GPT2Config, GPT2LMHeadModel
    >>> len(embedding_matrices(GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=1, n_embd=8, vocab_size=16))))
    1
    """
    matrices = [model.get_input_embeddings().weight]
    output = model.get_output_embeddings()
    if output is not None and output.weight is not matrices[0]:
        matrices.append(output.weight)
    return matrices


def grow(model: nn.Module, optimizer: torch.optim.Optimizer | None, rows: int) -> None:
    """Resize the embeddings to ``rows`` and hand the optimizer the new matrices with their
    state (zeros for the new rows)."""
    old = embedding_matrices(model)
    shapes = [m.shape for m in old]  # (a resize may keep the parameter and swap its data)
    model.resize_token_embeddings(rows, mean_resizing=False)  # new rows: made by the strategy next
    _new_parameters(model)
    new = embedding_matrices(model)
    for matrix in new:  # a gradient kept from before (zero_grad(set_to_none=False)) has the old shape
        matrix.grad = None
    if optimizer is None:
        return
    moved = dict(zip(map(id, old), new))
    for group in optimizer.param_groups:
        group["params"] = [moved.get(id(p), p) for p in group["params"]]
    for before, shape, after in zip(old, shapes, new):
        state = optimizer.state.pop(before, None)
        if state is None:
            continue
        for key, value in state.items():
            if torch.is_tensor(value) and value.shape == shape:
                grown = value.new_zeros((rows, *value.shape[1:]))
                grown[: value.shape[0]] = value
                state[key] = grown
        optimizer.state[after] = state


def _new_parameters(model: nn.Module) -> None:
    """Give the resized embedding matrices parameters of their own, tied ones still tied.

    transformers' resize keeps the input embedding's parameter and swaps its data. Autograd keeps
    a parameter's gradient accumulator, with the old shape, as long as a graph that used it lives
    (the last step's loss, still held by a training loop), and the next backward pass then fails
    ("TBackward0 returned an invalid gradient ... [4600, 64] ... expected [4096, 64]"). A new
    parameter gets a new accumulator.

    >>> from transformers import GPT2Config, GPT2LMHeadModel
    >>> model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=1, n_embd=8, vocab_size=16))
    >>> before = model.get_input_embeddings().weight
    >>> _new_parameters(model)
    >>> model.get_input_embeddings().weight is before, model.lm_head.weight is model.get_input_embeddings().weight
    (False, True)
    """
    embedding, output = model.get_input_embeddings(), model.get_output_embeddings()
    tied = output is not None and output.weight is embedding.weight
    for module in (embedding,) if tied or output is None else (embedding, output):
        module.weight = nn.Parameter(module.weight.detach(), requires_grad=module.weight.requires_grad)
    if tied:
        output.weight = embedding.weight


def _subtoken_rows(matrix: torch.Tensor, previous: BPETokenizer, token: str) -> torch.Tensor:
    """The mean of the rows of ``previous``'s encoding of ``token``'s text."""
    ids = previous.tokenize_word(token)
    return matrix[torch.tensor(ids, device=matrix.device)].mean(dim=0)


class PairEncoder(nn.Module):
    """A merged token's row from its two pieces' rows, after zip2zip's hyper-encoder
    (``trainer.zip2zip.HyperEncoder`` pools a hypertoken of any length; this one a pair): their
    rows' mean plus an MLP of the two rows (its last layer starts at zero, so an untrained one is
    ``parents_mean``).

    >>> PairEncoder(2)(torch.tensor([1.0, 3.0]), torch.tensor([3.0, 5.0])).tolist()
    [2.0, 4.0]
    """

    def __init__(self, dim: int, *, hidden: int = 64) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(2 * dim, hidden), nn.GELU(), nn.Linear(hidden, dim))
        nn.init.zeros_(self.mlp[2].weight)
        nn.init.zeros_(self.mlp[2].bias)

    def forward(self, first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
        return (first + second) / 2 + self.mlp(torch.cat([first, second], dim=-1))


def train_pair_encoder(
    matrix: torch.Tensor, merges: list[tuple[int, int, int]], *, steps: int = 300, seed: int = 0
) -> PairEncoder:
    """A pair encoder fitted on the model's own merged tokens: ``merges`` (first, second, token
    ids) whose rows are known, to predict a token's row from its pieces' rows (full batch,
    mean squared error, Adam; deterministic for a seed on a device)."""
    devices = [matrix.device.index or 0] if matrix.is_cuda else []
    with torch.random.fork_rng(devices=devices):  # the caller's randomness stays as it was
        torch.manual_seed(seed)
        encoder = PairEncoder(matrix.shape[1]).to(matrix.device, matrix.dtype)
    if not merges:
        return encoder
    first, second, token = (matrix.detach()[list(ids)] for ids in zip(*merges))
    optimizer = torch.optim.Adam(encoder.parameters(), lr=1e-2)
    with torch.enable_grad():
        for _ in range(steps):
            loss = nn.functional.mse_loss(encoder(first, second), token)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    return encoder.eval()


def _known_merges(previous: BPETokenizer, changed: set[int]) -> list[tuple[int, int, int]]:
    """The previous version's merges as (first, second, token) ids, none touching a changed id."""
    vocab = previous.vocab
    return [
        (vocab[a], vocab[b], vocab[a + b])
        for a, b in previous.merges
        if not {vocab[a], vocab[b], vocab[a + b]} & changed
    ]


def _new_rows(
    matrix: torch.Tensor, entries: list[DiffEntry], strategy: Strategy, previous: BPETokenizer | None
) -> dict[int, torch.Tensor]:
    """The row of every added or reassigned id, from ``matrix`` as it was before the revision."""
    made = {e.id: e for e in entries if e.kind != "removed"}
    rows: dict[int, torch.Tensor] = {}
    if strategy == "hyper":
        if previous is None:
            raise ValueError("hyper needs the previous version's tokenizer (its merges train the encoder)")
        encoder = train_pair_encoder(matrix, _known_merges(previous, {e.id for e in entries}))
        combine = lambda first, second: encoder(first, second)  # noqa: E731
    else:
        combine = lambda first, second: (first + second) / 2  # noqa: E731

    def row(i: int) -> torch.Tensor:
        if i not in made:  # unchanged: as it is
            return matrix[i]
        if i not in rows:
            entry = made[i]
            if strategy == "subtoken_mean" or len(entry.parents) != 2:
                if previous is None:
                    raise ValueError(
                        f"id {i} ({entry.new_token!r}) needs the previous version's tokenizer "
                        f"({strategy}; or it has no merge parents)"
                    )
                rows[i] = _subtoken_rows(matrix, previous, entry.new_token)
            else:
                rows[i] = combine(row(entry.parents[0]), row(entry.parents[1]))
        return rows[i]

    for i in made:
        row(i)
    return rows


def removed_ids(model: nn.Module) -> list[int]:
    """The ids whose logits are held at −inf (removed by a revision)."""
    mask = getattr(model.get_output_embeddings(), "tokmaint_removed", None)
    return [] if mask is None else mask.nonzero().flatten().tolist()


def set_removed(model: nn.Module, ids: Iterable[int]) -> None:
    """Hold the output logits of exactly ``ids`` at −inf (a hook on the output layer, made once).

    >>> from transformers import GPT2Config, GPT2LMHeadModel
    >>> model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=1, n_embd=8, vocab_size=16))
    >>> set_removed(model, [5, 3]); removed_ids(model)
    [3, 5]
    >>> bool(model(input_ids=torch.tensor([[1, 2]])).logits[0, -1, 3].isneginf())
    True
    """
    output = model.get_output_embeddings()
    mask = torch.zeros(output.weight.shape[0], dtype=torch.bool, device=output.weight.device)
    mask[sorted(ids)] = True
    if hasattr(output, "tokmaint_removed"):
        output.tokmaint_removed = mask
    else:  # a buffer: it moves with the model; not persistent: checkpoints keep the ids themselves
        output.register_buffer("tokmaint_removed", mask, persistent=False)
    if not getattr(output, "tokmaint_hooked", False):
        output.register_forward_hook(
            lambda module, inputs, logits: (
                logits.masked_fill(module.tokmaint_removed, float("-inf")) if module.tokmaint_removed.any() else logits
            )
        )
        output.tokmaint_hooked = True


def apply_revision(
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None,
    diff: RevisionDiff,
    *,
    strategy: Strategy = "parents_mean",
    previous: BPETokenizer | None = None,
) -> AppliedRevision:
    """Apply ``diff`` (one version's, or a composed one) to ``model`` and ``optimizer``.

    ``previous``: the tokenizer the model used until now (for ``subtoken_mean`` and ``hyper``,
    and for a token with no merge parents under any strategy).
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    entries = diff.entries
    rows = max([model.get_input_embeddings().weight.shape[0], diff.id_space or 0, *(e.id + 1 for e in entries)])
    removed_before = removed_ids(model)  # (a resize may replace the output layer, and its mask with it)
    rows_before = model.get_input_embeddings().weight.shape[0]
    if rows > rows_before:
        if any(is_sharded(m) for m in embedding_matrices(model)):
            raise TokmaintError(
                f"the version needs {rows} embedding rows and the model has {rows_before}: a model "
                "sharded by fully_shard cannot grow; build it with room for the versions to come "
                "(LineageFollower.prepare masks the rows no version uses yet)"
            )
        grow(model, optimizer, rows)
    changed = sorted(e.id for e in entries if e.kind != "removed")
    filled = set(changed)
    removed = sorted(
        {e.id for e in entries if e.kind == "removed"} | {i for i in range(rows_before, rows) if i not in filled}
    )
    with torch.no_grad():
        for matrix in embedding_matrices(model):
            # Sharded (FSDP): gathered, made alike on every rank, each rank keeping its rows.
            with whole_rows(matrix, what=f"version {diff.version}'s rows") as whole:
                made = _new_rows(whole, entries, strategy, previous)  # all from the rows before any is written
                for i, values in made.items():
                    whole[i] = values
                if removed:
                    whole[removed] = 0
            state = optimizer.state.get(matrix) if optimizer is not None else None
            for value in (state or {}).values():
                if torch.is_tensor(value) and value.shape == matrix.shape:
                    with whole_rows(value, what=f"version {diff.version}'s optimizer state") as whole:
                        whole[changed + removed] = 0
    set_removed(model, (set(removed_before) - set(changed)) | set(removed))
    # A removed entry's parents are its old token's; a reassigned one's are in old_parents.
    taken = {q for e in entries for q in (e.parents if e.kind == "removed" else e.old_parents or ())}
    respelled = sorted(taken - filled - set(removed))
    return AppliedRevision(changed=changed, removed=removed, rows=rows, respelled=respelled)
