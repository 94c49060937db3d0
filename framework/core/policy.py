"""The speculation policy: how much to speculate each step (docs/design.md section 13).

The loop asks its policy three things. Before a step, `plan`: how many levels the proposer may draft
(0: a plain step, the proposer only keeps its books). After the proposer, `trim`: which of the drafted
nodes the target verifies. After the verifier, `observe`: what the step accepted and what it cost.
Plan and trim read the committed past and the draft's own values (a tree's `scores`), never a coin of
the step to come, so every tree the verifier sees is fixed before its coins: the law stays the
target's (a trim chooses nodes by value, so it trims `point` trees only; an `iid`/`wor` tree keeps its
draws and takes the plan's depth alone).

`FixedPolicy` is speculation as configured: no limit, no trim. `framework.control.goodput` sizes
every step to its expected tokens per second.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import torch

from framework.core.tree import CandidateTree
from framework.core.verification import Verification


@dataclass(frozen=True)
class Plan:
    """What a step may draft, fixed before the step's coins."""

    depth: int | None = None  # the most levels the proposer may draft: 0 = none (a plain step); None = its own setting
    probe: bool = False  # drafted to measure (a policy's exploration), not because it is expected to pay
    rows: torch.Tensor | None = field(default=None, compare=False)  # [B] bool: the rows that may draft (None: all);
    # the others decode plainly in the same forward, one position each (framework/lm/packing.py)

    def __post_init__(self) -> None:
        if self.depth is not None and (isinstance(self.depth, bool) or not isinstance(self.depth, int)
                                       or self.depth < 0):
            raise ValueError(f"a plan's depth must be None or an integer >= 0, got {self.depth!r}")
        if self.rows is not None and (not isinstance(self.rows, torch.Tensor) or self.rows.dtype != torch.bool
                                      or self.rows.dim() != 1):
            raise ValueError(f"a plan's rows must be None or a 1-D bool tensor (one flag per row), got {self.rows!r}")

    @property
    def drafts(self) -> bool:
        return self.depth is None or self.depth > 0


class Policy(Protocol):
    def start(self, target, batch_size: int) -> None:
        """A generation begins on `target` (prefilled) with `batch_size` rows."""
        ...

    def plan(self) -> Plan:
        """How much the next step may draft: from the steps before it only."""
        ...

    def trim(self, tree: CandidateTree) -> CandidateTree:
        """The nodes worth verifying: `tree`, or a cut of it (CandidateTree.keep_nodes, which remembers each node's
        index in the drafted tree)."""
        ...

    def observe(self, tree: CandidateTree, result: Verification, step) -> None:
        """The step's verified tree, its Verification and its engine.StepStats (timings, rows)."""
        ...

    def select(self, rows: torch.Tensor) -> None:
        """Keep the batch rows `rows` [B'] of any per-row state."""
        ...

    def admit(self, count: int) -> None:
        """`count` new requests join the batch after its rows (continuous batching): fresh per-row state."""
        ...


@runtime_checkable
class CostSized(Protocol):
    """A policy that can size its steps by a device's measured costs (framework.control.costs.StepCosts, from a
    device profile) instead of its own clock: its decisions then depend on the tokens and the profile alone."""

    def use_costs(self, costs) -> None:
        ...


def with_costs(policy, costs):
    """`policy`, deciding by `costs` from now on where it is sized by them (CostSized); any other as it is."""
    if isinstance(policy, CostSized):
        policy.use_costs(costs)
    return policy


class FixedPolicy:
    """Speculate as the proposer is configured, every step."""

    def start(self, target, batch_size: int) -> None:
        pass

    def plan(self) -> Plan:
        return Plan()

    def trim(self, tree: CandidateTree) -> CandidateTree:
        return tree

    def observe(self, tree: CandidateTree, result: Verification, step) -> None:
        pass

    def select(self, rows: torch.Tensor) -> None:
        pass

    def admit(self, count: int) -> None:
        pass


class AtDepth(FixedPolicy):
    """Every step planned at one depth (0: plain steps, the proposer only keeps its books; None: its own setting):
    what a device profile measures and an ablation fixes."""

    def __init__(self, depth: int | None):
        self.depth = depth

    def plan(self) -> Plan:
        return Plan(self.depth)
