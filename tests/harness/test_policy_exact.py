"""The goodput policy through the real loop: the exact law of what it emits is the target's, while its
plans and trims change with what each world has drawn; a policy that prunes drawn children by their own
value (deciding on the step's draws, which only the proposer may do before drawing) is caught."""

from framework.control.goodput import GoodputPolicy
from framework.core.sampling import SamplingConfig
from framework.harness.loop_mutants import LoopCase

COSTS = dict(target_costs={0: 1.0, 1: 1.04, 2: 1.08, 4: 1.2, 8: 1.4}, draft_costs=(0.02, 0.06))


class Recording(GoodputPolicy):
    """Notes every (plan depth, nodes verified) it decides, across every world."""

    decisions: set = set()

    def trim(self, tree):
        trimmed, kept = super().trim(tree)
        Recording.decisions.add((self.planned.depth, trimmed.num_nodes))
        return trimmed, kept


class PrunesDrawnChildren(GoodputPolicy):
    """The bug: trims i.i.d. children by their own draft probability (it should leave drawn children alone)."""

    def trim(self, tree):
        super().trim(tree)
        if tree.kind == "point" or tree.num_nodes == 0:
            return tree, None
        keep = tree.scores[0] >= 0.4
        kept = keep.nonzero().flatten()
        if not bool(keep.all()):  # a prefix of the chain: the first unsure node and what hangs below it go
            kept = kept[: int(keep.long().cumprod(0).sum())]
        return tree.keep_nodes(kept), kept


def case(policy, law_depth: int = 3, **proposer) -> LoopCase:
    return LoopCase(proposer, SamplingConfig(), depth=law_depth, policy_factory=lambda: policy(**COSTS))


def test_a_point_tree_sized_by_the_policy_is_exact_and_the_decisions_vary():
    Recording.decisions = set()
    assert case(Recording, branching=2, depth=2, kind="point", sampling=SamplingConfig()).tv() <= 1e-9
    depths, sizes = {d for d, _ in Recording.decisions}, {n for _, n in Recording.decisions}
    assert len(depths) >= 2 and len(sizes) >= 2, Recording.decisions  # it decided differently in different worlds


def test_an_iid_chain_planned_by_the_policy_is_exact():
    Recording.decisions = set()
    assert case(Recording, gamma=2, kind="iid").tv() <= 1e-9
    assert len({d for d, _ in Recording.decisions}) >= 2, Recording.decisions


def test_pruning_drawn_children_by_their_value_is_caught():
    assert case(GoodputPolicy, law_depth=2, gamma=2, kind="iid").tv() <= 1e-9
    assert case(PrunesDrawnChildren, law_depth=2, gamma=2, kind="iid").tv() > 1e-6
