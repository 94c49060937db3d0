import pytest
import torch

from framework.core.randomness import ReplaySource, TorchSource
from framework.core.tree import CandidateTree
from framework.core.tree_shape import TreeShape
from verifiers import verify


def random_inputs(B, parents, V, kind, seed=0):
    g = torch.Generator().manual_seed(seed)
    N = len(parents)
    p = torch.softmax(torch.randn(B, N + 1, V, generator=g) * 2, -1)
    q = torch.softmax(torch.randn(B, N + 1, V, generator=g) * 2, -1)
    parent_rows = torch.tensor(parents) + 1
    tokens = torch.multinomial(q[:, parent_rows].reshape(-1, V), 1, generator=g).reshape(B, N)
    return CandidateTree.from_parents(tokens, parents, q, kind), p


def test_public_api_from_the_issue():
    tokens = torch.tensor([[1, 2], [0, 0]])
    q = torch.full((2, 3, 4), 0.25)
    tree = CandidateTree.chain(tokens, draft_probs=q, kind="iid")
    res = verify(tree, torch.full((2, 3, 4), 0.25), generator=torch.Generator().manual_seed(0))
    assert res.tokens.shape == (2, 3) and res.num_accepted.tolist() == [2, 2]  # p == q: always accepted
    assert res.path.tolist() == [[0, 1], [0, 1]]
    assert (res.tokens[:, :2] == tokens).all() and (res.tokens[:, 2] >= 0).all()


@pytest.mark.parametrize("kind", ["point", "iid", "wor"])
def test_batched_rows_match_rows_alone(kind):
    parents = TreeShape.full(2, 2).parents.tolist()
    tree, p = random_inputs(16, parents, 6, kind)
    if kind == "wor":  # wor siblings must differ
        tree.tokens[:, 1] = (tree.tokens[:, 0] + 1) % 6
        tree.tokens[:, 3] = (tree.tokens[:, 2] + 1) % 6
        tree.tokens[:, 5] = (tree.tokens[:, 4] + 1) % 6
        tree.draft_probs.clamp_min_(1e-3)
        tree.draft_probs /= tree.draft_probs.sum(-1, keepdim=True)
    g = torch.Generator().manual_seed(1)
    coins, final = (torch.rand(16, 3, 2, generator=g, dtype=torch.float64),
                    torch.rand(16, generator=g, dtype=torch.float64))
    batched = verify(tree, p, rng=ReplaySource([coins, final]))
    for b in range(16):
        row_tree = CandidateTree(tree.tokens[b : b + 1], tree.parents, tree.draft_probs[b : b + 1], kind)
        alone = verify(row_tree, p[b : b + 1], rng=ReplaySource([coins[b : b + 1], final[b : b + 1]]))
        assert torch.equal(alone.tokens[0], batched.tokens[b])
        assert torch.equal(alone.path[0], batched.path[b])


def test_same_seed_same_output():
    tree, p = random_inputs(64, [-1, 0, 1, -1], 50, "iid")
    a = verify(tree, p, generator=torch.Generator().manual_seed(7))
    b = verify(tree, p, generator=torch.Generator().manual_seed(7))
    c = verify(tree, p, generator=torch.Generator().manual_seed(8))
    assert torch.equal(a.tokens, b.tokens) and not torch.equal(a.tokens, c.tokens)


def test_eos_ends_the_row():
    tokens = torch.tensor([[3, 0, 2]])  # EOS = 0 at depth 2
    p = torch.zeros(1, 4, 4)
    p[0, :, :] = torch.tensor([0.0, 0.0, 0.0, 1.0])
    p[0, 1] = torch.tensor([1.0, 0, 0, 0])
    p[0, 2] = torch.tensor([0, 0, 1.0, 0])
    res = verify(CandidateTree.chain(tokens), p, rng=TorchSource(seed=0), eos_token_id=0)
    assert res.tokens.tolist() == [[3, 0, -1, -1]] and res.num_accepted.tolist() == [2]


def test_greedy_chain_accepts_argmax_path_only():
    V = 5
    p = torch.nn.functional.one_hot(torch.tensor([[1, 2, 3, 4]]), V).double()
    res = verify(CandidateTree.chain(torch.tensor([[1, 2, 0]])), p, generator=torch.Generator().manual_seed(0))
    assert res.tokens.tolist() == [[1, 2, 3, -1]] and res.num_accepted.tolist() == [2]


def _bad(kind="iid"):
    tree, p = random_inputs(2, [-1, 0], 5, kind)
    return tree, p


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda t, p: (t, p[:, :2]), r"target_probs must be \[B, N\+1, V\]"),
        (lambda t, p: (t, p.log()), "negative"),
        (lambda t, p: (t, p.masked_fill(p > 0.5, float("nan"))), "NaN"),
        (lambda t, p: (t, p * 1.1), "does not sum to 1"),
        (lambda t, p: (CandidateTree.chain(t.tokens + 5, t.draft_probs, "iid"), p), "tokens must lie in"),
        (lambda t, p: (CandidateTree.chain(t.tokens,
                                           t.draft_probs[..., :4] / t.draft_probs[..., :4].sum(-1, keepdim=True),
                                           "iid"), p), "vocabulary"),
        (lambda t, p: (CandidateTree.chain(t.tokens,
                                           t.draft_probs.scatter(-1, t.tokens[:, :1, None].expand(-1, 3, 1), 0.0) / 1,
                                           "iid"), p), "zero draft probability|does not sum"),
    ],
)
def test_bad_input_is_named(mutate, message):
    tree, p = mutate(*_bad())
    with pytest.raises(ValueError, match=message):
        verify(tree, p)


def test_zero_q_for_drawn_token_is_named():
    tree, p = _bad()
    q = tree.draft_probs.clone()
    q[0, 0, tree.tokens[0, 0]] = 0
    q = q / q.sum(-1, keepdim=True)
    with pytest.raises(ValueError, match="zero draft probability"):
        verify(CandidateTree.chain(tree.tokens, q, "iid"), p)
