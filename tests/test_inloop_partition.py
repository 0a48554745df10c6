"""Document partitioning and item coverage (single process; 2 processes in test_inloop_distributed)."""

from __future__ import annotations

import pytest
import torch

from proctor.inloop.distributed import Coverage, DocumentSampler, rank_documents


@pytest.mark.parametrize("n, world", [(0, 1), (1, 3), (7, 2), (10, 3), (1000, 8)])
def test_rank_documents_cover_each_document_once_without_padding(n, world):
    blocks = [rank_documents(n, r, world) for r in range(world)]
    seen = [d for b in blocks for d in b]
    assert seen == list(range(n))
    assert max(map(len, blocks)) - min(map(len, blocks)) <= 1


def test_rank_documents_rejects_a_bad_rank():
    with pytest.raises(ValueError, match="rank 2 is not in a world of 2"):
        rank_documents(5, 2, 2)


class Task:
    documents = [0, 0, 1, 2, 2, 2, 3, 1]  # items of a document need not be adjacent


def test_document_sampler_keeps_a_documents_items_on_one_rank():
    per_rank = [list(DocumentSampler(Task(), rank=r, world_size=2)) for r in range(2)]
    assert per_rank == [[0, 1, 2, 7], [3, 4, 5, 6]]
    assert sorted(per_rank[0] + per_rank[1]) == list(range(len(Task.documents)))
    assert list(DocumentSampler(Task())) == list(range(8))  # not distributed: everything


def test_coverage_accepts_each_item_once_and_names_what_is_wrong():
    cov = Coverage()
    cov.add(torch.tensor([0, 2]), num_items=4)
    cov.add(torch.tensor([1, 3]), num_items=4)
    cov.check("chunks")
    cov.add(torch.tensor([3]), num_items=4)
    with pytest.raises(ValueError, match="1 were scored more than once"):
        cov.check("chunks")
    cov.reset()
    cov.add(torch.tensor([0]), num_items=4)
    with pytest.raises(ValueError, match="3 of 4 chunks were never scored.*DocumentSampler"):
        cov.check("chunks")
    with pytest.raises(ValueError, match="no rows were scored"):
        Coverage().check("rows")
