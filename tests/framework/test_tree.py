import pytest
import torch

from framework.core.tree import CandidateTree
from framework.core.tree_shape import TreeShape


def test_chain_views():
    tree = CandidateTree.chain(torch.tensor([[5, 6, 7]]))
    assert tree.parents.tolist() == [-1, 0, 1]
    assert tree.depth().tolist() == [1, 2, 3]
    assert tree.paths() == [[0, 1, 2]]
    mask = tree.ancestor_mask()
    assert mask.tolist() == [[i >= j for j in range(4)] for i in range(4)]


def test_from_parents_views():
    #      root
    #     /    \
    #    0      1
    #   / \     |
    #  2   3    4
    tree = CandidateTree.from_parents(torch.tensor([[1, 2, 3, 4, 5]]), [-1, -1, 0, 0, 1])
    assert tree.depth().tolist() == [1, 1, 2, 2, 2]
    assert tree.paths() == [[0, 2], [0, 3], [1, 4]]
    mask = tree.ancestor_mask()
    assert mask[3 + 1].nonzero().flatten().tolist() == [0, 1, 4]  # root, node 0, node 3
    assert mask[4 + 1].nonzero().flatten().tolist() == [0, 2, 5]


def test_from_paths_medusa_choices():
    topk = torch.tensor([[[10, 11, 12], [20, 21, 22]]])  # [B=1, D=2, K=3]
    tree = CandidateTree.from_paths([(1,), (0,), (0, 2), (0, 0)], topk)
    # ordered by depth then lexicographically: (0,), (1,), (0,0), (0,2)
    assert tree.tokens.tolist() == [[10, 11, 20, 22]]
    assert tree.parents.tolist() == [-1, -1, 0, 0]
    assert tree.kind == "point"


def test_shapes():
    assert TreeShape.full(2, 3).num_nodes == 14
    assert TreeShape.full(8, 1).parents.tolist() == [-1] * 8
    assert TreeShape.chain(0).num_nodes == 0


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(tokens=torch.tensor([[1, 2]]), parents=torch.tensor([-1, 1])), "not topological"),
        (dict(tokens=torch.tensor([[1, 2]]), parents=torch.tensor([-1, -2])), "not topological"),
        (dict(tokens=torch.tensor([[1, 2]]), parents=torch.tensor([-1])), "parents has 1"),
        (dict(tokens=torch.tensor([1, 2]), parents=torch.tensor([-1, 0])), "tokens must be"),
        (dict(tokens=torch.tensor([[1]]), parents=torch.tensor([-1]), kind="iid"), "needs draft_probs"),
        (dict(tokens=torch.tensor([[1]]), parents=torch.tensor([-1]), kind="sampled"), "kind must be"),
        (dict(tokens=torch.tensor([[1]]), parents=torch.tensor([-1]), draft_probs=torch.ones(1, 1, 3) / 3),
         r"\[B, N\+1, V\]"),
    ],
)
def test_bad_trees_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        CandidateTree(**kwargs)


def test_bad_choices():
    with pytest.raises(ValueError, match="no parent choice"):
        TreeShape.from_choices([(0,), (1, 0)])


def test_within_depth_keeps_whole_levels_and_says_which_nodes():
    # root -> 0, 1; 0 -> 2, 3; 2 -> 4: cut at depth 2 keeps 0..3, with their laws
    tokens = torch.tensor([[5, 6, 7, 8, 9]])
    q = torch.arange(6.0)[None, :, None].expand(1, 6, 3).clone()  # row i holds the value i
    tree = CandidateTree.from_parents(tokens, [-1, -1, 0, 0, 2], q, "iid")
    cut = tree.within_depth(2)
    assert cut.origin.tolist() == [0, 1, 2, 3] and cut.parents.tolist() == [-1, -1, 0, 0]
    assert cut.tokens.tolist() == [[5, 6, 7, 8]] and cut.draft_probs[0, :, 0].tolist() == [0, 1, 2, 3, 4]
    assert tree.within_depth(3) is tree and tree.origin is None
    cut = tree.within_depth(0)
    assert cut.num_nodes == 0 and cut.origin.numel() == 0 and cut.draft_probs.shape == (1, 1, 3)


def test_a_cut_of_a_cut_maps_a_path_back_to_the_drafted_nodes():
    # root -> 0, 1; 0 -> 2, 3; 1 -> 4; 2 -> 5: keep {1, 4} (drop 0's subtree), then cut to depth 1
    tree = CandidateTree.from_parents(torch.tensor([[5, 6, 7, 8, 9, 10]]), [-1, -1, 0, 0, 1, 2])
    kept = tree.keep_nodes(torch.tensor([1, 4]))
    assert kept.origin.tolist() == [1, 4] and kept.tokens.tolist() == [[6, 9]]
    assert kept.drafted(torch.tensor([[0, 1, -1]])).tolist() == [[1, 4, -1]]
    shallow = kept.within_depth(1)
    assert shallow.origin.tolist() == [1] and shallow.drafted(torch.tensor([[0, -1]])).tolist() == [[1, -1]]
    assert tree.drafted(torch.tensor([[0, 2]])).tolist() == [[0, 2]]  # the drafted tree maps to itself


def test_float_parents_are_refused():
    with pytest.raises(ValueError, match="parents must hold integers"):
        CandidateTree.from_parents(torch.tensor([[1, 2]]), [-1.0, 0.5])


def test_a_shape_computes_its_views_once_and_its_trees_share_them():
    shape = TreeShape.from_choices([(0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0)])
    assert shape.depth.tolist() == [1, 1, 2, 2, 2, 3] and shape.max_depth == 3
    assert [level.tolist() for level in shape.levels] == [[0, 1], [2, 3, 4], [5]]
    assert shape.child_lists == [[0, 1], [2, 3], [4], [5], [], [], []]
    assert shape.children.tolist()[:3] == [[0, 1], [2, 3], [4, -1]]
    assert shape.path_table.tolist()[6] == [0, 2, 5] and shape.path_table.tolist()[0] == [-1, -1, -1]
    mask = shape.ancestors
    assert mask[6].nonzero().flatten().tolist() == [0, 1, 3, 6]  # root, nodes 0, 2, 5 (rows shifted by one)
    assert shape.paths == [[0, 3], [1, 4], [0, 2, 5]] and not shape.is_chain
    first = CandidateTree(torch.zeros(2, 6, dtype=torch.long), shape)
    second = CandidateTree(torch.ones(2, 6, dtype=torch.long), shape)
    assert first.shape is second.shape is shape
    assert first.ancestor_mask() is second.ancestor_mask() is mask  # not rebuilt per tree
    # from parents: the same facts
    assert torch.equal(CandidateTree(first.tokens, shape.parents.clone()).ancestor_mask(), mask)
    first_two = shape.prefix(2)
    assert shape.prefix(2) is first_two and first_two.parents.tolist() == [-1, -1]  # built once
    assert TreeShape.chain(3).is_chain and TreeShape.chain(0).max_depth == 0


def test_a_bad_shape_is_refused_once_at_construction():
    with pytest.raises(ValueError, match="not topological"):
        TreeShape(torch.tensor([-1, 2, 0]))
    with pytest.raises(ValueError, match="same shape as parents"):
        TreeShape(torch.tensor([-1, 0]), torch.tensor([0]))
