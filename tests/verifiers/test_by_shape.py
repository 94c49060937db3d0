"""Block and traversal verification on ragged batches (vLLM's chains, SGLang's flat trees): each request's
output law, every coin enumerated, is the law of the same rule on that request alone (whose exactness the
harness proves), and the requests stay independent."""

import pytest
import torch

import verifiers.by_shape as by_shape
from framework.core.randomness import TorchSource
from framework.core.tree import CandidateTree
from harness.enumerate import enumerate_law
from verifiers import verify
from verifiers.adapters import flat_trees, padded_chains, ragged_chains
from verifiers.block import BlockVerifier
from verifiers.traversal import TraversalVerifier

V = 3


class OneWorld:
    """A whole batch of requests inside one world of the enumerating source (batch_size=1)."""

    def __init__(self, source):
        self.source = source

    def uniform(self, shape, device="cpu"):
        return self.source.uniform((1, *shape), device)[0]

    def categorical(self, probs):
        return self.source.categorical(probs[None])[0]


def batch_law(call) -> dict:
    """Exact law of call(rng) -> tokens [B, W] (a tuple of rows per outcome)."""
    return enumerate_law(lambda source: [tuple(map(tuple, call(OneWorld(source)).tolist()))], batch_size=1)


def marginal(joint: dict, b: int) -> dict:
    out: dict = {}
    for outcome, weight in joint.items():
        row = tuple(t for t in outcome[b] if t >= 0)
        out[row] = out.get(row, 0.0) + weight
    return out


def assert_same_law(a: dict, b: dict):
    assert set(a) | set(b)
    for key in set(a) | set(b):
        assert a.get(key, 0.0) == pytest.approx(b.get(key, 0.0), abs=1e-12), key


def probs(gen, rows):
    return torch.softmax(torch.randn(rows, V, generator=gen, dtype=torch.float64) * 2, -1)


def vllm_requests(seed, counts=(2, 0, 3, 2)):
    """Per request: (drafts [k], draft laws [k, V], target laws [k, V], bonus [1, 1])."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for k in counts:
        q, p = probs(gen, k), probs(gen, k)
        drafts = (torch.stack([torch.multinomial(q[t], 1, generator=gen)[0] for t in range(k)]) if k
                  else torch.zeros(0, dtype=torch.long))
        out.append((drafts, q, p, torch.randint(0, V, (1, 1), generator=gen)))
    return out


def alone_as_padded_chain(request, verifier):
    """The reference: the request alone as a CandidateTree (adapters.padded_chains, the leaf's law a
    point mass on the bonus), verified by the rule's own CandidateTree path."""
    drafts, q, p, bonus = request
    tree, p_tree = padded_chains(drafts, [drafts.numel()], q, p, bonus)
    return lambda rng: verify(tree, p_tree, rng=rng, verifier=verifier).tokens


def vllm_call(requests, verifier):
    drafts, q, p, bonus = (torch.cat([r[i] for r in requests]) for i in range(4))
    counts = [r[0].numel() for r in requests]
    return lambda rng: ragged_chains(drafts, counts, q, p, bonus, verifier=verifier, rng=rng)


def assert_each_request_decides_as_alone(batch, requests, alone, verifier):
    """Each request's law in the batch is the rule's on it alone; the first and last are independent."""
    joint = batch_law(batch(requests, verifier))
    for b, request in enumerate(requests):
        assert_same_law(marginal(joint, b), marginal(batch_law(alone(request, verifier)), 0))
    first, last = marginal(joint, 0), marginal(joint, len(requests) - 1)
    pair: dict = {}
    for outcome, weight in joint.items():
        key = (tuple(t for t in outcome[0] if t >= 0), tuple(t for t in outcome[-1] if t >= 0))
        pair[key] = pair.get(key, 0.0) + weight
    assert_same_law(pair, {(a, c): first[a] * last[c] for a in first for c in last})


@pytest.mark.parametrize("seed", [0, 1])
def test_vllm_chains_under_block_verification_decide_as_each_request_alone(seed):
    assert_each_request_decides_as_alone(vllm_call, vllm_requests(seed), alone_as_padded_chain, BlockVerifier())


def test_the_bonus_is_what_a_fully_accepted_chain_emits():
    """A leaf reads a point mass on the given bonus (vLLM's last target row is not passed)."""
    requests = vllm_requests(0, counts=(2,))
    drafts, q, p, bonus = requests[0]
    p = torch.nn.functional.one_hot(drafts, V).double()  # the target agrees: the chain is always accepted
    law = batch_law(vllm_call([(drafts, q, p, bonus)], BlockVerifier()))
    assert law == {((*drafts.tolist(), int(bonus)),): pytest.approx(1.0)}


def test_a_leaf_judged_by_a_table_row_instead_of_its_bonus_is_caught(monkeypatch):
    requests, block = vllm_requests(1, counts=(2, 1)), BlockVerifier()
    clean = [marginal(batch_law(alone_as_padded_chain(r, block)), 0) for r in requests]
    real = by_shape._laws
    monkeypatch.setattr(by_shape, "_laws", lambda table, rows, leaf_atoms: real(table, rows, None))
    joint = batch_law(vllm_call(requests, block))
    with pytest.raises(AssertionError):
        for b in range(len(requests)):
            assert_same_law(marginal(joint, b), clean[b])


def tree_requests(seed, shapes=([-1, -1, 0], [], [-1, 0], [-1, -1, 0])):
    """SGLang layout per request: (parents, drafts [n], target [n+1, V], draft [n+1, V]), wor siblings."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for parents in shapes:
        n = len(parents)
        p, q = probs(gen, n + 1), probs(gen, n + 1)
        drafts = torch.zeros(n, dtype=torch.long)
        for row in range(n + 1):
            kids = [i for i, parent in enumerate(parents) if parent + 1 == row]
            if kids:
                drafts[kids] = torch.multinomial(q[row], len(kids), generator=gen)
        out.append((list(parents), drafts, p, q))
    return out


def alone_as_candidate_tree(request, verifier):
    parents, drafts, p, q = request
    tree = CandidateTree(drafts[None], parents, q[None], "wor")
    return lambda rng: verify(tree, p[None], rng=rng, verifier=verifier).tokens


def tree_call(requests, verifier):
    parents = sum((r[0] for r in requests), [])
    drafts, p, q = (torch.cat([r[i] for r in requests]) for i in (1, 2, 3))
    counts = [len(r[0]) for r in requests]
    rule = {} if verifier is None else {"verifier": verifier}
    return lambda rng: flat_trees(drafts, counts, parents, q, p, kind="wor", rng=rng, **rule).tokens


@pytest.mark.parametrize("seed", [0, 1])
def test_flat_trees_under_traversal_decide_as_each_request_alone(seed):
    assert_each_request_decides_as_alone(tree_call, tree_requests(seed), alone_as_candidate_tree, TraversalVerifier())


def test_ragged_trees_go_to_the_token_rule_under_block_verification():
    requests = tree_requests(0)
    token = tree_call(requests, None)  # the adapter's default rule
    with pytest.warns(UserWarning, match="judges chains"):
        out = tree_call(requests, BlockVerifier())(TorchSource(seed=3))
    assert torch.equal(out, token(TorchSource(seed=3)))


@pytest.mark.parametrize("verifier", [None, BlockVerifier()], ids=["token", "block"])
def test_a_batch_without_drafts_emits_its_bonus_tokens(verifier):
    """No request drafted: the tables have no rows (the input check used to fail on the empty table)."""
    empty = torch.zeros(0, V, dtype=torch.float64)
    bonus = torch.tensor([[2], [0]])
    kwargs = {} if verifier is None else {"verifier": verifier}
    out = ragged_chains(torch.zeros(0, dtype=torch.long), [0, 0], None, empty, bonus, **kwargs)
    assert out.tolist() == [[2], [0]]
