"""The proposer role and the decoding state it sees (docs/design.md sections 2 and 8)."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Protocol, runtime_checkable

import torch

from framework.core.constraint import Constraint
from framework.core.policy import Plan
from framework.core.prompts import last_of_each
from framework.core.randomness import RandomSource
from framework.core.rows import cat_rows
from framework.core.sampling import SamplingConfig
from framework.core.side_rows import SideRows
from framework.core.tree import CandidateTree
from framework.core.verification import Verification


@dataclass
class DecodeState:
    """What a proposer may look at: the committed state, never the verifier's coins to come."""

    root: torch.Tensor  # [B] last emitted token (the tree's root; not yet in any KV cache)
    seen: torch.Tensor  # [B, V] bool: tokens in each row's sequence, root included
    sampling: SamplingConfig  # the target's sampling law
    rng: RandomSource  # for the proposer's own draws
    # [B, L, H] target hidden states of the root row, if asked for (None: the last committed row of each)
    target_hidden: torch.Tensor | None = None
    # The hidden states of every position the target committed at its last forward: the prompt
    # after the prefill, then the previous root and the accepted nodes; left-aligned per row,
    # committed_count[b] valid rows (the last of them is target_hidden). For feature-level heads (EAGLE).
    committed_hidden: torch.Tensor | None = None  # [B, A, L, H]
    committed_count: torch.Tensor | None = None  # [B]
    # How much this step may draft (the speculation policy's plan, framework/core/policy.py): a proposer
    # drafts at most plan.depth levels; at depth 0 it drafts nothing and returns an empty tree, keeping
    # its books (the root, the committed features) for the next step that drafts.
    plan: Plan = Plan()
    # What may come next (a grammar), per row, at the committed state: a proposer that draws from a law takes
    # its q after constraint.allowed along its own paths (framework/core/constraint.py). Read, never advanced.
    constraint: Constraint | None = None

    def __post_init__(self) -> None:
        if self.target_hidden is None and self.committed_hidden is not None:
            self.target_hidden = last_of_each(self.committed_hidden, self.committed_count)

    def advance(self, root: torch.Tensor, seen: torch.Tensor, committed_hidden: torch.Tensor | None = None,
                committed_count: torch.Tensor | None = None) -> DecodeState:
        """The state after a forward committed tokens: the next root [B], the tokens seen [B, V], the hidden
        states of the positions committed ([B, A, L, H], committed_count [B] valid rows each); no plan yet."""
        return replace(self, root=root, seen=seen, target_hidden=None, committed_hidden=committed_hidden,
                       committed_count=committed_count, plan=Plan())

    def rows(self, rows: torch.Tensor) -> DecodeState:
        """The state of the batch rows `rows` [B'] only, in that order."""
        return replace(self, **{name: value[rows.to(value.device)] for name, value in self.per_row().items()})

    def joined(self, other: DecodeState) -> DecodeState:
        """This batch's rows, then `other`'s (continuous batching; the plan and constraint stay this batch's)."""
        names = self.per_row().keys() | other.per_row().keys()
        return replace(self, **{name: cat_rows(getattr(self, name), getattr(other, name)) for name in names})

    def per_row(self) -> dict[str, torch.Tensor]:
        """The fields that hold one entry per row (the others: the batch's sampling, coins, plan and constraint)."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if isinstance(getattr(self, f.name), torch.Tensor)}


class Proposer(Protocol):
    # target hidden layers it reads (HF hidden_states indices; -1 = last, post-norm); read after its
    # prefill, which runs before the target's, so a proposer may settle them against the target
    hidden_layers: tuple[int, ...]
    # True when B > 1 rows share a tree shape chosen from every row's draft values (a confidence
    # cut, a dynamic tree): each row's law stays exact, but a row's tree depends on the others.
    couples_rows: bool

    def prefill(self, input_ids: torch.Tensor, target) -> None:
        """See the prompt [B, L]; check compatibility with the target (vocabulary, device, dtype)."""
        ...

    def propose(self, state: DecodeState) -> CandidateTree:
        """Candidates after state.root, at most state.plan.depth levels deep, with the kind that says how
        children were chosen and, where it has them, its own scores per node (what the policy sizes by)."""
        ...

    def commit(self, result: Verification) -> None:
        """Keep the accepted path (.path [B, depth], .num_accepted [B])."""
        ...

    def select(self, rows: torch.Tensor) -> None:
        """Keep the batch rows `rows` [B'] of its state, in that order: repeats replicate a one-row state
        after prefill (copies of one prompt); fewer rows drop requests that finished."""
        ...

    def join(self, other) -> None:
        """Append the rows of `other` after these (continuous batching): `other` is a fresh proposer of the same
        configuration, prefilled on newcomers against the same target; both are between steps (committed)."""
        ...


@runtime_checkable
class SideRowProposer(Protocol):
    """A proposer that rides extra rows in the target's verify forward (lookahead's Jacobi window).

    The engine asks for the rows right after propose, runs them in the same forward as the tree,
    and hands their logits back before commit. Their KV is never committed; the verifier never
    sees them (docs/design.md section 8).
    """

    def side_rows(self, tree: CandidateTree) -> SideRows | None:
        ...

    def observe_side(self, logits: torch.Tensor) -> None:
        """logits [B, S, V] of the side rows, in their order."""
        ...


@runtime_checkable
class SharedStore(Protocol):
    """State a proposer config shares across requests (a suffix cache of earlier outputs): later requests draft
    from earlier ones. A measurement that must not carry one cell's requests into another's (the same prompts
    under another policy or sampling) builds each cell's proposers on a `renewed` copy."""

    def renewed(self) -> "SharedStore":
        """The store as configured, before any request of this process."""
        ...
