"""Medusa's typical acceptance: a lossy baseline, never a default.

A child is accepted when its target probability exceeds min(threshold, alpha * exp(-H(p))),
trying siblings in order; no coins are used for acceptance, and the extra token is sampled
from the node's full p. Fast and often fluent, but the output law is not the target's:
the harness must show it failing.
"""

from __future__ import annotations

import torch

from verifiers.rules import NodeLaw, at


class TypicalAcceptance:
    lossless = False

    def __init__(self, threshold: float = 0.09, alpha: float = 0.3):
        self.threshold = threshold
        self.alpha = alpha

    def accept_probability(self, law: NodeLaw, token: torch.Tensor) -> torch.Tensor:
        entropy = -(law.p * torch.log(law.p.clamp_min(1e-30))).sum(-1)
        bar = torch.clamp(self.alpha * torch.exp(-entropy), max=self.threshold)
        return (at(law.p, token) > bar).to(law.p.dtype)

    def after_reject(self, law: NodeLaw, token: torch.Tensor) -> NodeLaw:
        return law
