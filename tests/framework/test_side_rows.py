"""Side rows ride in the verify forward: tree logits untouched, their own logits right, KV never kept."""

import pytest
import torch

from framework.core.side_rows import SideRows, forward_mask
from framework.core.tree import CandidateTree
from framework.lm.models import tiny_random_model
from framework.lm.target import HFTarget
from proposers.ngram.lookahead import window_pattern
from verifiers import Verification

MODEL = tiny_random_model("llama", vocab_size=32, seed=5, dtype="float64", init_std=0.3)
PROMPT = torch.tensor([[3, 1, 4, 1, 5], [9, 2, 6, 5, 3]])
TREE = CandidateTree.from_parents(torch.tensor([[7, 8, 9], [1, 2, 3]]), [-1, 0, -1])


def window(levels=2, width=3, tree_nodes=3, seed=0):
    depth, sees_side = window_pattern(levels, width)
    tokens = torch.randint(0, 32, (2, levels * width), generator=torch.Generator().manual_seed(seed))
    sees_tree = torch.zeros(levels * width, tree_nodes + 1, dtype=torch.bool)
    sees_tree[:, 0] = True
    return SideRows(tokens, depth, sees_tree, sees_side)


ROOT = torch.tensor([2, 7])  # the last emitted token of each row


def started(backend="reference"):
    target = HFTarget(MODEL, backend=backend)
    target.prefill(PROMPT)
    return target


@torch.no_grad()
def plain_logits(sequence: list[int]) -> torch.Tensor:
    return MODEL(torch.tensor([sequence])).logits[0, -1]


def test_tree_logits_do_not_see_side_rows():
    alone = started().forward_tree(ROOT, TREE)
    side = window()
    both = started().forward_tree(ROOT, TREE, side)
    torch.testing.assert_close(both.logits, alone.logits, rtol=1e-10, atol=1e-10)
    assert both.side_logits.shape == (2, side.num_rows, 32) and alone.side_logits is None


def test_each_window_row_is_one_consecutive_sequence():
    """Row (l, i) sees the root, level 0 up to column i and its own column's levels 1..l: its logits
    are a plain forward of the prompt, the root and those tokens in position order."""
    levels, width = 3, 3
    side = window(levels, width)
    out = started().forward_tree(ROOT, TREE, side).side_logits
    depth = side.depth.tolist()
    for b, root in enumerate(ROOT.tolist()):
        for row in range(side.num_rows):
            seen = [j for j in range(side.num_rows) if side.sees_side[row, j]]
            assert sorted(depth[j] for j in seen) == list(range(1, depth[row] + 1))  # consecutive positions
            sequence = PROMPT[b].tolist() + [root] + [int(side.tokens[b, j])
                                                      for j in sorted(seen, key=lambda j: depth[j])]
            torch.testing.assert_close(out[b, row], plain_logits(sequence), rtol=1e-9, atol=1e-9)


def test_commit_keeps_no_side_row():
    """After a step with side rows, the cache holds exactly what a step without them would."""
    result = Verification(torch.tensor([[7, 8, 5], [1, 4, -1]]), torch.tensor([2, 1]), torch.tensor([[0, 1], [2, -1]]))
    with_side, without = started(), started()
    with_side.forward_tree(ROOT, TREE, window())
    without.forward_tree(ROOT, TREE)
    for t in (with_side, without):
        t.commit(result)
    assert with_side.lm.length.tolist() == without.lm.length.tolist() == [8, 7]
    next_tree = CandidateTree.chain(torch.tensor([[1], [2]]))
    next_root = torch.tensor([5, 4])  # the token each row emitted at the step
    torch.testing.assert_close(with_side.forward_tree(next_root, next_tree).logits,
                               without.forward_tree(next_root, next_tree).logits, rtol=1e-10, atol=1e-10)


def test_triton_backend_serves_the_side_pattern():
    model = tiny_random_model("llama", vocab_size=32, seed=5, dtype="float32", init_std=0.3)
    outs = []
    for backend in ("reference", "triton"):
        target = HFTarget(model, backend=backend)
        target.prefill(PROMPT)
        outs.append(target.forward_tree(ROOT, TREE, window()))
    torch.testing.assert_close(outs[1].side_logits, outs[0].side_logits, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(outs[1].logits, outs[0].logits, rtol=1e-4, atol=1e-4)


def test_bad_side_rows_are_named():
    with pytest.raises(ValueError, match=r"tokens \[B, S\]"):
        SideRows(torch.zeros(1, 2, dtype=torch.long), torch.zeros(3, dtype=torch.long),
                 torch.ones(2, 1, dtype=torch.bool), torch.ones(2, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="depths must be >= 0"):
        SideRows(torch.zeros(1, 1, dtype=torch.long), torch.tensor([-1]), torch.ones(1, 1, dtype=torch.bool),
                 torch.ones(1, 1, dtype=torch.bool))
    with pytest.raises(ValueError, match="tree has 4"):
        forward_mask(torch.ones(4, 4, dtype=torch.bool), window(tree_nodes=1))
