"""EAGLE: a feature-level draft head drafts a static (EAGLE-1) or dynamic (EAGLE-2) tree.

The head (proposers/eagle/head.py) keeps its own KV cache, holding only positions whose feature
came from the target. Each step:
1. catch up: the positions the target committed at its last forward (the prompt after the
   prefill; then the previous root and the accepted nodes), each with its token and the target's
   hidden states there (handed over by the engine), in one head forward; these are kept;
2. draft: the root's output gives the depth-1 law; tree nodes are read level by level, each with
   its token and its parent's output feature (proposers/eagle/tree.py), as pending slots;
3. commit drops every drafted slot: the accepted ones come back at the next catch-up with the
   target's true features.
Per step the head runs `depth` forwards (the catch-up reads the root; the deepest level is never
read). Tokens go through the target's embedding (an EAGLE-3 head of another width: its own);
logits through the target's lm_head (EAGLE-1) or the head's own over its draft vocabulary
(EAGLE-3: -inf elsewhere, so such tokens are never proposed). Children are chosen by the draft's
values only, so the tree is `point`: lossless through the shared verifier.
"""

from __future__ import annotations

import warnings
from typing import Sequence

import torch

from framework.core.proposer import DecodeState
from framework.core.rows import cat_rows, join_runs
from framework.core.tree import CandidateTree
from framework.core.tree_shape import TreeShape
from framework.core.verification import Verification
from framework.lm import tree_attention
from framework.lm.sharding import ReturnsTo
from framework.lm.slot_cache import SlotCache
from proposers.common.committed import left_aligned
from proposers.common.loaded import refuse_path
from proposers.eagle.defaults import PUBLISHED, SOURCE
from proposers.eagle.head import EagleHead
from proposers.eagle.tree import dynamic_tree, static_tree


class EagleProposer:
    HEAD: type = EagleHead  # the heads it drives (MtpProposer: an MtpHead)
    # where a path was given instead: the argument, the config key that loads one, the loader
    HEAD_ARGUMENT, HEAD_KEY, HEAD_LOADER = "head", "models.eagle3.head.path", "proposers.load_head"

    def __init__(
        self,
        head: EagleHead,
        choices: Sequence[Sequence[int]] | str | None = None,
        top_k: int | str = 8,
        depth: int | str = 5,
        budget: int | str = 32,
        backend: str = "auto",
    ):
        """choices: a static tree of rank paths (EAGLE-1); None grows a dynamic tree (EAGLE-2) of
        top_k children per beam node, `depth` deep, `budget` nodes at most. Any of them may be
        "auto": the setting the training run measured best for this head (eagle_tree.json beside it), else
        SafeAILab's published default (proposers/eagle/defaults.py), with a warning that says so.
        head: a loaded head (proposers.load_head reads ours, SafeAILab's, SpecForge's and speculators' folders;
        a config builds it: models.eagle3.head.path=<folder>)."""
        refuse_path(head, type(self).__name__, self.HEAD_ARGUMENT, self.HEAD_KEY, self.HEAD_LOADER)
        if not isinstance(head, self.HEAD):
            raise ValueError(f"{type(self).__name__} needs an {self.HEAD.__name__}, got {type(head).__name__}")
        settings = {"choices": choices, "top_k": top_k, "depth": depth, "budget": budget}
        auto = [k for k, v in settings.items() if v == "auto"]
        settings.update({k: head.searched.get(k, PUBLISHED[k]) for k in auto})
        relevant = {"choices"} if settings["choices"] is not None else {"top_k", "depth", "budget"}  # static / dynamic
        # not measured here
        self.published = {k: PUBLISHED[k] for k in auto if k not in head.searched and k in relevant}
        if self.published:
            warnings.warn(f"no {', '.join(self.published)} measured for this head (no eagle_tree.json beside it): "
                          f"{SOURCE}. A tree measured for this head on this target decodes faster: "
                          "python -m experiments.search_tree target.path=T head=H writes one beside it; "
                          "proposer.choices / top_k / depth / budget override", stacklevel=2)
        choices, top_k, depth, budget = settings.values()
        if choices is not None and not len(choices):
            raise ValueError("EAGLE's static tree needs at least one node: choices is empty")
        if top_k < 1 or depth < 1 or int(budget) < 1:
            raise ValueError(f"need top_k, depth and budget >= 1, got {top_k}, {depth}, {budget}")
        self.shape = TreeShape.from_choices(choices) if choices is not None else None
        self.top_k, self.depth, self.budget = top_k, depth, int(budget)
        tree_attention.resolve_backend(backend, torch.device("cpu"))  # a bad name fails here, not mid-forward
        self.head, self.backend = head.eval(), backend
        # what it reads from the target; a head stating no layers (published EAGLE-3 without ids)
        # takes the default for the target's depth at prefill, which the engine runs before asking
        self.hidden_layers = head.config.target_layers or ()
        self.couples_rows = self.shape is None  # a dynamic tree's shape is shared by the rows
        self.cache = SlotCache()
        # [B, P] tokens of the positions to catch up, before the root
        self.pending = torch.zeros(0, 0, dtype=torch.long)
        self.backlog: list[tuple] = []  # the committed positions of plain steps, not yet read by the head

    def prefill(self, input_ids: torch.Tensor, target) -> None:
        model = target.model
        self.head.check_target(model)
        self.hidden_layers = self.head.config.layers_for(model.config.num_hidden_layers)
        self.head.to(device=target.device, dtype=target.dtype)
        self.embed = self.head.embedding(model.get_input_embeddings())
        self.lm_head = ReturnsTo(model.get_output_embeddings(), target.device)  # may sit on another device (device_map)
        self.cache.reset(input_ids.shape[0], target.device)
        self.backlog = []
        # x[t+1] for prompt positions t < L_b-1, then the root (past it: don't-care)
        self.pending = input_ids[:, 1:].clamp_min(0).to(target.device)

    @torch.no_grad()
    def propose(self, state: DecodeState) -> CandidateTree:
        if state.committed_hidden is None:
            raise ValueError("EAGLE needs the target's hidden states of the committed positions: "
                             "the target did not return them")
        if not state.plan.drafts:  # a plain step: the committed positions wait for the next step that drafts
            self.backlog.append(self.committed(state))
            return CandidateTree.empty(state.root.shape[0], state.root.device)
        root_feature = self.catch_up(state)  # [B, H]
        reader = HeadReader(self, root_feature)
        root_logits = self.head.logits(root_feature, self.lm_head)  # [B, V]
        depth = self.depth if state.plan.depth is None else min(self.depth, state.plan.depth)
        if self.shape is not None:
            # whole levels: the shape is level-ordered
            shape = self.shape.prefix(int((self.shape.depth <= depth).sum()))
            tokens, parents, scores = static_tree(reader.read, root_logits, shape)
        else:
            tokens, parents, scores = dynamic_tree(reader.read, root_logits, self.top_k, depth, self.budget)
        return CandidateTree(tokens, parents, None, "point", scores)

    def committed(self, state: DecodeState) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The positions the target committed at its last forward: hidden [B, A, L, H], each one's next token
        [B, A] (the accepted tokens, then the root) and how many each row has [B] (left-aligned)."""
        hidden, count = state.committed_hidden, state.committed_count.to(self.cache.length.device)  # [B, A, L, H], [B]
        A = hidden.shape[1]
        spare = torch.zeros(self.pending.shape[0], 1, dtype=torch.long, device=self.pending.device)
        tokens = torch.cat([self.pending[:, : A - 1], spare], dim=1)  # [B, A]
        return hidden, tokens.scatter(1, (count - 1)[:, None], state.root[:, None].to(tokens.device)), count

    def catch_up(self, state: DecodeState) -> torch.Tensor:
        """Feed the newly committed positions (ragged per row, right-padded), with those of plain steps
        before; keep them; return the head's output at each row's last one, the root's position [B, H]."""
        hidden, tokens, count = left_aligned(self.backlog + [self.committed(state)])
        self.backlog = []
        B, A = hidden.shape[:2]
        depth = torch.arange(A)
        out = self.head(self.embed(tokens), self.head.fused(hidden.to(self.lm_head.weight.dtype)),
                        self.cache.positions(depth), self.cache.cache,
                        **self.attention(torch.ones(A, A, dtype=torch.bool).tril()))
        self.cache.keep(depth.to(count.device).expand(B, A), count)
        return out[torch.arange(B, device=out.device), count - 1]

    def attention(self, pending_mask: torch.Tensor) -> dict:
        return {"speculum_mask": self.cache.tree_mask(pending_mask), "speculum_backend": self.backend}

    def commit(self, result: Verification) -> None:
        self.cache.drop_pending()  # drafted slots had predicted features; the accepted come back with true ones
        # accepted, then don't-care
        self.pending = result.tokens[:, : result.path.shape[1]].clamp_min(0).to(self.pending.device)

    def join(self, other: EagleProposer) -> None:
        rows = (self.cache.batch_size, other.cache.batch_size)
        self.cache.join(other.cache)
        self.backlog = join_runs(self.backlog, other.backlog, left_aligned, rows)
        self.pending = cat_rows(self.pending, other.pending)  # tokens past a row's count are don't-care

    def select(self, rows: torch.Tensor) -> None:
        self.cache.select(rows)
        self.pending = self.pending[rows.to(self.pending.device)]
        self.backlog = [tuple(t[rows.to(t.device)] for t in part) for part in self.backlog]


class HeadReader:
    """Reads tree nodes through the head as pending slots: each node's input is its token and its
    parent's output feature; it sees the committed positions, its read ancestors and itself."""

    def __init__(self, proposer: EagleProposer, root_feature: torch.Tensor):
        self.p = proposer
        self.features = {-1: root_feature}  # per read node: its output feature [B, H]
        self.sees = {-1: torch.zeros(0, dtype=torch.bool)}  # per read node: the pending slots it sees
        self.slots = 0

    def read(self, nodes: list[int], parents: list[int], tokens: torch.Tensor, depth: list[int]) -> torch.Tensor:
        M, P = len(nodes), self.slots
        mask = torch.zeros(M, P + M, dtype=torch.bool)
        for m, parent in enumerate(parents):
            seen = self.sees[parent]
            mask[m, : seen.numel()] = seen
            mask[m, P + m] = True
        feature = torch.stack([self.features[p] for p in parents], dim=1)  # [B, M, H]
        positions = self.p.cache.positions(torch.tensor(depth) - 1)  # the root sits at committed length - 1
        level = max(depth)  # one level per read
        out = self.p.head(self.p.embed(tokens), feature, positions, self.p.cache.cache, step=level,
                          **self.p.attention(mask))
        for m, node in enumerate(nodes):
            self.features[node], self.sees[node] = out[:, m], mask[m]
        self.slots += M
        return self.p.head.logits(out, self.p.lm_head, step=level)  # [B, M, V]
