"""PARD: a small causal draft model that fills K positions in one forward, reading mask tokens.

The draft reads [the tokens accepted since its last forward, the root, mask x (K-1)] in one causal
forward (AMD's PARD; vLLM's parallel drafting): the root's output is the law of depth 1, mask j's
that of depth j+1, each conditioned on the context and on masks, never on the tokens drafted
before it. The tree comes from those per-position laws (proposers/common/position_tree.py): a
chain sampled from each position's law with that law as the verifier's q, or top-ranked tokens
(point). The context's KV stays in the draft's cache across steps; the masks' is dropped. Tokens
accepted at a step are read at the next step's forward, in front of the root, one forward per
step even when rows accepted different numbers (a per-row mask hides each short row's holes).

The mask is the draft's `pard_token` (its config, as vLLM reads it), a row of its own vocabulary
beyond the target's: draft rows past the target's vocabulary are never proposed.
"""

from __future__ import annotations

from typing import Sequence

import torch

from framework.core.prompts import prompt_lengths
from framework.core.proposer import DecodeState
from framework.core.rows import cat_rows
from framework.core.sampling import SamplingConfig
from framework.core.tree import CandidateTree
from framework.core.verification import Verification
from framework.lm.cached_lm import CachedLM
from framework.lm.models import tiny_random_model
from proposers.common.committed import ragged_then_block
from proposers.common.position_tree import position_law_tree, shape_of, within


def ragged_concat(first: tuple[torch.Tensor, torch.Tensor], second: tuple[torch.Tensor, torch.Tensor]):
    """(tokens [B, L1], count [B]) then (tokens [B, L2], count [B]) -> each row's valid tokens, left-aligned."""
    tokens = torch.cat([first[0], second[0].to(first[0].device)], dim=1)
    valid = torch.cat([torch.arange(t.shape[1], device=tokens.device)[None, :] < c.to(tokens.device)[:, None]
                       for t, c in (first, second)], dim=1)
    order = torch.argsort((~valid).to(torch.int8), dim=1, stable=True)
    count = valid.sum(1)
    return tokens.gather(1, order)[:, : int(count.max()) if count.numel() else 0], count


class ParallelDraftProposer:
    hidden_layers = ()  # reads no target hidden state
    couples_rows = False

    def __init__(self, draft, choices: Sequence[Sequence[int]] | None = None, kind: str = "iid",
                 sampling: SamplingConfig | None = None, depth: int = 4, mask_token: int | None = None):
        """depth: positions drafted per forward (the root's and depth - 1 masks'). choices: the tree as rank
        paths (None: a chain of `depth`). kind: iid / wor (drawn from each position's law) or point.
        mask_token: the draft's mask id (default: its config's pard_token)."""
        if kind not in ("point", "iid", "wor"):
            raise ValueError(f"kind must be point, iid or wor, got {kind!r}")
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        mask_token = getattr(draft.config, "pard_token", None) if mask_token is None else mask_token
        if mask_token is None:
            raise ValueError("PARD needs the draft's mask token: give mask_token= or a draft whose config has "
                             "pard_token (train one with `python -m experiments.train training=zoo_pard`)")
        self.shape, self.kind, self.sampling, self.mask_token = (
            shape_of(choices, depth), kind, sampling, int(mask_token))
        self.lm = CachedLM(draft, tree_backend=None)  # per-row masks: the dense path
        # tokens not yet read, per row
        self.lead = (torch.zeros(0, 0, dtype=torch.long), torch.zeros(0, dtype=torch.long))
        self.forwards = 0

    def prefill(self, input_ids: torch.Tensor, target) -> None:
        rows, V = self.lm.vocab_size, target.vocab_size
        if rows < V:
            raise ValueError(f"draft vocabulary ({rows}) is smaller than the target's ({V}): "
                             "a PARD draft predicts the target's tokens")
        if not 0 <= self.mask_token < rows:
            raise ValueError(f"mask token {self.mask_token} is not a row of the draft's vocabulary (0..{rows - 1})")
        self.lm.run_beside(target)
        self.vocab_size = V
        self.lm.reset(input_ids.shape[0])
        ids = input_ids.to(self.lm.device)
        self.lead = (ids.clamp_min(0), prompt_lengths(ids))  # right-padded: each row's own prompt first

    def room(self) -> int | None:
        """Positions the draft's context has left for the root and its masks (the fullest row's), or None."""
        if self.lm.max_positions is None:
            return None
        return self.lm.max_positions - int((self.lm.length + self.lead[1].to(self.lm.length.device)).max())

    @torch.no_grad()
    def propose(self, state: DecodeState) -> CandidateTree:
        limits = [d for d in (state.plan.depth, self.room()) if d is not None]
        shape = within(self.shape, max(0, min(limits)) if limits else None)  # no mask past the draft's context
        root = state.root.to(self.lm.device)[:, None]
        if shape.num_nodes == 0:  # a plain step: the root waits with the other unread tokens
            self.lead = ragged_concat(self.lead, (root, torch.ones_like(self.lead[1])))
            return CandidateTree.empty(state.root.shape[0], state.root.device)
        logits = self.block_logits(root, shape.max_depth)
        return position_law_tree(logits, shape, self.kind, self.sampling or state.sampling, state.rng, state.constraint)

    def block_logits(self, root: torch.Tensor, depth: int) -> torch.Tensor:
        """One forward of [unread tokens, root, masks]: logits [B, depth, V] of the root and the masks."""
        lead, count = self.lead
        B, L = lead.shape
        device = lead.device
        masks = torch.full((B, depth - 1), self.mask_token, dtype=torch.long, device=device)
        tokens = torch.cat([lead, root, masks], dim=1)  # [B, L + depth]
        block = torch.arange(depth, device=device)
        offsets = torch.cat([torch.arange(L, device=device).expand(B, L), count[:, None] + block], dim=1)  # [B, M]
        out = self.lm.forward(tokens, offsets, ragged_then_block(count, L, depth), logits_rows=L + block)
        kept = torch.where(torch.arange(L + 1, device=device)[None, :] < count[:, None],
                           torch.arange(L + 1, device=device), L)
        self.lm.keep(kept, count + 1)  # the unread tokens and the root; the masks' KV is dropped
        self.lead = (lead[:, :0], torch.zeros_like(count))
        self.forwards += 1
        return out.logits[..., : self.vocab_size]

    def commit(self, result: Verification) -> None:
        accepted = result.num_accepted.to(self.lm.device)
        width = int(accepted.max()) if accepted.numel() else 0
        self.lead = ragged_concat(self.lead, (result.tokens[:, :width].clamp_min(0).to(self.lm.device), accepted))

    def join(self, other: ParallelDraftProposer) -> None:
        self.lm.join(other.lm)
        self.lead = (cat_rows(self.lead[0], other.lead[0]), cat_rows(self.lead[1], other.lead[1]))

    def select(self, rows: torch.Tensor) -> None:
        self.lm.select(rows)
        rows = rows.to(self.lead[0].device)
        self.lead = (self.lead[0][rows], self.lead[1][rows])


def random_pard(vocab_size: int, hidden_size: int = 16, num_layers: int = 1, num_heads: int = 2, num_kv_heads: int = 1,
                max_positions: int | None = None, seed: int = 1, dtype: str = "float32", init_std: float = 0.3):
    """A random-weight PARD draft for a target of `vocab_size` tokens: one row more, its mask (pard_token)."""
    draft = tiny_random_model(arch="llama", vocab_size=vocab_size + 1, hidden_size=hidden_size, num_layers=num_layers,
                              num_heads=num_heads, num_kv_heads=num_kv_heads, max_positions=max_positions or 256,
                              seed=seed, dtype=dtype, init_std=init_std)
    draft.config.pard_token = vocab_size
    return draft
