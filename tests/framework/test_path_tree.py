"""Token paths -> one point tree: prefixes merged, the budget's best nodes, one shape for the batch."""

import random

import pytest

from framework.core.path_tree import node_paths, tree_from_paths


def test_shared_prefixes_are_one_node_and_siblings_rank_by_score():
    tree = tree_from_paths([[((3, 4, 1), 2.0), ((3, 5), 1.0), ((7,), 0.5)]], budget=32)
    paths = node_paths(tree)[0]
    assert sorted(paths) == sorted([(3,), (3, 4), (3, 4, 1), (3, 5), (7,)])  # (3,) once
    assert tree.kind == "point" and tree.draft_probs is None
    assert paths.index((3,)) < paths.index((7,)) and paths.index((3, 4)) < paths.index((3, 5))  # best sibling first


@pytest.mark.parametrize("seed", range(20))
def test_budget_keeps_an_ancestor_closed_best_set(seed):
    g = random.Random(seed)
    rows = [[(tuple(g.randrange(4) for _ in range(g.randint(1, 4))), g.choice([1.0, 2.0, 3.0])) for _ in range(g.randint(0, 6))]
            for _ in range(g.randint(1, 3))]
    budget = g.randint(1, 8)
    tree = tree_from_paths(rows, budget)
    assert tree.num_nodes <= budget and tree.batch_size == len(rows)
    parents = tree.parents.tolist()
    assert all(p < i for i, p in enumerate(parents))  # topological (the CandidateTree checks it too)
    if len(rows) == 1:  # one row: every node is a real prefix, and the kept ones are the best
        prefixes = {}
        for path, w in rows[0]:
            for end in range(1, len(path) + 1):
                prefixes[path[:end]] = prefixes.get(path[:end], 0.0) + w
        kept = node_paths(tree)[0]
        assert set(kept) <= set(prefixes) and len(kept) == min(budget, len(prefixes))
        worst_kept = min(prefixes[p] for p in kept) if kept else float("inf")
        assert all(prefixes[p] <= worst_kept for p in set(prefixes) - set(kept))


def test_rows_share_one_shape_and_pad_what_they_lack():
    tree = tree_from_paths([[((3, 4), 1.0), ((5,), 1.0)], [((9,), 1.0)]], budget=8, pad_token=0)
    a, b = node_paths(tree)
    assert {(3,), (3, 4), (5,)} == set(a)
    assert (9,) in b and len(set(b)) == 3  # b's other nodes are padding, no path twice
    assert b[a.index((5,))] == (0,) or b[a.index((3,))] == (0,)  # pads start at pad_token


def test_no_path_is_an_empty_tree_and_a_bad_budget_is_named():
    assert tree_from_paths([[], []], budget=4).num_nodes == 0
    with pytest.raises(ValueError, match="budget"):
        tree_from_paths([[((1,), 1.0)]], budget=0)
