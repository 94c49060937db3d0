"""Traversal verification (Weng et al., NeurIPS 2025): the tree walked from the leaves up, each node
judged with the sequence-level weight of its whole path; on a chain it is block verification.

Every node v keeps a weight w_v and a law P_v (the target's law at v, then its residual). Entering
v (depth-first, children in sibling order): w_v = min(1, w_u P_u(v) / Q_u(v)) from its parent u's
current state (Q_u: the law v was drawn from; a point mass on v for point children; for wor, q
without the siblings already deleted). Leaving v (post-order, its children all deleted): its coin
accepts v with probability w_v, and the output is the path to v and one token from P_v. Else v is
deleted, and its parent's state becomes the residual of that child:
    m = sum_x max(w_u P_u(x) - Q_u(x), 0),   P_u := norm(max(w_u P_u - Q_u, 0)),   w_u := m / (m + 1 - w_u)
The root (w = 1) is never deleted: with every child gone, its token comes from its residual.
Accepted tokens after an EOS are dropped (a function of an exactly distributed sequence is exact).
"""

from __future__ import annotations

import torch

from framework.core.ragged_tree import RaggedTrees
from framework.core.randomness import RandomSource
from framework.core.tree import CandidateTree
from framework.core.verification import Verification
from verifiers.by_shape import verify_by_shape
from verifiers.emit import NodePicker
from verifiers.rules import normalize_or_keep, widened
from verifiers.tree_verifier import TreeVerifier


def _post_order(children: list[list[int]]) -> list[tuple[str, int]]:
    """[("enter"|"leave", node)] over nodes 0..N-1 (the root, row 0, is neither), depth-first."""
    events: list[tuple[str, int]] = []

    def visit(row: int) -> None:
        for child in children[row]:
            events.append(("enter", child))
            visit(child + 1)
            events.append(("leave", child))

    visit(0)
    return events


class TraversalVerifier(NodePicker):
    """Traversal verification for trees (and chains) of point, iid or wor children."""

    def deleted(self, w, P, Q, token, kind):
        """The parent's (w, P, Q) once its child with `token` [A] was rejected with its whole subtree."""
        residual = (w[:, None] * P - Q).clamp_min(0)  # [A, V]
        mass = residual.sum(-1)  # [A]
        rest = mass + 1 - w
        new_w = torch.where(rest > 0, mass / torch.where(rest > 0, rest, 1), 0)
        new_P = normalize_or_keep(residual, P)
        if kind == "wor":  # the next sibling is drawn without the deleted one
            Q = normalize_or_keep(Q.scatter(-1, token[:, None], 0.0), Q)
        return new_w, new_P, Q

    def __call__(self, tree: CandidateTree, target_probs: torch.Tensor, rng: RandomSource,
                 eos_token_id: int | None = None) -> Verification:
        if isinstance(tree, RaggedTrees):  # one shape at a time
            return verify_by_shape(self, tree, target_probs, rng, eos_token_id)
        B, N = tree.tokens.shape
        if N == 0:  # plain decoding: the root's token alone, as every rule draws it
            return TreeVerifier()(tree, target_probs, rng, eos_token_id)
        tree, target_probs = widened(tree, target_probs)
        V, device = target_probs.shape[-1], target_probs.device
        tokens, parents = tree.tokens.to(device), tree.parents.tolist()
        kids: list[list[int]] = [[] for _ in range(N + 1)]
        for i, parent in enumerate(parents):
            kids[parent + 1].append(i)
        rows = torch.arange(B, device=device)
        uniforms = rng.uniform((B, N + 1, 1), device)  # coin of node i: column i + 1 (the root's unused)

        w = {0: torch.ones(B, dtype=target_probs.dtype, device=device)}  # per row (0 = root) on the current path only
        P = {0: target_probs[:, 0].clone()}
        Q = {}  # per row: the law its next child was drawn from (iid / wor), current
        if tree.kind != "point":
            Q[0] = tree.draft_probs[:, 0].clone()
        active = torch.ones(B, dtype=torch.bool, device=device)
        stop_row = torch.zeros(B, dtype=torch.long, device=device)  # where each row stopped (0: the root)
        final = torch.empty(B, V, dtype=target_probs.dtype, device=device)

        def q_of(parent_row, child):
            if tree.kind == "point":
                return torch.nn.functional.one_hot(tokens[:, child], V).to(target_probs.dtype)
            return Q[parent_row]

        for event, node in _post_order(kids):
            row, parent_row = node + 1, parents[node] + 1
            c = tokens[:, node]
            if event == "enter":
                q_c = q_of(parent_row, node)[rows, c]
                ratio = P[parent_row][rows, c] / q_c.clamp_min(torch.finfo(target_probs.dtype).tiny)
                w[row] = torch.clamp(w[parent_row] * ratio, max=1.0)
                P[row] = target_probs[:, row].clone()
                if tree.kind != "point":
                    Q[row] = tree.draft_probs[:, row].clone()
                continue
            # leaving v: its subtree is done, so its state is dead after this test (memory: the path, not the tree)
            w_v, P_v = w.pop(row), P.pop(row)
            Q.pop(row, None)
            hit = (uniforms[:, row, 0] < torch.where(active, w_v, 0)) & active
            if bool(hit.any()):
                stop_row[hit] = row
                final[hit] = P_v[hit]
                active &= ~hit
                if not bool(active.any()):  # every row has its node: the rest of the walk reads nothing
                    break
            w[parent_row], P[parent_row], new_q = self.deleted(w[parent_row], P[parent_row], q_of(parent_row, node), c,
                                                               tree.kind)
            if tree.kind == "wor":
                Q[parent_row] = new_q
        final[active] = P[0][active]  # every child deleted: the root's residual

        return self.emit(tree, stop_row, final, rng, eos_token_id)
