"""The tree walk shared by every acceptance rule, vectorised over the batch.

From the root, try the current node's children in sibling order with the rule of the tree's
kind. An accepted child becomes the current node (its own p, its own q). When no child is
accepted, emit one *recovered* token from what is left of r; at a leaf, r is still the leaf's
full p and the token is the *bonus*. An accepted EOS ends the row with nothing after it.

Randomness: one uniform per (row, level, child slot), drawn up front, and one categorical
draw per row at the end, both from the one random source.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import torch

from framework.randomness import RandomSource
from framework.tree import CandidateTree
from framework.tree_shape import children_table, depths
from verifiers.rules import LOSSLESS_RULES, ChildRule, NodeLaw


@dataclass
class Verification:
    tokens: torch.Tensor  # [B, N+1] accepted tokens, then one recovered or bonus token; -1 padded
    num_accepted: torch.Tensor  # [B] accepted tree nodes
    path: torch.Tensor  # [B, depth] accepted node indices, root's child first; -1 padded

    @property
    def num_emitted(self) -> torch.Tensor:
        """[B] tokens emitted this step (accepted + 1, or accepted alone after an EOS)."""
        return (self.tokens >= 0).sum(-1)


def _select(mask: torch.Tensor, new: NodeLaw, old: NodeLaw) -> NodeLaw:
    """Rows in mask take `new`. Fields a rule left untouched are not copied ([B, V] passes are
    the verifier's whole cost)."""
    m = mask[:, None]

    def pick(a, b):
        return b if a is b else torch.where(m, a, b)

    r = pick(new.r, old.r)
    p = r if new.p is new.r and old.p is old.r else pick(new.p, old.p)
    q = None if old.q is None else pick(new.q, old.q)
    return NodeLaw(p, r, q)


class TreeVerifier:
    """Walks a CandidateTree with one ChildRule per kind; lossless iff every rule is."""

    def __init__(self, rules: Mapping[str, ChildRule] = LOSSLESS_RULES):
        self.rules = dict(rules)

    @property
    def lossless(self) -> bool:
        return all(rule.lossless for rule in self.rules.values())

    # Hooks, one decision each, so that the harness can plant bugs in exactly one place.
    def coin(self, uniforms, level: int, slot: int):
        return uniforms[:, level, slot]

    def accepts(self, u, ratio: torch.Tensor) -> torch.Tensor:
        return u < ratio  # strict: a ratio of 0 is never accepted, even when u is exactly 0.0

    def final_law(self, law: NodeLaw, at_leaf: torch.Tensor) -> torch.Tensor:
        return law.r

    def enter(self, target_probs, draft_probs, batch, row) -> NodeLaw:
        p = target_probs[batch, row]
        return NodeLaw(p, p, None if draft_probs is None else draft_probs[batch, row])

    def __call__(
        self,
        tree: CandidateTree,
        target_probs: torch.Tensor,
        rng: RandomSource,
        eos_token_id: int | None = None,
    ) -> Verification:
        if tree.kind not in self.rules:
            raise ValueError(f"no acceptance rule for kind {tree.kind!r} (have {sorted(self.rules)})")
        rule = self.rules[tree.kind]
        B, N = tree.tokens.shape
        V, device = target_probs.shape[-1], target_probs.device
        if N == 0:  # plain decoding: the bonus token alone, without the walk's bookkeeping
            bonus = rng.categorical(target_probs[:, 0])  # [B]
            empty = torch.zeros(B, 0, dtype=torch.long, device=device)
            return Verification(bonus[:, None], torch.zeros(B, dtype=torch.long, device=device), empty)
        children = children_table(tree.parents).to(device)  # [N+1, C]
        max_depth = int(depths(tree.parents).max()) if N else 0
        batch = torch.arange(B, device=device)
        tokens = tree.tokens.to(device)

        uniforms = rng.uniform((B, max_depth + 1, children.shape[1]), device)
        row = torch.zeros(B, dtype=torch.long, device=device)  # current node's row, 0 = root
        law = self.enter(target_probs, tree.draft_probs, batch, row)
        out = torch.full((B, N + 1), -1, dtype=torch.long, device=device)
        path = torch.full((B, max_depth + 1), -1, dtype=torch.long, device=device)
        num_accepted = torch.zeros(B, dtype=torch.long, device=device)
        done = torch.zeros(B, dtype=torch.bool, device=device)
        emits = torch.ones(B, dtype=torch.bool, device=device)
        final = torch.zeros(B, V, dtype=target_probs.dtype, device=device)
        final[:, 0] = 1  # placeholder law for rows that end on EOS: one certain outcome, ignored

        for level in range(max_depth + 1):
            if level and not bool((~done).any()):
                break  # every row has stopped (one host sync per level saves the deeper ones)
            moved = torch.zeros(B, dtype=torch.bool, device=device)
            for slot in range(children.shape[1] if N else 0):
                child = children[row, slot]  # [B] node index, -1 = no such child
                testing = ~done & ~moved & (child >= 0)
                node = child.clamp_min(0)
                token = tokens[batch, node]
                ratio = torch.where(testing, rule.accept_probability(law, token), 0.0)
                accepted = self.accepts(self.coin(uniforms, level, slot), ratio) & testing
                law = _select(testing & ~accepted, rule.after_reject(law, token), law)
                out[:, level] = torch.where(accepted, token, out[:, level])
                path[:, level] = torch.where(accepted, node, path[:, level])
                row = torch.where(accepted, node + 1, row)
                moved |= accepted
            stopping = ~done & ~moved
            at_leaf = children[row, 0] < 0
            final = torch.where(stopping[:, None], self.final_law(law, at_leaf), final)
            done |= stopping
            num_accepted += moved.long()
            if eos_token_id is not None:
                hit_eos = moved & (out[:, level] == eos_token_id)
                done |= hit_eos
                emits &= ~hit_eos
            law = _select(moved, self.enter(target_probs, tree.draft_probs, batch, row), law)

        extra = rng.categorical(final)  # [B] recovered or bonus token
        out[batch, num_accepted] = torch.where(emits, extra, -1)
        return Verification(out, num_accepted, path[:, :max_depth])
