"""The tree walk shared by every acceptance rule, vectorised over the batch.

From the root, try the current node's children in sibling order with the rule of the tree's
kind. An accepted child becomes the current node (its own p, its own q). When no child is
accepted, emit one *recovered* token from what is left of r; at a leaf, r is still the leaf's
full p and the token is the *bonus*. An accepted EOS ends the row with nothing after it.

Randomness: one uniform per (row, level, child slot), drawn up front, and one categorical
draw per row at the end, both from the one random source.

Speed: the walk is memory-bound, so it only touches the rows that need it. Each level enters
only the rows still walking (whole-row index_select); the acceptance test is gathers (p(c),
q(c)); a rule's [rows, V] update runs only where a child was rejected (on every tested row
when most rejected: cheaper than copying them out); a row's final law is written once, by row,
when it stops. On CPU the batch is walked in blocks of rows, so that the [rows, V] temporaries
are small enough to stay in cache and be reused by malloc (a fresh 100 MB temporary costs
more in page faults and memory traffic than its arithmetic).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Protocol

import torch

from framework.core.ragged_tree import RaggedTrees, WalkLayout
from framework.core.randomness import RandomSource, law_dtype
from framework.core.tree import CandidateTree
from framework.core.verification import Verification
from verifiers.rules import LOSSLESS_RULES, ChildRule, NodeLaw

CPU_BLOCK_ELEMENTS = 1 << 19  # [rows, V] elements per block on CPU (2 MB in float32: measured best of 2^17..2^21)


class Verifier(Protocol):
    """A swappable verification rule: (tree, target laws, random source, EOS) -> Verification."""

    lossless: bool

    def __call__(self, tree, target_probs: torch.Tensor, rng: RandomSource,
                 eos_token_id: int | None = None) -> Verification: ...


@dataclass
class _Step:
    """One verification: its inputs, and its outputs filled in by batch row."""

    rule: ChildRule
    layout: WalkLayout  # global nodes: tokens, children, roots, law rows, bonus tokens
    target_probs: torch.Tensor  # [R, V] the laws' table
    draft_probs: torch.Tensor | None  # [R, V]
    eos_token_id: int | None
    out: torch.Tensor  # [B, N+1] accepted tokens, -1 padded
    path: torch.Tensor  # [B, depth+1] accepted node indices (within the request), -1 padded
    num_accepted: torch.Tensor  # [B]
    emits: torch.Tensor  # [B] False once a row accepted EOS
    final: torch.Tensor  # [B, V] law of each row's recovered or bonus token
    entry: tuple  # ([rows, V], [rows, V] or None): where enter copies p and q, reused level after level


def _rows(table: torch.Tensor, law_rows: torch.Tensor | None, node: torch.Tensor, out: torch.Tensor | None,
          dtype: torch.dtype) -> torch.Tensor:
    """The laws of global nodes `node` [A] from table [R, V] -> [A, V] in `dtype`, into out[:A] if given.
    Whole-row copies (index_select): several times faster than advanced indexing's per-element gather.
    Rows of a half-precision table are widened as they are copied: only the rows walked pay for it."""
    index = node if law_rows is None else law_rows[node]  # [A]
    if table.dtype != dtype:
        rows = table.index_select(0, index).to(dtype)
        return rows if out is None else out[: index.numel()].copy_(rows)
    return table.index_select(0, index) if out is None \
        else torch.index_select(table, 0, index, out=out[: index.numel()])


def _table(probs: torch.Tensor | None) -> torch.Tensor | None:
    """[B, N+1, V] or [R, V] -> [rows, V] (a view when contiguous)."""
    return None if probs is None else probs.reshape(-1, probs.shape[-1])


def _take(law: NodeLaw, mask: torch.Tensor) -> NodeLaw:
    """The rows of `law` where mask [A] holds; no copy when it holds everywhere. Keeps r is p."""
    if bool(mask.all()):
        return law
    idx = mask.nonzero().squeeze(1)  # [A'] (index_select copies rows; a boolean index gathers elements)
    p = law.p.index_select(0, idx)
    r = p if law.r is law.p else law.r.index_select(0, idx)
    return NodeLaw(p, r, None if law.q is None else law.q.index_select(0, idx),
                   None if law.siblings is None else law.siblings.index_select(0, idx))


class TreeVerifier:
    """Walks candidate trees (a CandidateTree, or RaggedTrees) with one ChildRule per kind;
    lossless iff every rule is."""

    def __init__(self, rules: Mapping[str, ChildRule] = LOSSLESS_RULES):
        self.rules = dict(rules)

    @property
    def lossless(self) -> bool:
        return all(rule.lossless for rule in self.rules.values())

    # Hooks, one decision each, so that the harness can plant bugs in exactly one place. They see
    # the rows concerned only: `uniforms` are a block's rows, laws and masks the rows tested,
    # stopping or entering (compacted), never rows that have already stopped.
    def coin(self, uniforms, level: int, slot: int):
        return uniforms[:, level, slot]

    def accepts(self, u, ratio: torch.Tensor) -> torch.Tensor:
        return u < ratio  # strict: a ratio of 0 is never accepted, even when u is exactly 0.0

    def final_law(self, law: NodeLaw, at_leaf: torch.Tensor) -> torch.Tensor:
        return law.r

    def committed_path(self, path: torch.Tensor) -> torch.Tensor:
        """The accepted nodes [B, depth] handed to the KV commit (the tokens are decided already)."""
        return path

    def enter(self, step: _Step, node: torch.Tensor, *, out=None) -> NodeLaw:
        """The law at global nodes `node` [A]: r = p (nothing rejected yet), and q.
        out: buffers to copy p and q into (the walk's, reused: no fresh [rows, V] each level)."""
        out_p, out_q = (None, None) if out is None else out
        law_rows, dtype = step.layout.law_rows, step.final.dtype
        p = _rows(step.target_probs, law_rows, node, out_p, dtype)
        siblings = (step.layout.children[node] >= 0).sum(1)  # [A]
        q = None if step.draft_probs is None else _rows(step.draft_probs, law_rows, node, out_q, dtype)
        return NodeLaw(p, p, q, siblings)

    def __call__(
        self,
        tree: CandidateTree | RaggedTrees,
        target_probs: torch.Tensor,
        rng: RandomSource,
        eos_token_id: int | None = None,
    ) -> Verification:
        """target_probs: [B, N+1, V] for a CandidateTree, the [R, V] table for RaggedTrees."""
        if tree.kind not in self.rules:
            raise ValueError(f"no acceptance rule for kind {tree.kind!r} (have {sorted(self.rules)})")
        V, device = target_probs.shape[-1], target_probs.device
        if tree.batch_size == 0:  # an engine's empty batch: nothing to decide
            none = torch.zeros(0, dtype=torch.long, device=device)
            nodes, depth = (tree.num_nodes, tree.shape.max_depth) if isinstance(tree, CandidateTree) else (0, 0)
            return Verification(none.reshape(0, nodes + 1), none, none.reshape(0, depth))
        if isinstance(tree, CandidateTree) and tree.tokens.shape[1] == 0:
            # plain decoding: the bonus token alone, without the walk's bookkeeping
            B = tree.tokens.shape[0]
            bonus = rng.categorical(target_probs[:, 0])  # [B]
            empty = torch.zeros(B, 0, dtype=torch.long, device=device)
            return Verification(bonus[:, None], torch.zeros(B, dtype=torch.long, device=device), empty)
        layout = tree.walk_layout() if isinstance(tree, RaggedTrees) else WalkLayout.of_candidate(tree)
        B = layout.roots.numel()
        layout.tokens, layout.children = layout.tokens.to(device), layout.children.to(device)
        uniforms = rng.uniform((B, layout.max_depth + 1, layout.children.shape[1] - 1), device)
        # CUDA's caching allocator already reuses blocks: one block there, fewer launches and syncs.
        block = max(1, min(B, CPU_BLOCK_ELEMENTS // V)) if device.type == "cpu" else max(B, 1)
        p, q = _table(target_probs), _table(tree.draft_probs)
        dtype = law_dtype(p, q)  # the rules' arithmetic: float32 at least, whatever the tables hold
        step = _Step(
            self.rules[tree.kind], layout, p, q, eos_token_id,
            out=torch.full((B, layout.width), -1, dtype=torch.long, device=device),
            path=torch.full((B, layout.max_depth + 1), -1, dtype=torch.long, device=device),
            num_accepted=torch.zeros(B, dtype=torch.long, device=device),
            emits=torch.ones(B, dtype=torch.bool, device=device),
            final=torch.empty(B, V, dtype=dtype, device=device),  # every row writes its own
            entry=(p.new_empty(block, V, dtype=dtype), None if q is None else q.new_empty(block, V, dtype=dtype)),
        )
        for start in range(0, B, block):
            self._walk(step, start, uniforms[start : start + block])

        extra = rng.categorical(step.final)  # [B] recovered or bonus token
        step.out[torch.arange(B, device=device), step.num_accepted] = torch.where(step.emits, extra, -1)
        return Verification(step.out, step.num_accepted, self.committed_path(step.path[:, : layout.max_depth]))

    def _walk(self, step: _Step, start: int, uniforms) -> None:
        """Rows start.. of the batch, level by level; uniforms [rows, depth+1, C] are theirs."""
        rows = torch.arange(start, start + uniforms.shape[0], device=step.out.device)  # [A] rows still walking
        node = step.layout.roots[rows]  # [A] their current (global) node
        for level in range(uniforms.shape[1]):
            leaf = step.layout.children[node, 0] < 0  # [A] the bonus: drawn from the leaf's full p
            if bool(leaf.any()):
                self._at_leaves(step, rows[leaf], node[leaf])
                rows, node = rows[~leaf], node[~leaf]
            if not rows.numel():
                return
            # [A, V] in step.entry: the leaf rows' law is already copied into final, and this
            # level's law is dead by the next enter (stopped rows copied, the rest re-enter).
            law = self.enter(step, node, out=step.entry)
            rows, child = self._try_children(step, level, rows, node, law, uniforms, start)
            rows, node = self._advance(step, level, rows, child)

    def _try_children(self, step: _Step, level: int, rows, node, law: NodeLaw, uniforms, start: int):
        """Test each row's children in sibling order. Returns the rows that accepted one and that
        child; a row that rejects its last child stops, its residual the final law."""
        moved_rows, moved_children = [], []
        for slot in range(step.layout.children.shape[1] - 1):
            child = step.layout.children[node, slot]  # [T] every row here has this child
            token = step.layout.tokens[child]  # [T]
            ratio = step.rule.accept_probability(law, token)  # [T] gathers, no [T, V] pass for the lossless rules
            accepted = self._coin_test(uniforms, level, slot, rows - start, ratio)  # [T]
            moved_rows.append(rows[accepted])
            moved_children.append(child[accepted])
            rejected = ~accepted
            num_rejected = int(rejected.sum())
            if num_rejected == 0:
                break
            if 2 * num_rejected <= rows.numel():  # few rejected: copy their rows out, update only those
                rows, node, token, law = rows[rejected], node[rejected], token[rejected], _take(law, rejected)
                rejected = torch.ones_like(rows, dtype=torch.bool)
            # else most rejected: updating every row costs less than copying the rejected ones out
            law = step.rule.after_reject(law, token)  # [T, V]; rows that accepted are dropped below
            stops = rejected & (step.layout.children[node, slot + 1] < 0)  # [T] rejected the last sibling
            self._stop(step, rows, law, stops, at_leaf=False)
            walks_on = rejected & ~stops  # [T] rejected, a sibling left
            if not bool(walks_on.any()):
                break
            rows, node, law = rows[walks_on], node[walks_on], _take(law, walks_on)
        return torch.cat(moved_rows), torch.cat(moved_children)

    def _coin_test(self, uniforms, level: int, slot: int, local: torch.Tensor, ratio: torch.Tensor):
        """accepted [T]: the coins of the block's rows `local` against their ratios [T].

        The coin is taken for the whole block (a view: the harness's lazy uniforms keep what
        each comparison revealed), rows not tested here against ratio 0, never accepted."""
        full = ratio.new_zeros(uniforms.shape[0])  # [rows of the block]
        full[local] = ratio
        return self.accepts(self.coin(uniforms, level, slot), full)[local]

    def _at_leaves(self, step: _Step, rows: torch.Tensor, node: torch.Tensor) -> None:
        """rows reached leaves `node`: the bonus, from the leaf's full p (or the given bonus token)."""
        if step.layout.bonus is None:
            law = self.enter(step, node, out=step.entry)
            self._stop(step, rows, law, torch.ones_like(rows, dtype=torch.bool), at_leaf=True)
            return
        step.final.index_fill_(0, rows, 0)  # a point mass on the token already drawn
        step.final[rows, step.layout.bonus[rows]] = 1

    def _stop(self, step: _Step, rows: torch.Tensor, law: NodeLaw, mask: torch.Tensor, at_leaf: bool) -> None:
        """rows[mask] stop here: their final law (from `law`, [T, V]) goes to step.final by row."""
        if not bool(mask.any()):
            return
        final = self.final_law(law, torch.full(rows.shape, at_leaf, dtype=torch.bool, device=rows.device))
        if not bool(mask.all()):
            idx = mask.nonzero().squeeze(1)
            rows, final = rows[idx], final.index_select(0, idx)
        step.final.index_copy_(0, rows, final)

    def _advance(self, step: _Step, level: int, rows, child):
        """Record each row's accepted child; a row that accepted EOS ends here, nothing drawn
        after it. Returns the rows that walk on and their new node's row."""
        token = step.layout.tokens[child]  # [M]
        step.out[rows, level] = token
        step.path[rows, level] = child - step.layout.roots[rows] - 1
        step.num_accepted[rows] += 1
        if step.eos_token_id is not None:
            ended = rows[token == step.eos_token_id]
            step.final.index_fill_(0, ended, 0)  # a placeholder law, one certain outcome: its draw is dropped
            step.final[ended, 0] = 1
            step.emits[ended] = False
            keep = token != step.eos_token_id
            rows, child = rows[keep], child[keep]
        return rows, child
