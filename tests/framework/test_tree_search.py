"""The shared tree search: greedy growth is the best tree for every budget; the budget pays for its cost."""

import itertools
import math

import pytest
import torch

from framework.core.tree_shape import TreeShape
from proposers.search.tree_search import grow_tree, interpolate


def value(choices, accept):
    """1 + sum over nodes of the product of acceptance along the node's rank path."""
    return 1 + sum(math.prod(float(accept[d, r]) for d, r in enumerate(path)) for path in choices)


def all_trees(depth, ranks, size):
    """Every set of `size` rank paths closed under prefixes and earlier siblings."""
    paths = [p for d in range(1, depth + 1) for p in itertools.product(range(ranks), repeat=d)]
    for subset in itertools.combinations(paths, size):
        s = set(subset)
        if all((p[:-1] in s or len(p) == 1) and (p[-1] == 0 or p[:-1] + (p[-1] - 1,) in s) for p in s):
            yield subset


@pytest.mark.parametrize("seed", range(3))
def test_greedy_growth_is_optimal_for_every_budget(seed):
    gen = torch.Generator().manual_seed(seed)
    # per depth, by rank
    accept = torch.rand(3, 2, generator=gen, dtype=torch.float64).sort(dim=1, descending=True).values * 0.9
    tree = grow_tree(accept, 8)
    for n in range(1, 9):
        best = max(value(t, accept) for t in all_trees(3, 2, n))
        assert tree.expected_tokens[n] == pytest.approx(value(tree.choices[:n], accept), abs=1e-12)
        assert tree.expected_tokens[n] == pytest.approx(best, abs=1e-12), n
        TreeShape.from_choices(tree.choices[:n])  # every prefix is a valid tree (prefix-closed)


def test_budget_trades_tokens_for_cost():
    accept = torch.tensor([[0.8, 0.1], [0.7, 0.1], [0.6, 0.1]])
    tree = grow_tree(accept, 6)
    flat = {0: 10.0, 64: 10.0}  # nodes are free: take them all
    assert tree.best_budget(flat) == 6
    steep = {0: 10.0, 1: 10.0, 2: 30.0, 64: 330.0}  # the second node triples the cost
    assert tree.best_budget(steep) == 1
    assert interpolate({0: 1.0, 10: 2.0}, 5) == pytest.approx(1.5) and interpolate({0: 1.0, 10: 2.0}, 20) == 2.0


def test_bad_input():
    with pytest.raises(ValueError, match="probabilities"):
        grow_tree(torch.tensor([[1.5]]), 3)
    with pytest.raises(ValueError, match="depth, ranks"):
        grow_tree(torch.tensor([0.5]), 3)
