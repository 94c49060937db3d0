"""Verifiers: pure functions from (tree, target law, random source) to the accepted path."""

from __future__ import annotations

import torch

from framework.core.ragged_tree import RaggedTrees
from framework.core.randomness import RandomSource, TorchSource
from framework.core.tree import CandidateTree
from framework.core.verification import Verification
from verifiers.checks import check_verify_inputs
from verifiers.rules import LOSSLESS_RULES, ChildRule, IidRule, NodeLaw, PointRule, WorRule
from verifiers.tree_verifier import TreeVerifier, Verifier
from verifiers.typical import TypicalAcceptance

LOSSLESS = TreeVerifier(LOSSLESS_RULES)


def verify(
    tree: CandidateTree | RaggedTrees,
    target_probs: torch.Tensor,
    generator: torch.Generator | None = None,
    *,
    rng: RandomSource | None = None,
    eos_token_id: int | None = None,
    verifier: Verifier = LOSSLESS,
    validate: bool = True,
) -> Verification:
    """Accept a path of `tree` against target_probs [B, N+1, V] (row 0 = root), losslessly.

    Coins come from `rng` if given, else from `generator` (a torch.Generator), else a fresh one.
    validate=False skips the input checks (and their host syncs) for engines that built the
    inputs themselves.
    """
    if validate:
        check_verify_inputs(tree, target_probs)
    return verifier(tree, target_probs, rng or TorchSource(generator), eos_token_id)


def typical_verifier(threshold: float = 0.09, alpha: float = 0.3) -> TreeVerifier:
    """Medusa's typical acceptance for every kind of children (lossy)."""
    rule = TypicalAcceptance(threshold, alpha)
    return TreeVerifier({kind: rule for kind in LOSSLESS_RULES})


__all__ = [
    "verify", "typical_verifier", "TreeVerifier", "Verification", "Verifier", "ChildRule", "NodeLaw",
    "PointRule", "IidRule", "WorRule", "TypicalAcceptance", "LOSSLESS", "LOSSLESS_RULES",
]
