"""Child rules of the lossless verifier (docs/design.md section 4), one per kind of children.

At a node the walk holds a NodeLaw: p, the node's processed target law; r, what is left of it
after the children rejected so far; q, the law the next child was drawn from. A rule says
with which probability a child is accepted and how the law changes when it is rejected.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol

import torch

from framework.core.randomness import law_dtype
from framework.core.tree import CandidateTree


@dataclass
class NodeLaw:
    p: torch.Tensor  # [B, V] the node's target law, as plain sampling would use it
    r: torch.Tensor  # [B, V] target law left after this node's rejected children
    q: torch.Tensor | None  # [B, V] law the next child was drawn from (iid/wor), else None
    siblings: torch.Tensor | None = None  # [B] how many children the node has (for rules that judge them jointly)


class ChildRule(Protocol):
    lossless: bool

    def accept_probability(self, law: NodeLaw, token: torch.Tensor) -> torch.Tensor:
        """token [B] -> probability [B] of accepting it."""
        ...

    def after_reject(self, law: NodeLaw, token: torch.Tensor) -> NodeLaw:
        """The node's law once the child with `token` [B] was rejected."""
        ...


def widened(tree: CandidateTree, target_probs: torch.Tensor) -> tuple[CandidateTree, torch.Tensor]:
    """The tree and its laws in the dtype the rules compute in (float32 at least, float64 if either
    law is): for rules that read every row anyway (block, traversal). Copies only what must change."""
    dtype = law_dtype(target_probs, tree.draft_probs)
    if tree.draft_probs is not None and tree.draft_probs.dtype != dtype:
        tree = replace(tree, draft_probs=tree.draft_probs.to(dtype))
    return tree, target_probs.to(dtype)


def normalize_or_keep(new: torch.Tensor, old: torch.Tensor, *, in_place: bool = False) -> torch.Tensor:
    """new / sum(new); where new sums to 0 (an unreachable branch, e.g. p == q), keep old.

    in_place: new is the caller's own temporary, divided where it lies (one [B, V] allocation
    fewer: fresh large tensors cost page faults)."""
    total = new.sum(-1, keepdim=True)  # [B, 1]
    empty = ~(total > 0).squeeze(-1)  # [B] (a NaN total counts as empty too)
    denominator = torch.where(total > 0, total, 1)  # [B, 1]
    out = new.div_(denominator) if in_place else new / denominator  # [B, V]
    if bool(empty.any()):  # rare: copy those rows rather than a select over all of [B, V]
        out[empty] = old[empty]
    return out


def at(probs: torch.Tensor, token: torch.Tensor) -> torch.Tensor:
    """probs [B, V], token [B] -> probs[b, token[b]]  # [B]"""
    return probs.gather(-1, token[:, None]).squeeze(-1)


def without(probs: torch.Tensor, token: torch.Tensor) -> torch.Tensor:
    """probs with each row's token set to 0 (not renormalised)."""
    return probs.scatter(-1, token[:, None], 0.0)


def draft_ratio(r: torch.Tensor, q: torch.Tensor, token: torch.Tensor) -> torch.Tensor:
    """min(1, r(c) / q(c)); q(c) > 0 for a drawn token, the clamp only guards 0/0."""
    q_c = at(q, token)
    return torch.clamp(at(r, token) / q_c.clamp_min(torch.finfo(q.dtype).tiny), max=1.0)


class PointRule:
    """Children chosen by a rule blind to the verifier's coins: accept with r(c), else drop c."""

    lossless = True

    def accept_probability(self, law: NodeLaw, token: torch.Tensor) -> torch.Tensor:
        return at(law.r, token)

    def after_reject(self, law: NodeLaw, token: torch.Tensor) -> NodeLaw:
        return replace(law, r=normalize_or_keep(without(law.r, token), law.r, in_place=True))


class IidRule:
    """Children drawn independently from q: accept with min(1, r/q), else r := norm(max(r - q, 0))."""

    lossless = True

    def accept_probability(self, law: NodeLaw, token: torch.Tensor) -> torch.Tensor:
        return draft_ratio(law.r, law.q, token)

    def after_reject(self, law: NodeLaw, token: torch.Tensor) -> NodeLaw:
        return replace(law, r=normalize_or_keep(torch.sub(law.r, law.q).clamp_min_(0), law.r, in_place=True))


class WorRule(IidRule):
    """Children drawn without replacement: as iid, then the next draw's q loses c."""

    def after_reject(self, law: NodeLaw, token: torch.Tensor) -> NodeLaw:
        law = super().after_reject(law, token)
        return replace(law, q=normalize_or_keep(without(law.q, token), law.q, in_place=True))


LOSSLESS_RULES: dict[str, ChildRule] = {"point": PointRule(), "iid": IidRule(), "wor": WorRule()}
