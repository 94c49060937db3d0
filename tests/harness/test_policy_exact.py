"""The goodput policy through the real loop: the exact law of what it emits is the target's, while its
plans and trims change with what each world has drawn. (A policy that prunes drawn children by their own
value is caught: harness/loop_mutants.py, "policy-prunes-drawn-children".)"""

import pytest

from framework.control.goodput import GoodputPolicy
from framework.core.sampling import SamplingConfig
from harness.loop_mutants import POLICY_COSTS as COSTS
from harness.loop_mutants import LoopCase


class Recording(GoodputPolicy):
    """Notes every (plan depth, nodes verified) it decides, across every world."""

    decisions: set = set()

    def trim(self, tree):
        trimmed = super().trim(tree)
        Recording.decisions.add((self.planned.depth, trimmed.num_nodes))
        return trimmed


def case(policy, law_depth: int = 3, **proposer) -> LoopCase:
    return LoopCase(proposer, SamplingConfig(), depth=law_depth, policy_factory=lambda: policy(**COSTS, first_depth=3))


def test_a_point_tree_sized_by_the_policy_is_exact_and_the_decisions_vary():
    Recording.decisions = set()
    assert case(Recording, branching=2, depth=2, kind="point", sampling=SamplingConfig()).tv() <= 1e-9
    depths, sizes = {d for d, _ in Recording.decisions}, {n for _, n in Recording.decisions}
    assert len(depths) >= 2 and len(sizes) >= 2, Recording.decisions  # it decided differently in different worlds


# ~8 s (801 worlds, one at a time: the policy sizes one tree per world): -m slow. The default tier keeps the point tree
# above, whose decisions vary, and the i.i.d. chain under the policy at two tokens, where a policy that prunes drawn
# children is caught (harness/loop_mutants.py POLICY_CHAIN).
@pytest.mark.slow
def test_an_iid_chain_planned_by_the_policy_is_exact():
    Recording.decisions = set()
    assert case(Recording, depth=2, kind="iid").tv() <= 1e-9
    assert len({d for d, _ in Recording.decisions}) >= 2, Recording.decisions


