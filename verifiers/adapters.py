"""The verifier in the shapes engines already hold: converters around the one `verify`, no rule of their own.

ragged_chains: flat ragged chains as vLLM's rejection sampler takes them. Field by field:
    draft_token_ids [T]     every request's drafts, request after request   -> row b of a chain [B, K]
    num_draft_tokens [B]    k_b, drafts of request b (sum = T)              -> row b's chain length
    draft_probs [T, V]      the law each draft was sampled from, or None     -> draft_probs rows 0..k_b-1,
                            (argmax / n-gram drafts: a rule, no law)            kind "iid" (None: "point")
    target_probs [T, V]     the target's processed law at each draft's       -> target_probs rows 0..k_b-1
                            position (given the drafts before it)
    bonus_token_ids [B, 1]  the target's sample after a fully accepted chain -> row k_b: a point mass on it
Output [B, max k + 1]: the accepted drafts, then the recovered token at the first rejection (or the
bonus token), then -1. Rows shorter than K = max k are padded with a token the point mass at their
bonus position gives probability 0, so a padded node is rejected with certainty and the residual there
is the bonus token itself: each row's law is the one its own k_b drafts define. A request with no
drafts emits its bonus token (the target's own sample).

flat_trees: one tree per request, flat, as tree engines (SGLang-style) hold them:
    draft_token_ids [T], num_draft_tokens [B]  as above                      -> each request's nodes
    parents [T]                 per node, its parent's index within the     -> CandidateTree parents
                                request (-1 = a child of the root)
                                (sibling links: parents_from_links first)
    target_probs [T + B, V]     per request its root's law, then each       -> target_probs [N+1, V]
                                node's (the law after it: where the bonus
                                or the next level comes from)
    draft_probs [T + B, V]      the same layout: the law each node's        -> draft_probs, kind "iid" or
                                children were drawn from, or None              "wor"; None: "point"
Requests with the same tree shape are verified together in one call (engines with a static tree
verify the whole batch at once); the output is [B, max nodes + 1], -1 padded.
"""

from __future__ import annotations

import torch

from framework.tree import CandidateTree
from verifiers import verify
from verifiers.checks import check_law


def _request_of(flat_index: int, counts: torch.Tensor) -> int:
    return int(torch.searchsorted(counts.cumsum(0), torch.tensor(flat_index), right=True))


def _check_ragged(draft_token_ids, counts, draft_probs, target_probs, bonus, vocab: int) -> None:
    T = draft_token_ids.shape[0]
    if (counts < 0).any():
        raise ValueError(f"num_draft_tokens: request {int((counts < 0).nonzero()[0])} has a negative count")
    if int(counts.sum()) != T:
        raise ValueError(f"num_draft_tokens sums to {int(counts.sum())} but draft_token_ids holds {T} tokens")
    for name, probs in (("target_probs", target_probs), ("draft_probs", draft_probs)):
        if probs is not None and (probs.dim() != 2 or probs.shape[0] != T):
            raise ValueError(f"{name} must be [T, V] = [{T}, V], got {tuple(probs.shape)}")
    if draft_probs is not None and draft_probs.shape[1] != vocab:
        raise ValueError(f"draft_probs has vocabulary {draft_probs.shape[1]} but target_probs has {vocab}")
    bad = ((draft_token_ids < 0) | (draft_token_ids >= vocab)).nonzero()
    if bad.numel():
        i = int(bad[0])
        raise ValueError(f"request {_request_of(i, counts)}: draft_token_ids holds {int(draft_token_ids[i])}, outside [0, {vocab})")
    bad = ((bonus < 0) | (bonus >= vocab)).nonzero()
    if bad.numel():
        raise ValueError(f"request {int(bad[0])}: bonus_token_ids holds {int(bonus[bad[0]])}, outside [0, {vocab})")
    for name, probs in (("target_probs", target_probs), ("draft_probs", draft_probs)):
        if probs is None:
            continue
        try:
            check_law(name, probs)  # one pass over every row; only a failure looks for its row
        except ValueError:
            i, error = _first_refused_row(name, probs)
            raise ValueError(f"request {_request_of(i, counts)}: {error}") from None
    if draft_probs is not None and T:
        drawn = draft_probs.gather(1, draft_token_ids[:, None])[:, 0]  # [T] each draft's own probability
        if (drawn <= 0).any():
            i = int((drawn <= 0).nonzero()[0])
            raise ValueError(f"request {_request_of(i, counts)}: a draft has zero draft_probs: it must be the law it was drawn from")


def _first_refused_row(name: str, probs: torch.Tensor) -> tuple[int, ValueError]:
    """The first row check_law refuses in probs [T, V] (which it refuses as a whole), by bisection:
    check_law judges rows one by one, so a slice fails exactly when it holds a refused row."""
    lo, hi = 0, probs.shape[0]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            check_law(name, probs[lo:mid])
            lo = mid
        except ValueError:
            hi = mid
    try:
        check_law(name, probs[lo : lo + 1])
    except ValueError as error:
        return lo, error
    raise AssertionError("check_law refused the whole but none of its rows")


def ragged_chains(
    draft_token_ids: torch.Tensor,
    num_draft_tokens: torch.Tensor | list[int],
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    bonus_token_ids: torch.Tensor,
    generator: torch.Generator | None = None,
    validate: bool = True,
) -> torch.Tensor:
    """vLLM-shaped chains through `verify` (see the module docstring): [B, max drafts + 1], -1 padded."""
    tree, p = padded_chains(draft_token_ids, num_draft_tokens, draft_probs, target_probs, bonus_token_ids, validate)
    return verify(tree, p, generator, validate=validate).tokens


def padded_chains(draft_token_ids, num_draft_tokens, draft_probs, target_probs, bonus_token_ids,
                  validate: bool = True) -> tuple[CandidateTree, torch.Tensor]:
    """The flat ragged fields -> (a chain [B, K], target_probs [B, K+1, V]) for `verify`."""
    counts = torch.as_tensor(num_draft_tokens, dtype=torch.long, device=draft_token_ids.device)
    B, V, T = counts.numel(), target_probs.shape[-1], draft_token_ids.shape[0]
    bonus = bonus_token_ids.reshape(-1).long()
    if bonus.numel() != B:
        raise ValueError(f"bonus_token_ids must be [B, 1] = [{B}, 1], got {tuple(bonus_token_ids.shape)}")
    if validate:
        _check_ragged(draft_token_ids, counts, draft_probs, target_probs, bonus, V)
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
) -> torch.Tensor:
    """SGLang-shaped flat trees through `verify` (see the module docstring): [B, max nodes + 1], -1 padded."""
    counts = [int(c) for c in torch.as_tensor(num_draft_tokens).tolist()]
    parents = [int(x) for x in torch.as_tensor(parents).tolist()]
    T, B = draft_token_ids.shape[0], len(counts)
    if validate:
        if any(c < 0 for c in counts) or sum(counts) != T or len(parents) != T:
            raise ValueError(f"num_draft_tokens {counts} must be >= 0 and sum to draft_token_ids' {T} (and parents' {len(parents)})")
        for name, probs in (("target_probs", target_probs), ("draft_probs", draft_probs)):
            if probs is not None and (probs.dim() != 2 or probs.shape[0] != T + B):
                raise ValueError(f"{name} must be [T + B, V] = [{T + B}, V] (a root row per request), got {tuple(probs.shape)}")
    starts = [sum(counts[:b]) for b in range(B)]
    shapes: dict[tuple[int, ...], list[int]] = {}
    for b in range(B):
        own = tuple(parents[starts[b] : starts[b] + counts[b]])
        if validate and any(not -1 <= x < i for i, x in enumerate(own)):
            raise ValueError(f"request {b}: parents {list(own)} must point backwards (-1 = the root)")
        shapes.setdefault(own, []).append(b)
    width = max(counts, default=0) + 1
    out = torch.full((B, width), -1, dtype=torch.long, device=draft_token_ids.device)
    for shape, rows in shapes.items():
        n = len(shape)
        nodes = torch.tensor([[starts[b] + i for i in range(n)] for b in rows], dtype=torch.long).reshape(len(rows), n)
        laws = torch.tensor([[starts[b] + b + i for i in range(n + 1)] for b in rows], dtype=torch.long)  # root, then nodes
        tree = CandidateTree(draft_token_ids[nodes.to(draft_token_ids.device)], torch.tensor(shape, dtype=torch.long),
                             None if draft_probs is None else draft_probs[laws.to(draft_probs.device)],
                             kind if draft_probs is not None else "point")
        try:
            emitted = verify(tree, target_probs[laws.to(target_probs.device)], generator, validate=validate).tokens
        except ValueError as error:
            raise ValueError(f"requests {rows}: {error}") from None
        out[torch.tensor(rows, device=out.device), : n + 1] = emitted
    return out
