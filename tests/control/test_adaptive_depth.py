"""The depth schedule as a policy (framework/control/adaptive.py): two levels deeper after a step whose drafting rows
accepted everything offered, one shallower otherwise, within [1, max_depth]; any proposer gets it, the inner policy's
plan is capped, and greedy tokens and sampled laws stay the target's."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from hydra.utils import instantiate

from engine.loop import DecodeOptions, generate
from framework.control.adaptive import AdaptiveDepth
from framework.control.batch import DepthByBatch
from framework.control.goodput import GoodputPolicy
from framework.core.policy import Plan
from framework.core.sampling import SamplingConfig
from framework.core.tree import CandidateTree
from framework.core.verification import Verification
from framework.lm.models import tiny_random_model
from framework.lm.target import HFTarget
from measurement.common import policy_factory_of
from proposers import DraftModelProposer, PromptLookupProposer
from tests.composed import composed

GREEDY = SamplingConfig(temperature=0.0)


def step(policy: AdaptiveDepth, accepted: list[int], offered: list[int]) -> int:
    """Observe one step whose rows accepted `accepted` nodes of trees `offered` levels deep; the next cap."""
    tree = CandidateTree.empty(len(accepted), torch.device("cpu"))
    result = Verification(torch.zeros(len(accepted), 1, dtype=torch.long), torch.tensor(accepted),
                          torch.full((len(accepted), 1), -1))
    policy.observe(tree, result, SimpleNamespace(drafted=torch.tensor(offered)))
    return policy.plan().depth


def test_deeper_after_full_acceptance_shallower_otherwise_within_bounds():
    policy = AdaptiveDepth(max_depth=5, first_depth=2)
    policy.start(None, 2)
    assert policy.plan() == Plan(2)
    assert step(policy, [2, 2], [2, 2]) == 4
    assert step(policy, [4, 3], [4, 4]) == 3  # one row fell short: the batch shares one depth
    assert step(policy, [3, 3], [3, 3]) == 5  # capped at max_depth
    for _ in range(6):
        step(policy, [0, 0], [5, 5])
    assert policy.plan() == Plan(1)  # never below one level
    policy.start(None, 1)
    assert policy.plan() == Plan(2)  # each generation starts again at first_depth


def test_rows_that_drafted_nothing_teach_nothing():
    policy = AdaptiveDepth(max_depth=8, first_depth=4)
    policy.start(None, 2)
    assert step(policy, [0, 0], [0, 0]) == 4  # a plain step (or a proposer with no candidate): as it was
    assert step(policy, [0, 2], [0, 2]) == 6  # the row kept from drafting is left out of "accepted everything"
    assert step(policy, [1, 0], [2, 0]) == 5


def test_the_schedule_caps_the_inner_plan():
    policy = AdaptiveDepth(max_depth=8, first_depth=2, inner=DepthByBatch({1: 6, 4: 0}))
    policy.start(None, 1)
    assert policy.plan() == Plan(2)  # the schedule's 2 below the batch's 6
    assert step(policy, [2], [2]) == 4 and step(policy, [4], [4]) == 6 and step(policy, [6], [6]) == 6
    policy.admit(3)
    assert policy.plan() == Plan(0)  # the inner's plain step stands


@pytest.mark.parametrize("bad", [dict(max_depth=3, first_depth=4), dict(first_depth=0)])
def test_bad_depths_are_refused(bad):
    with pytest.raises(ValueError, match="1 <= first_depth <= max_depth"):
        AdaptiveDepth(**bad)


def test_a_proposer_refuses_the_schedule_it_no_longer_holds():
    with pytest.raises(TypeError, match=r"DraftModelProposer: `adaptive_depth` .* policy=adaptive"):
        DraftModelProposer(tiny_random_model(), depth=4, adaptive_depth=8)


def offered(proposer, policy, prompt: list[int], tokens: int, model):
    """The tree sizes the target verified, step by step, and the greedy tokens."""
    out = generate(HFTarget(model), proposer, torch.tensor([prompt]), tokens, GREEDY,
                   options=DecodeOptions(policy=policy))
    return [s.nodes for s in out.stats.steps], out.tokens


MODEL = tiny_random_model(init_std=0.3)
CYCLING = tiny_random_model()  # its greedy text from [5, 6, 7, 8] is 33, then 49 20 18 over and over


def test_a_draft_model_follows_the_schedule_and_keeps_greedy_tokens():
    # a draft identical to the target accepts everything at greedy: 1, 3, 5, 6, 6, ...
    sizes, tokens = offered(DraftModelProposer(MODEL, depth=6), AdaptiveDepth(max_depth=6, first_depth=1),
                            [1, 2, 3], 40, MODEL)
    assert sizes[:5] == [1, 3, 5, 6, 6], sizes
    plain = generate(HFTarget(MODEL), None, torch.tensor([[1, 2, 3]]), 40, GREEDY)
    assert torch.equal(tokens, plain.tokens)


def test_a_model_free_proposer_gets_the_schedule_too():
    """Prompt lookup on a text that cycles with period 3 (its continuations are 3 tokens long, all accepted): under
    the schedule the first step offers 1 node, the next 3; as configured, every step offers 3."""
    prompt = [5, 6, 7, 8, 33] + [49, 20, 18] * 4
    scheduled, tokens = offered(PromptLookupProposer(depth=6, max_matches=1), AdaptiveDepth(6, first_depth=1),
                                prompt, 24, CYCLING)
    free, free_tokens = offered(PromptLookupProposer(depth=6, max_matches=1), None, prompt, 24, CYCLING)
    assert scheduled[:3] == [1, 3, 3] and free[:2] == [3, 3], (scheduled, free)
    assert tokens[0].tolist() == free_tokens[0].tolist() == [49, 20, 18] * 8


def test_a_devices_costs_reach_a_cost_sized_inner_policy():
    """The exact check hands a cost-sized policy fixed costs (no clock decides in an enumerated world): through the
    schedule's cap to a goodput policy inside it, and not at all to a policy that reads none."""
    cfg = composed("check", "models=toy", "policy=goodput")
    costs = instantiate(cfg.experiment.exact.policy_costs)
    assert policy_factory_of(cfg, costs)().clocked is False and policy_factory_of(cfg)().clocked is True
    inner = GoodputPolicy()
    AdaptiveDepth(inner=inner).use_costs(costs)
    assert inner.clocked is False and inner.given_draft == costs.draft
    adaptive = composed("check", "models=toy", "policy=adaptive")
    assert isinstance(policy_factory_of(adaptive, costs)(), AdaptiveDepth)  # built, the costs unread
