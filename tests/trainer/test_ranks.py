"""trainer/ranks.py: in one process (no torch.distributed group), the checks across ranks."""

import torch

from trainer.ranks import distributed, row_sums, same_on_every_rank, whole_rows


def test_row_sums_tell_a_moved_row_from_the_same_rows():
    matrix = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    swapped = matrix[[1, 0, 2]]
    plain, weighted = row_sums(matrix).tolist()
    plain_swapped, weighted_swapped = row_sums(swapped).tolist()
    assert plain == plain_swapped == 21.0
    assert (weighted, weighted_swapped) == (3.0 + 14.0 + 33.0, 7.0 + 6.0 + 33.0)
    assert row_sums(matrix.to(torch.float16)).dtype == torch.float64


def test_one_process_has_no_ranks_to_compare_and_edits_a_plain_matrix_in_place():
    assert not distributed()
    same_on_every_rank(torch.tensor([1.0, 2.0]), "embeddings")  # nothing to compare: no error
    matrix = torch.zeros(2, 3)
    with whole_rows(matrix) as whole:
        assert whole is matrix
        whole[1] = 7.0
    assert matrix[1].tolist() == [7.0, 7.0, 7.0] and matrix[0].tolist() == [0.0, 0.0, 0.0]
