"""Each rule's exact expected acceptance on the trees and laws of a real decode (no coin noise).

A decode's own acceptance is one draw per step, so two rules' sampled tokens per forward differ by
several percent on a thousand steps even where their laws are the same. Here the decode runs with
the reference rule, and at every step each rule's expected accepted nodes on that same tree and
those same target laws are computed exactly: its coins enumerated (harness.enumerate,
CoinsOnlySource; the final draw, made after acceptance is decided, is not). The same drafts, the
same laws, and a difference between rules that is theirs alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from framework.core.tree import CandidateTree
from harness.enumerate import CoinsOnlySource, enumerate_law
from verifiers import verify


def expected_accepted(rule, tree: CandidateTree, target_probs: torch.Tensor, eos_token_id: int | None) -> float:
    """E[accepted nodes] of `rule` on row 0 of (tree, target_probs), every coin enumerated."""
    q = tree.draft_probs

    def run(source) -> list[int]:
        W = source.batch_size
        worlds = CandidateTree(tree.tokens[:1].expand(W, -1), tree.parents,
                               None if q is None else q[:1].expand(W, -1, -1).contiguous(), tree.kind)
        return verify(worlds, target_probs[:1].expand(W, -1, -1).contiguous(), rng=source,
                      eos_token_id=eos_token_id, verifier=rule, validate=False).num_accepted.tolist()

    return sum(k * w for k, w in enumerate_law(run, source_type=CoinsOnlySource).items())


@dataclass
class ExpectedAcceptance:
    """A verifier that decodes with `reference` and, at every step with candidates, records each rule's
    exact expected accepted nodes on that step's tree (row 0) in `per_step`.

    The coins are enumerated, the trees are not: each step's tree is one draw of the draft, so a rule's
    mean still carries the draft's noise (a rule can accept less than the token rule on one tree and
    more on average: block verification's weights are optimal over the draws, not on each). The rules
    share the trees, so their paired per-step differences give the ratio's standard error."""

    reference: object
    rules: dict
    per_step: dict = field(default_factory=dict)

    @property
    def lossless(self) -> bool:
        return self.reference.lossless

    @property
    def steps(self) -> int:
        return len(next(iter(self.per_step.values()), []))

    def tokens_per_forward(self, name: str) -> float:
        return 1 + sum(self.per_step[name]) / self.steps

    def ratio_standard_error(self, name: str, reference: str) -> float | None:
        """Standard error of tokens_per_forward(name) / tokens_per_forward(reference), from the paired
        per-step differences (delta method; the reference's own noise is common to both and cancels).
        None below two steps."""
        diffs = [a - b for a, b in zip(self.per_step[name], self.per_step[reference])]
        n = len(diffs)
        if n < 2:
            return None
        mean = sum(diffs) / n
        variance = sum((d - mean) ** 2 for d in diffs) / (n - 1)
        return (variance / n) ** 0.5 / self.tokens_per_forward(reference)

    def __call__(self, tree, target_probs, rng, eos_token_id=None):
        if tree.tokens.shape[1]:
            for name, rule in self.rules.items():
                self.per_step.setdefault(name, []).append(expected_accepted(rule, tree, target_probs, eos_token_id))
        return self.reference(tree, target_probs, rng, eos_token_id)
