"""Batch policies (framework/control/batch.py): the depth follows the batch's size as requests join and leave, the
inner policy's plan is capped, and every row still decodes as alone, in tokens and in law."""

from __future__ import annotations

import pytest
import torch

from engine.loop import generate
from engine.scheduler import Request, Scheduler
from framework.control.batch import DepthByBatch, OffAbove
from framework.core.policy import Plan
from framework.core.sampling import SamplingConfig
from framework.lm.models import tiny_random_model
from framework.lm.target import HFTarget
from harness.ragged import check_scheduled_law
from proposers import DraftModelProposer

GREEDY = SamplingConfig(temperature=0)


class Deep:
    """An inner policy that always plans 5 levels and remembers what it heard."""

    def __init__(self):
        self.heard = []

    def start(self, target, batch_size):
        self.heard.append(("start", batch_size))

    def plan(self):
        return Plan(5)

    def trim(self, tree):
        return tree

    def observe(self, tree, result, step):
        pass

    def select(self, rows):
        self.heard.append(("select", int(rows.numel())))

    def admit(self, count):
        self.heard.append(("admit", count))


def test_the_depth_follows_the_batch_size_and_caps_the_inner_plan():
    inner = Deep()
    policy = DepthByBatch({1: 6, 4: 3, 16: 0}, inner)
    policy.start(None, 2)
    assert policy.plan() == Plan(5)  # 2 rows: the entry of 1 (6) leaves the inner 5
    policy.admit(3)
    assert policy.batch == 5 and policy.plan() == Plan(3)
    policy.admit(11)
    assert policy.plan() == Plan(0)
    policy.select(torch.arange(4))
    assert policy.plan() == Plan(3)
    assert inner.heard == [("start", 2), ("admit", 3), ("admit", 11), ("select", 4)]
    assert DepthByBatch({1: 2}).plan() == Plan(2)  # no inner: speculation as configured, capped


def test_speculation_is_off_above_the_concurrency():
    policy = OffAbove(2)
    policy.start(None, 2)
    assert policy.plan() == Plan()
    policy.admit(1)
    assert policy.plan() == Plan(0)


@pytest.mark.parametrize("make, message", [
    (lambda: DepthByBatch({2: 3}), "1 among them"),
    (lambda: DepthByBatch({1: -1}), "depths >= 0"),
    (lambda: OffAbove(0), "concurrency must be an integer >= 1"),
])
def test_a_bad_setting_is_named(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_scheduled_rows_decode_as_alone_and_draft_as_the_table_says():
    model = tiny_random_model("llama", dtype="float64")
    draft = tiny_random_model("llama", dtype="float64", seed=1)
    prompts, budgets = [[5, 9, 2, 7, 11, 3], [7, 7], [3, 1, 4, 1, 5], [2]], [14, 4, 9, 12]
    runner = Scheduler(model, lambda: DraftModelProposer(draft, depth=4, kind="point"), GREEDY, max_batch=3,
                       policy=DepthByBatch({1: 4, 2: 2, 3: 0}))
    done = runner.run([Request(p, b) for p, b in zip(prompts, budgets)])
    assert [f.tokens for f in done] == [generate(HFTarget(model), None, [p], b, GREEDY).tokens[0].tolist()
                                        for p, b in zip(prompts, budgets)]
    # the engine's step records: each step's tree no deeper than the table allows at its batch size
    for record, step in zip(runner.steps, runner.engine_steps):
        cap = {1: 4, 2: 2, 3: 0}[record.decoding]
        assert step.nodes <= cap and int(step.drafted.max()) <= cap
    assert {r.decoding for r in runner.steps} == {1, 2, 3}


def test_the_law_of_scheduled_requests_holds_under_a_batch_policy():
    target = tiny_random_model("llama", vocab_size=3, hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1,
                               dtype="float64", init_std=0.3, seed=0)
    draft = tiny_random_model("llama", vocab_size=3, hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1,
                              dtype="float64", init_std=0.3, seed=1)
    requests = [([1, 2, 0, 1, 1, 2, 0], 3), ([2], 1), ([0, 1], 2)]
    result = check_scheduled_law(target, lambda: DraftModelProposer(draft, depth=2, kind="point"), requests, 2,
                                 SamplingConfig(), 2, policy_factory=lambda: DepthByBatch({1: 2, 2: 1}))
    assert result.passes(1e-9), result
