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
Every request is walked in the same call, whatever its shape; the output is [B, max nodes + 1], -1 padded.
"""

from __future__ import annotations

import torch

from framework.randomness import RandomSource
from framework.ragged_tree import RaggedTrees
from framework.tree import CandidateTree
from verifiers import LOSSLESS, Verifier, verify
from verifiers.checks import check_verify_inputs


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
    counts = torch.as_tensor(num_draft_tokens, dtype=torch.long, device=draft_token_ids.device)
    if bonus_token_ids.numel() != counts.numel():
        raise ValueError(f"bonus_token_ids must be [B, 1] = [{counts.numel()}, 1], got {tuple(bonus_token_ids.shape)}")
    trees = RaggedTrees.chains(draft_token_ids, counts, draft_probs, bonus_token_ids)
    return verify(trees, target_probs, generator, rng=rng, validate=validate, verifier=verifier).tokens


def padded_chains(draft_token_ids, num_draft_tokens, draft_probs, target_probs, bonus_token_ids,
                  validate: bool = True) -> tuple[CandidateTree, torch.Tensor]:
    """The flat ragged fields -> (a chain [B, K], target_probs [B, K+1, V]) for `verify`: the same
    requests padded to one shape, the reference the ragged walk is compared with (tests, bench)."""
    counts = torch.as_tensor(num_draft_tokens, dtype=torch.long, device=draft_token_ids.device)
    B, V, T = counts.numel(), target_probs.shape[-1], draft_token_ids.shape[0]
    bonus = bonus_token_ids.reshape(-1).long()
    if bonus.numel() != B:
        raise ValueError(f"bonus_token_ids must be [B, 1] = [{B}, 1], got {tuple(bonus_token_ids.shape)}")
    if validate:
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


def parents_from_links(first_child: list[int], next_sibling: list[int]) -> list[int]:
    """Sibling links over [root, node 0, node 1, ...] (index 0 = the root; -1 = none) -> parents [N]
    in our convention (-1 = a child of the root, else the parent's node index)."""
    if len(first_child) != len(next_sibling):
        raise ValueError(f"first_child has {len(first_child)} entries but next_sibling has {len(next_sibling)}")
    parents = [None] * (len(first_child) - 1)
    for slot, child in enumerate(first_child):
        seen = set()
        while child != -1:
            if not 0 < child < len(first_child) or child in seen:
                raise ValueError(f"sibling links: slot {child} (under slot {slot}) is not a node, or a cycle")
            if parents[child - 1] is not None:
                raise ValueError(f"sibling links: node slot {child} has two parents")
            seen.add(child)
            parents[child - 1] = slot - 1
            child = next_sibling[child]
    orphans = [i for i, parent in enumerate(parents) if parent is None]
    if orphans:
        raise ValueError(f"sibling links: node slots {[i + 1 for i in orphans]} hang under no node")
    return parents


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
) -> torch.Tensor:
    """SGLang-shaped flat trees through `verify` (see the module docstring): [B, max nodes + 1], -1 padded.
    Every request in one walk, whatever its shape (TraversalVerifier(): one shape at a time)."""
    trees = RaggedTrees(draft_token_ids, torch.as_tensor(parents, device=draft_token_ids.device), num_draft_tokens,
                        draft_probs, kind if draft_probs is not None else "point")
    return verify(trees, target_probs, generator, rng=rng, validate=validate, verifier=verifier).tokens
