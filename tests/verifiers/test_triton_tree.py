"""The Triton tree path (verifiers/triton_rules.py) against the PyTorch rules; the exact harness on it is
tests/verifiers/test_verifier_contract.py's (a smoke spread by default: the interpreter runs every program in
Python)."""

import pytest
import torch

from framework.core.ragged_tree import RaggedTrees
from framework.core.randomness import ReplaySource
from framework.core.tree import CandidateTree
from harness.cases import exact_cases
from harness.exact import Pipeline, check_case
from verifiers import LOSSLESS, verify
from verifiers.triton_rules import triton_tree_verifier

TRITON_TREE = triton_tree_verifier()
PARENTS = torch.tensor([-1, -1, 0, 0, 1, -1, 2, 6])  # three root children, two grandchildren, a depth-4 path


def tree_inputs(kind, B, V, seed, dtype=torch.float64, same_law=False):
    g = torch.Generator().manual_seed(seed)
    N = PARENTS.numel()
    p = torch.softmax(torch.randn(B, N + 1, V, generator=g, dtype=torch.float64) * 2, -1)
    q = p.clone() if same_law else torch.softmax(torch.randn(B, N + 1, V, generator=g, dtype=torch.float64) * 2, -1)
    tokens = torch.zeros(B, N, dtype=torch.long)
    for row in range(N + 1):
        kids = [i for i, parent in enumerate(PARENTS.tolist()) if parent + 1 == row]
        for b in range(B) if kids else ():
            tokens[b, kids] = torch.multinomial(q[b, row], len(kids), replacement=kind == "iid", generator=g)
    # children by value: the parent's top-ranked tokens (the first of them zeroed in p: a certain rejection)
    if kind == "point":
        for row in range(N + 1):
            kids = [i for i, parent in enumerate(PARENTS.tolist()) if parent + 1 == row]
            if kids:
                tokens[:, kids] = p[:, row].topk(len(kids), -1).indices
        p[torch.arange(B), 0, tokens[:, 0]] = 0
        p /= p.sum(-1, keepdim=True)
    return CandidateTree(tokens, PARENTS, None if kind == "point" else q.to(dtype), kind), p.to(dtype)


@pytest.mark.parametrize("kind, eos", [("point", None), ("iid", 2), ("wor", None),
                                       *(pytest.param(k, e, marks=pytest.mark.slow)
                                         for k, e in (("point", 2), ("iid", None), ("wor", 2)))])
def test_same_uniforms_same_tokens_as_pytorch(kind, eos):
    tree, p = tree_inputs(kind, 48, 300, seed=len(kind) + (eos or 0))
    g = torch.Generator().manual_seed(9)
    draws = [torch.rand(48, 5, 3, generator=g, dtype=torch.float64), torch.rand(48, generator=g, dtype=torch.float64)]
    ours = verify(tree, p, rng=ReplaySource(list(draws)), eos_token_id=eos, verifier=TRITON_TREE)
    ref = verify(tree, p, rng=ReplaySource(list(draws)), eos_token_id=eos, verifier=LOSSLESS)
    assert torch.equal(ours.tokens, ref.tokens) and torch.equal(ours.path, ref.path)
    assert 0 < int(ref.num_accepted.sum()) < 48 * 4  # acceptances and rejections both happened


def test_rules_compute_the_pytorch_laws():
    """The kernels' laws themselves (float32 rows), not only the tokens they lead to."""
    from verifiers.rules import LOSSLESS_RULES, NodeLaw
    from verifiers.triton_rules import TRITON_RULES

    g = torch.Generator().manual_seed(2)
    p, q = (torch.softmax(torch.randn(16, 1000, generator=g) * 3, -1) for _ in range(2))
    token = torch.multinomial(q, 1, generator=g)[:, 0]
    for kind in ("point", "iid", "wor"):
        law = NodeLaw(p, p, q)
        ours, ref = TRITON_RULES[kind], LOSSLESS_RULES[kind]
        torch.testing.assert_close(ours.accept_probability(law, token), ref.accept_probability(law, token))
        after, expected = (ours.after_reject(law, token),
                           ref.after_reject(NodeLaw(p.clone(), p.clone(), q.clone()), token))
        torch.testing.assert_close(after.r, expected.r, rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(after.q, expected.q, rtol=1e-5, atol=1e-7)


def test_p_equals_q_never_nan():
    tree, p = tree_inputs("wor", 8, 40, seed=4, same_law=True)
    res = verify(tree, p, generator=torch.Generator().manual_seed(0), verifier=TRITON_TREE)
    assert (res.num_emitted > 0).all() and not torch.isnan(p).any()


def test_ragged_batches_on_the_triton_path():
    trees = RaggedTrees(torch.tensor([1, 2, 3, 4]), torch.tensor([-1, -1, 0, -1]), [3, 0, 1])
    target = torch.nn.functional.one_hot(torch.tensor([2, 0, 4, 0, 5, 4, 0]), 6).double()  # per request: root, nodes
    out = verify(trees, target, verifier=TRITON_TREE)
    assert out.tokens.tolist() == [[2, 4, -1, -1], [5, -1, -1, -1], [4, 0, -1, -1]]


def test_the_harness_catches_a_planted_bug_in_a_kernel():
    """iid children judged with the point rule's residual (r without c instead of max(r - q, 0))."""
    from verifiers import TreeVerifier
    from verifiers.triton_rules import POINT, TRITON_RULES, TritonRule

    class IidWithPointResidual(TritonRule):
        def after_reject(self, law, token):
            return TritonRule(POINT).after_reject(law, token)

    planted = TreeVerifier({**TRITON_RULES, "iid": IidWithPointResidual(1)})
    case = next(c for c in exact_cases() if c.name == "chain1/iid/T1")
    assert not check_case(case, Pipeline(verifier=planted)).passes(1e-9)
