"""What a revision needs when a model is trained by many ranks (``torch.distributed``): a check
that every rank holds the same values, and the rows of a matrix that ``fully_shard`` (FSDP2)
split across the ranks, made whole for a revision and kept again where they live.

Under FSDP each rank holds a slice of an embedding's rows (a ``DTensor`` sharded on dim 0), and
a new row is made from its merge parents' rows, which may live on another rank. So the matrix
is gathered, every rank makes the new rows from the same whole matrix, the ranks check they
made the same, and each keeps its own slice: the optimizer's state is sharded alike.

    with whole_rows(matrix) as rows:   # a plain tensor: the matrix itself, no gathering
        rows[5] = 0
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from tokenizer_service.errors import TokmaintError


class RanksDiverged(TokmaintError):
    """The ranks' embedding or output matrices differ after a version was applied."""


def distributed() -> bool:
    """Whether this process is a rank of a ``torch.distributed`` group.

    >>> distributed()
    False
    """
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def collective_device() -> torch.device:
    """Where the group's collectives take tensors (NCCL: this rank's GPU; gloo: the CPU)."""
    if torch.distributed.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def row_sums(matrix: torch.Tensor) -> torch.Tensor:
    """Two float64 sums of a matrix: plain, and weighted by the row (a row moved shows).

    >>> row_sums(torch.tensor([[1.0, 2.0], [3.0, 4.0]])).tolist()
    [10.0, 17.0]
    """
    rows = matrix.detach().to(torch.float64).sum(dim=1)
    weights = torch.arange(1, len(rows) + 1, dtype=torch.float64, device=rows.device)
    return torch.stack([rows.sum(), (rows * weights).sum()])


def same_on_every_rank(values: torch.Tensor, what: str) -> None:
    """Raise :class:`RanksDiverged` on every rank when ``values`` differ from rank 0's on any
    (nothing to compare in one process)."""
    if not distributed():
        return
    mine = values.to(collective_device())
    every = [torch.empty_like(mine) for _ in range(torch.distributed.get_world_size())]
    torch.distributed.all_gather(every, mine)
    if differing := [rank for rank, theirs in enumerate(every) if not torch.equal(theirs, every[0])]:
        raise RanksDiverged(
            f"{what}: the matrices of rank(s) {differing} differ from rank 0's: stopped rather than train on"
        )


def is_sharded(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is a ``DTensor`` (a parameter or an optimizer state of ``fully_shard``).

    >>> is_sharded(torch.zeros(2))
    False
    """
    from torch.distributed.tensor import DTensor

    return isinstance(tensor, DTensor)


@contextmanager
def whole_rows(tensor: torch.Tensor, *, what: str = "a sharded matrix") -> Iterator[torch.Tensor]:
    """``tensor`` whole, to change in place: a plain tensor as it is; a ``DTensor`` gathered from
    every rank, and on leaving, once every rank is seen to have made the same matrix, each
    rank's own rows of it written back to its shard."""
    if not is_sharded(tensor):
        yield tensor
        return
    from torch.distributed.tensor import distribute_tensor

    whole = tensor.full_tensor()
    yield whole
    same_on_every_rank(row_sums(whole), what)
    # src_data_rank=None: each rank keeps its slice of the matrix it made (no scatter from rank 0).
    mine = distribute_tensor(whole, tensor.device_mesh, tensor.placements, src_data_rank=None)
    tensor.to_local().copy_(mine.to_local())
