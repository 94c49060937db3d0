"""One request of a batch may opt out of speculation (`speculate=False`): it decodes plainly while the
others speculate, in the same forwards and one verification call."""

import pytest
import torch

from engine.loop import generate
from framework.core.sampling import SamplingConfig
from framework.lm.models import tiny_random_model
from framework.lm.target import HFTarget
from proposers import DraftModelProposer

PROMPTS = torch.tensor([[4, 9, 2, 7], [7, 7, 1, 3], [30, 2, 11, 5]])
GREEDY = SamplingConfig(temperature=0)


@pytest.fixture(scope="module")
def model():
    return tiny_random_model("llama", seed=0, dtype="float64")


def test_a_row_that_may_not_speculate_decodes_plainly_beside_rows_that_do(model):
    self_draft = DraftModelProposer(model, depth=3)  # accepts everything it drafts: the rows that may, accept
    out = generate(HFTarget(model), self_draft, PROMPTS, 16, GREEDY, speculate=[True, False, True])
    accepted = out.stats.per_row(3)  # [steps, rows]
    assert bool((accepted[:, 1] <= 0).all()) and int(accepted[:, 0].max()) > 0 and int(accepted[:, 2].max()) > 0
    for row in range(3):
        alone = generate(HFTarget(model), None, PROMPTS[row:row + 1], 16, GREEDY).tokens[0]
        assert out.tokens[row].tolist() == alone.tolist()


def test_no_row_speculating_is_plain_decoding(model):
    out = generate(HFTarget(model), DraftModelProposer(model, depth=3), PROMPTS, 8, GREEDY, speculate=[False] * 3)
    assert all(step.nodes == 0 for step in out.stats.steps) and len(out.stats.steps) == 7


def test_the_switch_needs_one_flag_per_row(model):
    with pytest.raises(ValueError, match="one flag per row"):
        generate(HFTarget(model), DraftModelProposer(model), PROMPTS, 4, GREEDY, speculate=[True, False])
