"""Policies that cap another policy's plan: the wrapped policy (None: speculation as configured) still plans, trims
and observes; the wrapper only lowers its depth. By batch size (framework/control/batch.py) or by the acceptance of
the steps before (framework/control/adaptive.py). A cap read from the past alone keeps the laws exact.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from framework.core.policy import FixedPolicy, Plan, Policy, with_costs
from framework.core.tree import CandidateTree


class Capped:
    """A policy that caps another's plan by `cap()`."""

    def __init__(self, inner: Policy | None = None):
        self.inner = inner if inner is not None else FixedPolicy()

    def cap(self) -> int | None:
        """The most levels the next step may draft (0: a plain step; None: no cap)."""
        raise NotImplementedError

    def start(self, target, batch_size: int) -> None:
        self.inner.start(target, batch_size)

    def plan(self) -> Plan:
        cap = self.cap()
        if cap == 0:
            return Plan(0)
        inner = self.inner.plan()
        if cap is None or (inner.depth is not None and inner.depth <= cap):
            return inner
        return replace(inner, depth=cap)

    def trim(self, tree: CandidateTree) -> CandidateTree:
        return self.inner.trim(tree)

    def observe(self, tree: CandidateTree, result, step) -> None:
        self.inner.observe(tree, result, step)

    def select(self, rows: torch.Tensor) -> None:
        self.inner.select(rows)

    def admit(self, count: int) -> None:
        self.inner.admit(count)

    def use_costs(self, costs) -> None:
        """A device's costs reach the inner policy where it is sized by them (CostSized); the cap reads none."""
        with_costs(self.inner, costs)
