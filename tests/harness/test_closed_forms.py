"""Acceptance-length formulas hold exactly under the enumerating source."""

import math

import pytest
import torch

from framework.core.sampling import process_logits
from framework.core.tree_shape import TreeShape
from harness.cases import MEDUSA_CHOICES
from harness.enumerate import enumerate_law
from harness.exact import ExactCase, Pipeline, propose, step_tokens
from harness.toy import ToyLM


def expected_tokens_per_step(case: ExactCase) -> float:
    law = enumerate_law(lambda rng: [len(t) for t in step_tokens(case, Pipeline(), case.prompt, rng)])
    return sum(n * w for n, w in law.items())


@pytest.mark.parametrize("gamma", [1, 2, 3, 4])
@pytest.mark.parametrize("kind", ["iid", "wor"])
def test_chain_with_constant_alpha(gamma, kind):
    p = torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=torch.float64)
    q = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    alpha = torch.minimum(p, q).sum().item()  # acceptance rate, the same at every depth
    case = ExactCase("closed", ToyLM.unigram(p.log()), ToyLM.unigram(q.log()), TreeShape.chain(gamma), kind)
    expected = (1 - alpha ** (gamma + 1)) / (1 - alpha)
    assert math.isclose(expected_tokens_per_step(case), expected, abs_tol=1e-12)


@pytest.mark.parametrize("shape", [TreeShape.full(2, 3), TreeShape.from_choices(MEDUSA_CHOICES), TreeShape.full(4, 1)])
def test_point_tree_is_one_plus_path_products(shape):
    target, draft = ToyLM.random(5, 11), ToyLM.random(5, 12)
    case = ExactCase("closed", target, draft, shape, "point")
    tree = propose(case, Pipeline(), torch.tensor([case.prompt]), rng=None)  # point drafts use no coins
    p = process_logits(target.tree_logits(torch.tensor([case.prompt]), tree.tokens, tree.parents), case.sampling)[0]
    reach = {}
    for i, parent in enumerate(tree.parents.tolist()):
        reach[i] = reach.get(parent, 1.0) * p[parent + 1, tree.tokens[0, i]].item()
    assert math.isclose(expected_tokens_per_step(case), 1 + sum(reach.values()), abs_tol=1e-12)
