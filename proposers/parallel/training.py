"""Training parallel drafters (DFlash, PARD, P-EAGLE) through the shared loop (framework/training/loop.py).

All three learn the law of several future tokens at once from positions that read a mask, so they
train alike: per sequence, `anchors` positions a are drawn (for the whole global batch, from the
loop's generator, so N processes draw what one does), and after each anchor the drafter's block is
packed into the same forward as the sequence, its attention cut so the block sees exactly what it
sees when drafting there (the context up to a, its own block). Depth j of anchor a is scored against
the frozen target's law at the position that predicts the same token, with any distillation loss
(framework/training/losses.py), where that token is a training label; depth j weighs decay**j.

| drafter | sequence rows (queries) | block after anchor a | depth j's output predicts |
|---|---|---|---|
| DFlash | none: context keys only (fc of target features) | [x_a, mask...] at a..a+K, sees context < a, whole block | x[a+j], j >= 1 |
| PARD | every position t (predicts x[t+1]: depth 1) | masks at a+1..a+K-1, see tokens <= a, causal | x[a+1+j] |
| P-EAGLE | every position t (reads x[t+1], g_t; predicts x[t+2]) | masks (pard_token, fc(mask_hidden)) at a+1.., see <= a, causal | x[a+2+j] |
"""  # noqa: E501

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import torch
from torch import nn

from framework.training.loop import LoopConfig
from framework.training.losses import KL, acceptance
from proposers.eagle.head import EagleHead
from proposers.eagle.training import target_features
from proposers.parallel.dflash import DFlashDrafter


@dataclass
class ParallelTrainConfig(LoopConfig):
    losses: dict = field(default_factory=lambda: {"kl": KL()})  # name -> loss: one drafter each, side by side
    depth: int = 4  # positions drafted per forward (DFlash: its block_size - 1)
    anchors: int = 32  # blocks per sequence
    decay: float = 0.9  # weight of depth j: decay**j

    def __post_init__(self) -> None:
        super().__post_init__()
        self.losses = dict(self.losses)
        if not self.losses:
            raise ValueError("losses is empty: name at least one (e.g. loss=kl)")
        if self.depth < 1 or self.anchors < 1:
            raise ValueError(f"need depth >= 1 and anchors >= 1, got {self.depth}, {self.anchors}")


def draw_anchors(generator: torch.Generator, batch_size: int, count: int, low: int, high: int,
                 rows: torch.Tensor) -> torch.Tensor:
    """`count` distinct anchors in [low, high] per sequence of the global batch, sorted; this process's rows [b, n]."""
    if high < low:
        raise ValueError(f"sequences too short for the block: anchors would lie in [{low}, {high}] (raise block_size)")
    scores = torch.rand(batch_size, high - low + 1, generator=generator)
    return (scores.topk(min(count, high - low + 1), dim=1).indices.sort(dim=1).values + low)[rows.cpu()]


def every_anchor(batch: int, low: int, high: int) -> torch.Tensor:
    """Every position in [low, high] as an anchor, for each of `batch` sequences [batch, n] (measuring)."""
    return torch.arange(low, high + 1).expand(batch, -1)


def block_attention(T: int, anchors: torch.Tensor, width: int, sees_anchor: bool, causal: bool) -> torch.Tensor:
    """anchors [b, n] -> [b, n width, T + n width] bool: block row (i, o) sees sequence keys < a_i (<= a_i if
    sees_anchor) and the rows of its own block (o' <= o if causal, all otherwise)."""
    b, n = anchors.shape
    block = torch.arange(n * width, device=anchors.device) // width
    offset = torch.arange(n * width, device=anchors.device) % width
    end = anchors[:, block] + int(sees_anchor)  # [b, Q]
    context = torch.arange(T, device=anchors.device)[None, None, :] < end[:, :, None]
    own = block[:, None] == block[None, :]
    if causal:
        own = own & (offset[None, :] <= offset[:, None])
    return torch.cat([context, own[None].expand(b, -1, -1)], dim=2)


def with_sequence(T: int, block_mask: torch.Tensor) -> torch.Tensor:
    """Causal rows for the sequence itself above the block rows -> [b, 1, T+Q, T+Q]."""
    b, Q = block_mask.shape[:2]
    top = torch.ones(T, T + Q, dtype=torch.bool, device=block_mask.device).tril()
    return torch.cat([top[None].expand(b, -1, -1), block_mask], dim=1)[:, None]


def gather_rows(t: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """t [b, T, ...], index [b, Q] -> [b, Q, ...]."""
    return t.gather(1, index.view(*index.shape, *[1] * (t.dim() - 2)).expand(-1, -1, *t.shape[2:]))


class ParallelObjective(nn.Module):
    """One drafter per loss; subclasses say how depth j's predictions and the target's laws line up (`pairs`)."""

    def __init__(self, target, drafters: dict[str, nn.Module], cfg: ParallelTrainConfig):
        super().__init__()
        self.target = target.eval().requires_grad_(False)
        self.drafters, self.cfg = nn.ModuleDict(drafters), cfg
        self.part_names = [f"{name}/depth{j + 1}" for name in drafters for j in range(cfg.depth)]
        self.register_buffer("part_weights", torch.tensor([cfg.decay**j for _ in drafters for j in range(cfg.depth)]),
                             persistent=False)

    def trained(self) -> nn.Module:
        return self.drafters

    def anchor_range(self, T: int) -> tuple[int, int]:
        raise NotImplementedError

    def forward(self, ids, mask, rows, generator):
        low, high = self.anchor_range(ids.shape[1])
        anchors = draw_anchors(generator, self.cfg.batch_size, self.cfg.anchors, low, high, rows).to(ids.device)
        teacher = self.teacher(ids)
        sums, counts = [], []
        for name, drafter in self.drafters.items():
            for q, p, labels in self.pairs(drafter, ids, mask, anchors, teacher):
                sums.append(self.cfg.losses[name](q, p, labels).sum())
                counts.append(torch.tensor(labels.numel(), device=ids.device))
        return torch.stack(sums), torch.stack(counts)

    @torch.no_grad()
    def measure(self, drafter: nn.Module, windows: torch.Tensor, mask: torch.Tensor | None = None, batch: int = 4,
                ranks: int = 8) -> dict:
        """Per depth, at every anchor of held-out windows: `accept[d][r]`, how often the rank-r token is the
        target's greedy token (what the tree search reads), `top1_target` (rank 0) and the mean of
        sum min(p, q) (`accept_sampled`, a sampled draft token's chance at T = 1)."""
        mask = torch.ones_like(windows, dtype=torch.bool) if mask is None else mask
        device = next(self.target.parameters()).device
        hits = torch.zeros(self.cfg.depth, ranks, dtype=torch.float64)
        sampled, count = hits[:, 0].clone(), hits[:, 0].clone()
        for first in range(0, len(windows), batch):
            ids, kept = windows[first : first + batch].to(device), mask[first : first + batch].to(device)
            anchors = every_anchor(ids.shape[0], *self.anchor_range(ids.shape[1])).to(device)
            for j, (q, p, _) in enumerate(self.pairs(drafter, ids, kept, anchors, self.teacher(ids))):
                hits[j] += (q.topk(ranks, dim=-1).indices == p.argmax(-1, keepdim=True)).double().sum(0).cpu()
                sampled[j] += float(acceptance(q, p).double().sum())
                count[j] += q.shape[0]
        count = count.clamp_min(1)
        accept = hits / count[:, None]
        return {"accept": accept.tolist(), "top1_target": accept[:, 0].tolist(),
                "accept_sampled": (sampled / count).tolist(), "positions": count.tolist()}


class DFlashObjective(ParallelObjective):
    """DFlash: context keys from the target's features; block [x_a, mask...] sees context < a and the whole block."""

    def anchor_range(self, T):
        return 1, T - self.cfg.depth - 1  # the block's last position a + depth stays inside the window

    @torch.no_grad()
    def teacher(self, ids):
        first = next(iter(self.drafters.values()))
        features, _, logits = target_features(self.target, ids, first.config.hidden_layers)
        return features, logits.log_softmax(-1)

    def pairs(self, drafter: DFlashDrafter, ids, mask, anchors, teacher):
        features, target_logp = teacher
        (b, T), width = ids.shape, self.cfg.depth + 1
        offset = torch.arange(width, device=ids.device).repeat(anchors.shape[1])  # [Q]
        at = anchors.repeat_interleave(width, dim=1) + offset  # [b, Q] each block row's position
        tokens = torch.where(offset == 0, ids.gather(1, at), drafter.config.mask_token_id)
        embedded = self.target.get_input_embeddings()(tokens).to(drafter.fc.weight.dtype)
        positions = torch.cat([torch.arange(T, device=ids.device).expand(b, T), at], dim=1)
        attention = block_attention(T, anchors, width, sees_anchor=False, causal=False)[:, None]
        out = drafter(embedded, drafter.context(features), positions, attention)  # [b, Q, H]
        logp = self.target.get_output_embeddings()(out).float().log_softmax(-1)
        return depth_pairs(logp, target_logp, ids, mask, at, offset, first=1, shift=-1, label_shift=0)


class PardObjective(ParallelObjective):
    """PARD: the draft reads the sequence (depth 1 at every position) and masks after each anchor (depths >= 2)."""

    def __init__(self, target, drafters, cfg):
        super().__init__(target, drafters, cfg)
        tokens = {getattr(d.config, "pard_token", None) for d in drafters.values()}
        if len(tokens) != 1 or None in tokens:
            raise ValueError("a PARD draft names its mask token in its config (pard_token): "
                             "see recipes/parallel.py")
        self.mask_token = tokens.pop()

    def anchor_range(self, T):
        return 0, T - self.cfg.depth - 1

    @torch.no_grad()
    def teacher(self, ids):
        return self.target(input_ids=ids).logits.float().log_softmax(-1)

    def pairs(self, draft, ids, mask, anchors, target_logp):
        (b, T), width, V = ids.shape, self.cfg.depth - 1, target_logp.shape[-1]
        offset = torch.arange(1, width + 1, device=ids.device).repeat(anchors.shape[1])  # mask j at a + j
        at = anchors.repeat_interleave(width, dim=1) + offset
        tokens = torch.cat([ids, torch.full_like(at, self.mask_token)], dim=1)
        positions = torch.cat([torch.arange(T, device=ids.device).expand(b, T), at], dim=1)
        attention = with_sequence(T, block_attention(T, anchors, width, sees_anchor=True, causal=True))
        logp = draft(input_ids=tokens, position_ids=positions,
                     attention_mask=attention).logits[..., :V].float().log_softmax(-1)
        sequence = torch.arange(T - 1, device=ids.device).expand(b, -1)
        out = depth_pairs(logp[:, : T - 1], target_logp, ids, mask, sequence, torch.zeros(T - 1, dtype=torch.long),
                          first=0, shift=0)
        if width:
            out += depth_pairs(logp[:, T:], target_logp, ids, mask, at, offset, first=1, shift=0)
        return out


class PEagleObjective(ParallelObjective):
    """P-EAGLE: the EAGLE-3 head's step 0 at every position (depth 1) and masks after each anchor (depths >= 2)."""

    def anchor_range(self, T):
        return 0, T - self.cfg.depth - 2

    @torch.no_grad()
    def teacher(self, ids):
        first = next(iter(self.drafters.values()))
        features, _, logits = target_features(self.target, ids,
                                              first.config.layers_for(self.target.config.num_hidden_layers))
        return features, logits

    def pairs(self, head: EagleHead, ids, mask, anchors, teacher):
        features, logits = teacher
        b, width, n = ids.shape[0], self.cfg.depth - 1, ids.shape[1] - 1
        draft = head.draft_ids()
        target_logp = (logits if draft is None else logits[..., draft]).log_softmax(-1)  # the head's own vocabulary
        offset = torch.arange(1, width + 1, device=ids.device).repeat(anchors.shape[1])
        at = anchors.repeat_interleave(width, dim=1) + offset
        embed = head.embedding(self.target.get_input_embeddings())
        pard = torch.full_like(at, head.config.pard_token)
        embedded = embed(torch.cat([ids[:, 1:], pard], dim=1))
        g = head.fused(features[:, :n].to(head.fc.weight.dtype))
        g = torch.cat([g, head.mask_feature().to(g.dtype).expand(b, at.shape[1], -1)], dim=1)
        positions = torch.cat([torch.arange(n, device=ids.device).expand(b, n), at], dim=1)
        attention = with_sequence(n, block_attention(n, anchors, width, sees_anchor=True, causal=True))
        logp = head.draft_logits(head(embedded, g, positions, None, attention_mask=attention)).float().log_softmax(-1)
        sequence = torch.arange(n - 1, device=ids.device).expand(b, -1)
        out = depth_pairs(logp[:, : n - 1], target_logp, ids, mask, sequence, torch.zeros(n - 1, dtype=torch.long),
                          first=0, shift=1, label_shift=2, target_ids=draft)
        if width:
            out += depth_pairs(logp[:, n:], target_logp, ids, mask, at, offset, first=1, shift=1, label_shift=2,
                               target_ids=draft)
        return out


def depth_pairs(logp, target_logp, ids, mask, at, offset, first: int, shift: int, label_shift: int = 1,
                target_ids: torch.Tensor | None = None) -> list[tuple]:
    """Rows at positions `at` [b, Q] with block offsets `offset` [Q] -> per depth (offset first, first+1, ...):
    (draft log-probs [N, V], the target's at position at + shift [N, V], label ids at at + label_shift [N]),
    kept where the label is a training label. Labels are target ids (mapped into a draft vocabulary if given)."""
    out = []
    for o in range(first, int(offset.max()) + 1 if offset.numel() else first):
        cols = (offset == o).nonzero().flatten()
        where = at[:, cols]  # [b, n]
        kept = mask.gather(1, where + label_shift)
        q = logp[:, cols][kept]
        p = gather_rows(target_logp, where + shift)[kept]
        labels = ids.gather(1, where + label_shift)[kept]
        # a label outside the draft vocabulary scores as its nearest id: only CE reads labels
        if target_ids is not None:
            labels = torch.searchsorted(target_ids, labels).clamp_max(target_ids.numel() - 1)
        out.append((q, p, labels))
    return out


def copies(model: nn.Module, names) -> dict[str, nn.Module]:
    """One float copy of `model` per loss name (the same initial weights)."""
    return {name: copy.deepcopy(model).float().train() for name in names}
