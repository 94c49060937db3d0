"""DFlashProposer: a whole block of drafts from one DFlash forward per step (proposers/parallel/dflash.py).

Each step, one forward of the drafter reads (a) the positions the target committed since the last
draft (their hidden states at the drafter's layers become context keys and values, kept per row in
the drafter's cache) and (b) the block [root, mask, ..., mask], which attends to every kept context
row and to the whole block. Position j of the block gives the law of depth j; the tree is built
from those laws (proposers/common/position_tree.py): a chain sampled from each position's law with
that law handed to the verifier as q (kind iid), or a tree of top-ranked tokens per position (point).
Rows commit different numbers of positions, so the mask is per row (holes of short rows hidden).
"""

from __future__ import annotations

from typing import Sequence

import torch

from framework.core.proposer import DecodeState
from framework.core.rows import join_runs
from framework.core.sampling import SamplingConfig
from framework.core.tree import CandidateTree
from framework.core.verification import Verification
from framework.lm.sharding import ReturnsTo
from framework.lm.slot_cache import SlotCache
from proposers.common.committed import left_aligned
from proposers.common.loaded import refuse_path
from proposers.common.position_tree import position_law_tree, shape_of, within
from proposers.parallel.dflash import DFlashDrafter


class DFlashProposer:
    couples_rows = False  # every row's block and tree come from its own forward rows; the shape is fixed

    def __init__(self, drafter: DFlashDrafter, choices: Sequence[Sequence[int]] | None = None,
                 kind: str = "iid", sampling: SamplingConfig | None = None, depth: int | None = None):
        """choices: the tree as rank paths, depth d taking block position d's ranked tokens (None: a chain
        of `depth`, default every drafted position). kind: iid (a chain or tree drawn from each position's
        law, q to the verifier), wor, or point (top-ranked tokens). sampling: the law drafts are drawn from
        (default: the target's)."""
        refuse_path(drafter, "DFlashProposer", "drafter", "models.dflash.drafter.path")
        if not isinstance(drafter, DFlashDrafter):
            raise ValueError(f"DFlash needs a DFlash drafter, got {type(drafter).__name__}")
        if kind not in ("point", "iid", "wor"):
            raise ValueError(f"kind must be point, iid or wor, got {kind!r}")
        if depth is not None and not 1 <= depth <= drafter.drafts:
            raise ValueError(f"depth must lie in 1..{drafter.drafts} "
                             f"(the drafter's block of {drafter.config.block_size}), got {depth}")
        self.drafter, self.kind, self.sampling = drafter.eval(), kind, sampling
        self.shape = shape_of(choices, depth or drafter.drafts)
        self.hidden_layers = drafter.config.hidden_layers
        self.cache = SlotCache()
        self.backlog: list[tuple] = []  # committed positions of plain steps, not yet read
        self.forwards = 0  # drafter forwards run (one per drafting step)

    def prefill(self, input_ids: torch.Tensor, target) -> None:
        model = target.model
        self.drafter.check_target(model)
        self.drafter.to(device=target.device, dtype=target.dtype)
        self.embed = model.get_input_embeddings()
        self.lm_head = ReturnsTo(model.get_output_embeddings(), target.device)  # may sit on another device (device_map)
        self.cache.reset(input_ids.shape[0], target.device)
        self.backlog = []

    @torch.no_grad()
    def propose(self, state: DecodeState) -> CandidateTree:
        if state.committed_hidden is None:
            raise ValueError("DFlash needs the target's hidden states of the committed positions: "
                             "the target did not return them")
        committed = (state.committed_hidden, state.root[:, None].expand(-1, state.committed_hidden.shape[1]),
                     state.committed_count.to(self.cache.length.device))
        shape = within(self.shape, state.plan.depth)
        if shape.num_nodes == 0:  # a plain step: the committed positions wait for the next step that drafts
            self.backlog.append(committed)
            return CandidateTree.empty(state.root.shape[0], state.root.device)
        hidden, _, count = left_aligned(self.backlog + [committed])
        self.backlog = []
        logits = self.block_logits(hidden, count, state.root, shape.max_depth)
        return position_law_tree(logits, shape, self.kind, self.sampling or state.sampling, state.rng, state.constraint)

    def block_logits(self, hidden: torch.Tensor, count: torch.Tensor, root: torch.Tensor, drafts: int) -> torch.Tensor:
        """hidden [B, A, L, H] of the newly committed positions (count [B] valid), root [B] -> logits [B, drafts, V]."""
        B, A = hidden.shape[:2]
        M = drafts + 1
        c = self.drafter.config
        block = torch.cat([root[:, None], torch.full((B, drafts), c.mask_token_id, device=root.device)], dim=1)
        device = self.cache.length.device
        slots = torch.arange(A, device=device)
        positions = torch.cat([self.cache.positions(slots),
                               (self.cache.length + count)[:, None] + torch.arange(M, device=device)], dim=1)
        new_context = slots[None, :] < count[:, None]  # [B, A]: holes of rows that committed fewer
        sees = torch.cat([self.cache.valid, new_context, torch.ones(B, M, dtype=torch.bool, device=device)],
                         dim=1)  # [B, S]
        out = self.drafter(self.embed(block.to(device)), self.drafter.context(hidden),
                           positions, sees[:, None, None, :].expand(B, 1, M, -1), self.cache.cache)
        self.cache.keep(slots.expand(B, A), count)  # the context rows stay; the block's are dropped
        self.forwards += 1
        return self.lm_head(out[:, 1:])  # [B, drafts, V]

    def commit(self, result: Verification) -> None:
        pass  # the accepted positions come back, with the target's features, as the next step's committed ones

    def join(self, other: DFlashProposer) -> None:
        rows = (self.cache.batch_size, other.cache.batch_size)
        self.cache.join(other.cache)
        self.backlog = join_runs(self.backlog, other.backlog, left_aligned, rows)

    def select(self, rows: torch.Tensor) -> None:
        self.cache.select(rows)
        self.backlog = [tuple(t[rows.to(t.device)] for t in part) for part in self.backlog]
