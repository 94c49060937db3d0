"""Children drawn from a point mass: the same tokens as the general draws, without spending a coin."""

import pytest
import torch

from framework.core.drafting import draw_children
from framework.core.randomness import ReplaySource


@pytest.mark.parametrize("kind", ["iid", "wor"])
def test_point_mass_draws_match_the_general_draws_and_spend_no_coin(kind):
    atoms = torch.tensor([3, 0, 5])
    q = torch.nn.functional.one_hot(atoms, 6).double()  # [B, V]: a greedy law per row
    k = 3
    coins = [torch.rand(3, k)] if kind == "iid" else [torch.rand(3) for _ in range(k)]  # what the general path asks for
    general = draw_children(q, k, kind, ReplaySource(list(coins)))
    spare = ReplaySource([])  # any coin asked for raises
    fast = draw_children(q, k, kind, spare, point_mass=True)
    assert fast.tolist() == general.tolist() == atoms[:, None].expand(-1, k).tolist()


def test_point_children_ignore_point_mass():
    """top-k of a one-hot law is the atom then the lowest ids, not k copies of the atom."""
    q = torch.nn.functional.one_hot(torch.tensor([2]), 5).float()
    assert draw_children(q, 2, "point", ReplaySource([]), point_mass=True).tolist() == [[2, 0]]
