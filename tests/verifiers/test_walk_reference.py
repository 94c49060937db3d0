"""The compacted walk against the walk it replaced: same uniforms, same tokens, same paths.

`reference_walk` is the previous TreeVerifier.__call__ (every row masked through every level,
every law a [B, V] select): slow but plainly right, and it consumes the random source the same
way, so the same seed must give the same text.
"""

import pytest
import torch

from framework.core.randomness import ReplaySource, TorchSource
from framework.core.tree import CandidateTree
from framework.core.tree_shape import TreeShape, children_table, depths
from verifiers import LOSSLESS, LOSSLESS_RULES, NodeLaw, tree_verifier, typical_verifier, verify
from verifiers.tree_verifier import Verification


def _select(mask, new, old):
    m = mask[:, None]
    q = None if old.q is None else torch.where(m, new.q, old.q)
    return NodeLaw(torch.where(m, new.p, old.p), torch.where(m, new.r, old.r), q)


def reference_walk(tree, target_probs, rng, eos_token_id=None, rules=LOSSLESS_RULES):
    rule = rules[tree.kind]
    B, N = tree.tokens.shape
    V = target_probs.shape[-1]
    children = children_table(tree.parents)  # [N+1, C]
    max_depth = int(depths(tree.parents).max())
    batch, tokens = torch.arange(B), tree.tokens
    uniforms = rng.uniform((B, max_depth + 1, children.shape[1]))

    def enter(row):
        p = target_probs[batch, row]
        return NodeLaw(p, p, None if tree.draft_probs is None else tree.draft_probs[batch, row])

    row = torch.zeros(B, dtype=torch.long)
    law = enter(row)
    out = torch.full((B, N + 1), -1, dtype=torch.long)
    path = torch.full((B, max_depth + 1), -1, dtype=torch.long)
    num_accepted = torch.zeros(B, dtype=torch.long)
    done = torch.zeros(B, dtype=torch.bool)
    emits = torch.ones(B, dtype=torch.bool)
    final = torch.zeros(B, V, dtype=target_probs.dtype)
    final[:, 0] = 1
    for level in range(max_depth + 1):
        moved = torch.zeros(B, dtype=torch.bool)
        for slot in range(children.shape[1]):
            child = children[row, slot]
            testing = ~done & ~moved & (child >= 0)
            node = child.clamp_min(0)
            token = tokens[batch, node]
            ratio = torch.where(testing, rule.accept_probability(law, token), 0.0)
            accepted = (uniforms[:, level, slot] < ratio) & testing
            law = _select(testing & ~accepted, rule.after_reject(law, token), law)
            out[:, level] = torch.where(accepted, token, out[:, level])
            path[:, level] = torch.where(accepted, node, path[:, level])
            row = torch.where(accepted, node + 1, row)
            moved |= accepted
        stopping = ~done & ~moved
        final = torch.where(stopping[:, None], law.r, final)
        done |= stopping
        num_accepted += moved.long()
        if eos_token_id is not None:
            hit_eos = moved & (out[:, level] == eos_token_id)
            done |= hit_eos
            emits &= ~hit_eos
        law = _select(moved, enter(row), law)
    extra = rng.categorical(final)
    out[batch, num_accepted] = torch.where(emits, extra, -1)
    return Verification(out, num_accepted, path[:, :max_depth])


def random_inputs(B, parents, V, kind, seed, dtype=torch.float32, scale=2.0):
    g = torch.Generator().manual_seed(seed)
    N = len(parents)
    p = torch.softmax(torch.randn(B, N + 1, V, generator=g, dtype=torch.float64) * scale, -1)
    q = torch.softmax(torch.randn(B, N + 1, V, generator=g, dtype=torch.float64) * scale, -1)
    p[: B // 4] = q[: B // 4]  # p == q rows: never rejected (and a residual of mass 0 if forced)
    parent_rows = torch.tensor(parents) + 1
    tokens = torch.multinomial(q[:, parent_rows].reshape(-1, V), 1, generator=g).reshape(B, N)
    if kind == "wor":  # siblings distinct: a token drawn without replacement comes once
        table = children_table(torch.tensor(parents))
        for kids in table.tolist():
            kids = [k for k in kids if k >= 0]
            for j, k in enumerate(kids[1:], 1):
                tokens[:, k] = (tokens[:, kids[0]] + j) % V
        q = (q + 1e-3) / (1 + 1e-3 * V)
    draft = None if kind == "point" else q.to(dtype)
    return CandidateTree.from_parents(tokens, parents, draft, kind), p.to(dtype)


SHAPES = {
    "chain1": [-1], "chain4": [-1, 0, 1, 2], "binary3": TreeShape.full(2, 3).parents.tolist(),
    "ragged": [-1, -1, -1, 0, 0, 2, 3, 3, 3, 6],
}


@pytest.mark.parametrize("block", [None, 3])  # None: one block; 3: the CPU blocking over rows
@pytest.mark.parametrize("eos", [None, 2])
@pytest.mark.parametrize("kind", ["point", "iid", "wor"])
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_same_uniforms_same_output_as_the_reference(shape, kind, eos, block, monkeypatch):
    if block is not None:
        monkeypatch.setattr(tree_verifier, "CPU_BLOCK_ELEMENTS", block * 11)
    B, V = 40, 11
    tree, p = random_inputs(B, SHAPES[shape], V, kind, seed=len(shape) + len(kind))
    D, C = int(depths(tree.parents).max()) + 1, children_table(tree.parents).shape[1]
    g = torch.Generator().manual_seed(3)
    draws = [torch.rand(B, D, C, generator=g, dtype=torch.float64), torch.rand(B, generator=g, dtype=torch.float64)]
    ours = verify(tree, p, rng=ReplaySource(list(draws)), eos_token_id=eos)
    ref = reference_walk(tree, p, ReplaySource(list(draws)), eos)
    assert torch.equal(ours.tokens, ref.tokens)
    assert torch.equal(ours.path, ref.path) and torch.equal(ours.num_accepted, ref.num_accepted)
    assert 0 < int(ours.num_accepted.sum()) < B * D  # the walk both accepted and rejected


@pytest.mark.parametrize("kind", [pytest.param("point", marks=pytest.mark.slow), "iid"])  # point: -m slow (time)
def test_same_seed_same_text_as_the_reference(kind):
    """A real vocabulary, float32, the default random source: the compacted walk is bit-for-bit
    the old one (its [rows, V] arithmetic is the same per row), so seeded texts do not move."""
    tree, p = random_inputs(300, SHAPES["binary3"], 4096, kind, seed=5, scale=3.0)
    ours = verify(tree, p, generator=torch.Generator().manual_seed(11))
    ref = reference_walk(tree, p, TorchSource(torch.Generator().manual_seed(11)))
    assert torch.equal(ours.tokens, ref.tokens) and torch.equal(ours.path, ref.path)


def test_lossy_rule_goes_through_the_same_walk():
    tree, p = random_inputs(40, SHAPES["ragged"], 11, "iid", seed=2)
    lossy = typical_verifier()
    ours = verify(tree, p, generator=torch.Generator().manual_seed(1), verifier=lossy)
    ref = reference_walk(tree, p, TorchSource(torch.Generator().manual_seed(1)), rules=lossy.rules)
    assert torch.equal(ours.tokens, ref.tokens)


def test_p_equals_q_everywhere_never_nan():
    tree, p = random_inputs(16, SHAPES["binary3"], 11, "iid", seed=4)
    tree = CandidateTree.from_parents(tree.tokens, tree.parents, p, "iid")
    res = verify(tree, p, generator=torch.Generator().manual_seed(0))
    assert bool((res.num_accepted == 3).all()) and bool((res.tokens[:, :4] >= 0).all())


class CheckedSource(TorchSource):
    """A torch source that checks each final law: every row written, a distribution."""

    def categorical(self, probs):
        sums = probs.sum(-1, dtype=torch.float64)
        assert torch.isfinite(probs).all() and torch.allclose(sums, torch.ones_like(sums), atol=1e-5)
        return super().categorical(probs)


@pytest.mark.parametrize("eos", [None, 2])
@pytest.mark.parametrize("kind", ["point", "iid", "wor"])
def test_every_row_gets_a_final_law(kind, eos):
    """final starts empty (no [B, V] fill): each row must write its own, EOS rows a placeholder."""
    tree, p = random_inputs(64, SHAPES["ragged"], 11, kind, seed=8)
    verify(tree, p, rng=CheckedSource(seed=0), eos_token_id=eos)


def test_block_size_does_not_change_the_output(monkeypatch):
    tree, p = random_inputs(64, SHAPES["ragged"], 11, "iid", seed=6)
    whole = verify(tree, p, generator=torch.Generator().manual_seed(2))
    monkeypatch.setattr(tree_verifier, "CPU_BLOCK_ELEMENTS", 1)  # one row per block
    assert torch.equal(verify(tree, p, generator=torch.Generator().manual_seed(2)).tokens, whole.tokens)
    assert LOSSLESS.lossless
