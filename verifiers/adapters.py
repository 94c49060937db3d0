"""The verifier in the shapes engines already hold: views onto RaggedTrees and the one `verify`,
no rule of their own, no padded copy of the laws (the walk reads them where they lie).

ragged_chains: flat ragged chains as vLLM's rejection sampler takes them. Field by field:
    draft_token_ids [T]     every request's drafts, request after request   -> RaggedTrees.draft_token_ids
    num_draft_tokens [B]    k_b, drafts of request b (sum = T)              -> num_draft_tokens; parents: a chain
    draft_probs [T, V]      the law each draft was sampled from, or None     -> the draft table, kind "iid"
                            (argmax / n-gram drafts: a rule, no law)            (None: "point")
    target_probs [T, V]     the target's processed law at each draft's       -> the target table; request b's
                            position (given the drafts before it)               root and node i read rows
                                                                                starts[b] and starts[b] + i + 1
    bonus_token_ids [B, 1]  the target's sample after a fully accepted chain -> bonus_token_ids: the leaf emits it
Output [B, max k + 1]: the accepted drafts, then the recovered token at the first rejection (or the
bonus token), then -1. A request with no drafts emits its bonus token (the target's own sample).

flat_trees: one tree per request, flat, as tree engines (SGLang-style) hold them:
    draft_token_ids [T], num_draft_tokens [B]  as above                      -> the same fields
    parents [T]                 per node, its parent's index within the     -> RaggedTrees.parents
                                request (-1 = a child of the root)
                                (sibling links: parents_from_links first)
    target_probs [T + B, V]     per request its root's law, then each       -> the target table, in the
                                node's (the law after it: where the bonus      layout's own order
                                or the next level comes from)                  (law_rows None)
    draft_probs [T + B, V]      the same layout: the law each node's        -> the draft table, kind "iid" or
                                children were drawn from, or None              "wor"; None: "point"
Every request is walked in the same call, whatever its shape. It returns an EngineVerification: the
tokens [B, max nodes + 1] (-1 padded), and the accepted nodes as the caller's indices and table rows.

linked_trees: trees held as sibling links in S slots per request (SGLang's layout, verifiers/links.py):
siblings tried in the linked order, unused slots skipped, slots in any order; same output.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from framework.core.ragged_tree import RaggedTrees
from framework.core.randomness import RandomSource
from framework.core.tree import CandidateTree, integers
from verifiers import LOSSLESS, Verification, Verifier, verify
from verifiers.checks import check_device, check_verify_inputs
from verifiers.links import order_links


def ragged_chains(
    draft_token_ids: torch.Tensor,
    num_draft_tokens: torch.Tensor | list[int],
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    bonus_token_ids: torch.Tensor,
    generator: torch.Generator | None = None,
    validate: bool = True,
    verifier: Verifier = LOSSLESS,
    rng: RandomSource | None = None,
) -> torch.Tensor:
    """vLLM-shaped chains through `verify` (see the module docstring): [B, max drafts + 1], -1 padded.
    Walked where they lie: no padded copy of the laws. `verifier`: any rule (BlockVerifier() for block
    verification, one chain length at a time)."""
    if validate:
        check_device("draft_token_ids", draft_token_ids, target_probs.device)
    counts = integers("num_draft_tokens", num_draft_tokens, draft_token_ids.device)
    if bonus_token_ids.numel() != counts.numel():
        raise ValueError(f"bonus_token_ids must be [B, 1] = [{counts.numel()}, 1], got {tuple(bonus_token_ids.shape)}")
    if validate:
        check_chain_tables(draft_token_ids.shape[0], draft_probs, target_probs)
    trees = RaggedTrees.chains(draft_token_ids, counts, draft_probs, bonus_token_ids)
    return verify(trees, target_probs, generator, rng=rng, validate=validate, verifier=verifier).tokens


def check_chain_tables(T: int, draft_probs: torch.Tensor | None, target_probs: torch.Tensor) -> None:
    """vLLM's tables hold exactly one row per draft: an extra row would shift every request's laws."""
    for name, probs in (("target_probs", target_probs), ("draft_probs", draft_probs)):
        if probs is not None and (probs.dim() != 2 or probs.shape[0] != T):
            raise ValueError(f"{name} must be [T, V] = [{T}, V] (one row per draft token), got {tuple(probs.shape)}")


def padded_chains(draft_token_ids, num_draft_tokens, draft_probs, target_probs, bonus_token_ids,
                  validate: bool = True) -> tuple[CandidateTree, torch.Tensor]:
    """The flat ragged fields -> (a chain [B, K], target_probs [B, K+1, V]) for `verify`: the same
    requests padded to one shape, the reference the ragged walk is compared with (tests, bench)."""
    counts = integers("num_draft_tokens", num_draft_tokens, draft_token_ids.device)
    B, V, T = counts.numel(), target_probs.shape[-1], draft_token_ids.shape[0]
    bonus = bonus_token_ids.reshape(-1).long()
    if bonus.numel() != B:
        raise ValueError(f"bonus_token_ids must be [B, 1] = [{B}, 1], got {tuple(bonus_token_ids.shape)}")
    if validate:
        check_chain_tables(T, draft_probs, target_probs)
        check_verify_inputs(RaggedTrees.chains(draft_token_ids, counts, draft_probs, bonus), target_probs)
    K = int(counts.max()) if B else 0
    position = torch.arange(K, device=counts.device)
    real = position[None, :] < counts[:, None]  # [B, K] drafts, not padding
    flat = ((counts.cumsum(0) - counts)[:, None] + position[None, :]).clamp(0, max(T - 1, 0))  # [B, K]
    pad = (bonus + 1) % V  # [B] never the bonus: probability 0 under the point mass at the bonus position
    tokens = torch.where(real, draft_token_ids[flat] if T else pad[:, None], pad[:, None])  # [B, K]
    real_rows = torch.nn.functional.pad(real, (0, 1))  # [B, K+1]: rows holding a given law
    p = padded_rows(target_probs, real_rows, bonus)  # rows from k_b on: the point mass on the bonus
    q = None
    if draft_probs is not None:
        q = padded_rows(draft_probs, real_rows, pad)  # padded nodes were "drawn" from a point mass
        q[:, K] = 1.0 / V  # the last node draws no children: a placeholder law, never read
    return CandidateTree.chain(tokens, q, "iid" if q is not None else "point"), p


def padded_rows(flat_probs: torch.Tensor, real_rows: torch.Tensor, atom: torch.Tensor) -> torch.Tensor:
    """[B, K+1, V]: flat_probs' rows in order where real_rows, a point mass on atom[b] elsewhere; each row is
    written once (no pass over a full padded tensor first: it is as large as the laws themselves)."""
    B, rows = real_rows.shape
    V = flat_probs.shape[-1]
    out = flat_probs.new_empty(B * rows, V)
    given = real_rows.flatten().nonzero().flatten()  # row-major: request after request, as flat_probs holds them
    out.index_copy_(0, given, flat_probs)  # one pass, straight into place
    filler = (~real_rows).flatten().nonzero().flatten()
    out.index_fill_(0, filler, 0.0)
    out[filler, atom.repeat_interleave(rows)[filler]] = 1.0
    return out.view(B, rows, V)


@dataclass
class EngineVerification:
    """What a tree engine needs back: the tokens, and which of its own slots were accepted (to keep
    their KV and hidden states): rebuilding that from tokens is ambiguous when siblings share a token."""

    tokens: torch.Tensor  # [B, D+1] accepted drafts, then the recovered or bonus token; -1 padded
    num_accepted: torch.Tensor  # [B] accepted drafts
    # [B, D] the accepted drafts' indices within the request, in the caller's layout; -1 padded
    accepted_slots: torch.Tensor
    accept_index: torch.Tensor  # [B, D+1] rows of the caller's table: the root's, then the accepted drafts'; -1 padded


def _engine_result(result: Verification, slots: torch.Tensor, root_rows: torch.Tensor,
                   shift: int) -> EngineVerification:
    """result.path (node indices in the walk's order) -> the caller's slots, through slots [B, N] (each walked
    node's slot, -1 padded), and rows of its table: the root's root_rows [B], slot s's root_rows + shift + s."""
    path = result.path  # [B, D]
    accepted = torch.where(path >= 0, slots.gather(1, path.clamp_min(0)), -1) if slots.shape[1] else path  # [B, D]
    rows = torch.where(accepted >= 0, root_rows[:, None] + shift + accepted, -1)
    return EngineVerification(result.tokens, result.num_accepted, accepted, torch.cat([root_rows[:, None], rows], 1))


def flat_trees(
    draft_token_ids: torch.Tensor,
    num_draft_tokens: torch.Tensor | list[int],
    parents: torch.Tensor | list[int],
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    kind: str = "iid",
    generator: torch.Generator | None = None,
    validate: bool = True,
    verifier: Verifier = LOSSLESS,
    rng: RandomSource | None = None,
    max_accepted=None,
) -> EngineVerification:
    """Flat trees with parent indices through `verify` (see the module docstring). Every request in one
    walk, whatever its shape (TraversalVerifier(): one shape at a time). max_accepted: an int or [B]
    (num_speculative_tokens): nodes deeper are dropped before any coin. accept_index: rows of the
    [T + B] table (request b's root at starts[b] + b, its node i right after it)."""
    trees = RaggedTrees(draft_token_ids, parents, num_draft_tokens, draft_probs,
                        kind if draft_probs is not None else "point")
    if validate:
        check_verify_inputs(trees, target_probs)
    walked, kept = (trees, None) if max_accepted is None else trees.within_depth(max_accepted)
    result = verify(walked, target_probs, generator, rng=rng, validate=False, verifier=verifier)
    B, N = trees.batch_size, int(trees.num_draft_tokens.max()) if trees.batch_size else 0
    position = trees.positions()
    # each walked node's index in the caller's request
    slots = torch.full((B, N), -1, dtype=torch.long, device=position.device)
    slots[walked.request_of(), walked.positions()] = position if kept is None else position[kept]
    # the table: request b's root at starts[b] + b, node i after it
    return _engine_result(result, slots, trees.roots(), 1)


def linked_trees(
    candidates: torch.Tensor,
    first_child: torch.Tensor,
    next_sibling: torch.Tensor,
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor | None = None,
    kind: str = "iid",
    generator: torch.Generator | None = None,
    validate: bool = True,
    verifier: Verifier = LOSSLESS,
    rng: RandomSource | None = None,
    max_accepted=None,
) -> EngineVerification:
    """Trees held as sibling links, SGLang's layout (verifiers/links.py). Field by field:
        candidates [B, S]       slot 0: the root (last verified token), then the drafts   (SGLang: candidates)
        first_child [B, S]      each slot's first child slot, -1 = none                  (retrive_next_token)
        next_sibling [B, S]     each slot's next sibling slot, -1 = none                 (retrive_next_sibling)
        target_probs [B, S, V]  (or [B*S, V]) the target's law after each slot's token   (target_probs)
        draft_probs             the same layout: the law each slot's children were drawn from, or None (point)
    Siblings are tried in the linked order (for iid/wor: the draw order); slots linked from nowhere are
    skipped; slots may lie in any order. accept_index [B, D+1] holds flat slots b*S + slot, the root's
    first (SGLang's accept_index); max_accepted: an int or [B] (num_speculative_tokens)."""
    if candidates.dim() != 2:
        raise ValueError(f"candidates must be [B, S] (slot 0 = the root), got {tuple(candidates.shape)}")
    B, S = candidates.shape
    if validate:
        integers("candidates", candidates)
        check_device("candidates", candidates, target_probs.device)
    for name, links in (("first_child", first_child), ("next_sibling", next_sibling)):  # sizes before any reshape
        if tuple(links.shape) != (B, S):
            raise ValueError(f"{name} must be [B, S] = [{B}, {S}] like candidates, got {tuple(links.shape)}")
    for name, laws in (("target_probs", target_probs), ("draft_probs", draft_probs)):
        if laws is not None and tuple(laws.shape[:-1]) not in ((B, S), (B * S,)):
            raise ValueError(f"{name} must be [B, S, V] = [{B}, {S}, V] or [B*S, V] like candidates, got "
                             f"{tuple(laws.shape)}")
    if draft_probs is not None and draft_probs.shape[-1] != target_probs.shape[-1]:
        raise ValueError(f"draft_probs' vocabulary ({draft_probs.shape[-1]}) is not target_probs' "
                         f"({target_probs.shape[-1]})")
    order = order_links(first_child.to(candidates.device), next_sibling.to(candidates.device), max_accepted)
    V = target_probs.shape[-1]
    flat_p = target_probs.reshape(B * S, V) if target_probs.dim() == 3 else target_probs
    flat_q = None if draft_probs is None else (draft_probs.reshape(B * S, V) if draft_probs.dim() == 3 else draft_probs)
    if flat_p.dim() != 2 or flat_p.shape[0] != B * S:
        raise ValueError(f"target_probs must be [B, S, V] or [B*S, V] = [{B * S}, V], got {tuple(target_probs.shape)}")
    node = order.slots >= 0  # [B, S-1] real nodes, in our order
    rows_of_slots = torch.arange(B, device=candidates.device)[:, None] * S  # [B, 1] each request's slot 0
    tokens = candidates.gather(1, order.slots.clamp_min(0))[node]  # [T]
    law_rows = torch.cat([rows_of_slots, rows_of_slots + order.slots.clamp_min(0)], 1)  # [B, S]: the root, then nodes
    # [T + B] per request its root, then its nodes
    law_rows = law_rows[torch.nn.functional.pad(node, (1, 0), value=True)]
    trees = RaggedTrees(tokens, order.parents[node], order.counts, flat_q, kind if flat_q is not None else "point",
                        law_rows)
    result = verify(trees, flat_p, generator, rng=rng, validate=validate, verifier=verifier)
    return _engine_result(result, order.slots, rows_of_slots[:, 0], 0)
