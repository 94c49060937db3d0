"""RaggedTrees: requests of different shapes in one walk decide exactly as each request alone.

Row b's coins are uniforms[b, level, slot] whatever the batch holds, so a ragged batch and the
request verified alone (a CandidateTree, whose exactness the harness proves) must give the same
tokens under the same injected uniforms: raggedness inherits the harness's proof.
"""

import pytest
import torch

from framework.core.ragged_tree import RaggedTrees
from framework.core.randomness import ReplaySource
from framework.core.tree import CandidateTree
from framework.core.tree_shape import children_table, depths
from verifiers import verify
from verifiers.adapters import padded_chains

V = 7


def random_request(gen, kind):
    """(parents, tokens [n], target [n+1, V], draft [n+1, V]): a random tree of 0..6 nodes."""
    n = int(torch.randint(0, 7, (1,), generator=gen))
    parents = [int(torch.randint(-1, i, (1,), generator=gen)) for i in range(n)]
    target = torch.softmax(torch.randn(n + 1, V, generator=gen, dtype=torch.float64) * 2, -1)
    target[:, 0] = 0  # zeros in p (top-k style): rejections with certainty
    target /= target.sum(-1, keepdim=True)
    draft = torch.softmax(torch.randn(n + 1, V, generator=gen, dtype=torch.float64) * 2, -1)
    if kind == "wor":  # siblings distinct: draw each parent's children without replacement
        tokens = torch.zeros(n, dtype=torch.long)
        for row in range(n + 1):
            kids = [i for i, p in enumerate(parents) if p + 1 == row]
            if kids:
                tokens[kids] = torch.multinomial(draft[row], len(kids), generator=gen)
    else:
        tokens = (torch.stack([torch.multinomial(draft[p + 1], 1, generator=gen)[0] for p in parents]) if n
                  else torch.zeros(0, dtype=torch.long))
        if kind == "point":
            tokens = torch.randint(0, V, (n,), generator=gen)
    return parents, tokens, target, draft


@pytest.mark.parametrize("kind", ["point", "iid", "wor"])
@pytest.mark.parametrize("eos", [None, 3])
def test_a_ragged_batch_decides_as_each_request_alone(kind, eos):
    gen = torch.Generator().manual_seed(hash((kind, eos)) % 1000)
    requests = [random_request(gen, kind) for _ in range(40)]
    q_needed = kind != "point"
    trees = RaggedTrees(torch.cat([r[1] for r in requests]),
                        torch.tensor(sum((r[0] for r in requests), []), dtype=torch.long),
                        [len(r[0]) for r in requests], torch.cat([r[3] for r in requests]) if q_needed else None, kind)
    target = torch.cat([r[2] for r in requests])  # [T + B, V]
    layout = trees.walk_layout()
    uniforms = torch.rand(40, layout.max_depth + 1, layout.children.shape[1] - 1, generator=gen, dtype=torch.float64)
    last = torch.rand(40, generator=gen, dtype=torch.float64)
    batch = verify(trees, target, rng=ReplaySource([uniforms, last]), eos_token_id=eos)
    assert not torch.equal(batch.num_accepted, torch.zeros(40, dtype=torch.long))  # some requests accept
    for b, (parents, tokens, p, q) in enumerate(requests):
        n = len(parents)
        if n == 0:  # no drafts: one token from the root's law
            alone = verify(CandidateTree(torch.zeros(1, 0, dtype=torch.long), torch.zeros(0, dtype=torch.long)),
                           p[None], rng=ReplaySource([last[b : b + 1]]))
        else:
            tree = CandidateTree(tokens[None], torch.tensor(parents), q[None] if q_needed else None, kind)
            d, c = int(depths(tree.parents).max()), children_table(tree.parents).shape[1]
            alone = verify(tree, p[None], rng=ReplaySource([uniforms[b : b + 1, : d + 1, :c], last[b : b + 1]]),
                           eos_token_id=eos)
        assert batch.tokens[b, : n + 1].tolist() == alone.tokens[0].tolist(), b
        assert batch.tokens[b, n + 1 :].eq(-1).all()
        assert int(batch.num_accepted[b]) == int(alone.num_accepted[0])
        assert batch.path[b, : alone.path.shape[1]].tolist() == alone.path[0].tolist()


def test_ragged_chains_decide_as_the_same_rows_padded():
    """vLLM's layout walked where it lies against the rows padded to one shape (the reference)."""
    gen = torch.Generator().manual_seed(3)
    counts = torch.randint(0, 5, (64,), generator=gen)
    T = int(counts.sum())
    q = torch.softmax(torch.randn(T, V, generator=gen, dtype=torch.float64), -1)
    p = torch.softmax(torch.randn(T, V, generator=gen, dtype=torch.float64), -1)
    drafts = torch.multinomial(q, 1, generator=gen).flatten()
    bonus = torch.randint(0, V, (64, 1), generator=gen)
    draws = [torch.rand(64, int(counts.max()) + 1, 1, generator=gen, dtype=torch.float64),
             torch.rand(64, generator=gen, dtype=torch.float64)]
    tree, padded = padded_chains(drafts, counts, q, p, bonus)
    reference = verify(tree, padded, rng=ReplaySource(list(draws)))
    ragged = verify(RaggedTrees.chains(drafts, counts, q, bonus), p, rng=ReplaySource(list(draws)))
    assert torch.equal(ragged.tokens, reference.tokens)
    assert 0 < int(ragged.num_accepted.sum()) < T  # both acceptances and rejections happened


def test_the_layout_numbers_nodes_request_after_request():
    # request 0: root's children 0 and 1, node 0's child 2; request 1: none; request 2: a chain of two
    trees = RaggedTrees(torch.tensor([4, 5, 6, 1, 2]), torch.tensor([-1, -1, 0, -1, 0]), [3, 0, 2])
    layout = trees.walk_layout()
    assert layout.roots.tolist() == [0, 4, 5]
    assert layout.children[:, :2].tolist() == [[1, 2], [3, -1], [-1, -1], [-1, -1], [-1, -1], [6, -1], [7, -1],
                                               [-1, -1]]
    assert layout.tokens[[1, 2, 3, 6, 7]].tolist() == [4, 5, 6, 1, 2]
    assert (layout.max_depth, layout.width) == (2, 4)


@pytest.mark.parametrize("trees, message", [
    (lambda: RaggedTrees(torch.tensor([1, 2]), torch.tensor([-1, -1]), [1, -1, 2]), "request 1 has a negative count"),
    (lambda: RaggedTrees(torch.tensor([1, 2]), torch.tensor([-1, -1]), [1, 1], law_rows=torch.tensor([0, 1, 2, 9])),
     "request 1: law_rows points to row 9"),
    (lambda: RaggedTrees(torch.tensor([1, 2]), torch.tensor([-1, -1]), [1, 1], torch.ones(3, V) / V, "wor"),
     r"draft_probs must be \[T \+ B, V\]"),
    (lambda: RaggedTrees(torch.tensor([1, 2]), torch.tensor([-1]), [2]), "parents holds 1 entries"),
])
def test_bad_ragged_input_names_the_request_and_the_field(trees, message):
    with pytest.raises(ValueError, match=message):
        verify(trees(), torch.ones(4, V, dtype=torch.float64) / V)
