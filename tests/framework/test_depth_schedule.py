import pytest
import torch

from engine.loop import generate
from framework.core.sampling import SamplingConfig
from framework.lm.models import tiny_random_model
from framework.lm.target import HFTarget
from proposers import DraftModelProposer
from proposers.common.depth_schedule import DepthSchedule


def test_deeper_after_full_acceptance_shallower_otherwise_within_bounds():
    s = DepthSchedule(depth=2, max_depth=5)
    s.update(torch.tensor([2, 2]), drafted=2)
    assert s.depth == 4
    s.update(torch.tensor([4, 3]), drafted=4)  # one row fell short: the batch shares one depth
    assert s.depth == 3
    s.update(torch.tensor([3]), drafted=3)
    assert s.depth == 5  # capped
    for _ in range(6):
        s.update(torch.tensor([0]), drafted=5)
    assert s.depth == 1


def test_bad_depths_are_refused():
    with pytest.raises(ValueError, match="max_depth"):
        DepthSchedule(depth=4, max_depth=3)
    with pytest.raises(ValueError, match="max_depth"):
        DraftModelProposer(tiny_random_model(), depth=4, adaptive_depth=2)


def test_the_drafted_depth_follows_acceptance():
    model = tiny_random_model(init_std=0.3)
    sizes = []

    class Recording(DraftModelProposer):
        def propose(self, state):
            tree = super().propose(state)
            sizes.append(tree.num_nodes)
            return tree

    # a draft identical to the target accepts everything at greedy: 1, 3, 5, 6, 6, ...
    out = generate(HFTarget(model), Recording(model, depth=1, adaptive_depth=6), torch.tensor([[1, 2, 3]]), 24,
                   SamplingConfig(temperature=0.0))
    assert sizes[:4] == [1, 3, 5, 6], sizes
    plain = generate(HFTarget(model), None, torch.tensor([[1, 2, 3]]), 24, SamplingConfig(temperature=0.0))
    assert torch.equal(out.tokens, plain.tokens)
