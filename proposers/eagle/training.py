"""Training an EAGLE head against a frozen target, and measuring its acceptance per depth.

Indexing (proposers/eagle/head.py): head position t reads token x[t+1] and g_t, outputs o_t, which
predicts token x[t+2], whose target law is softmax(z[t+1]) (z: the target's logits).

Unrolled training ("training-time test", EAGLE-3): step 0 reads the target's fused features;
step j >= 1 reads, at position t, token x[t+1+j] and the head's own step-(j-1) output there, and
predicts x[t+2+j]. Its attention sees what it would see when drafting a chain from t: the
step-0 keys of positions <= t (features from the target) and its own chain (steps 1..j at t).
EAGLE-1 is the one-step case with a feature regression: smooth-L1(o_t, target's last hidden
state at t+1) plus a weighted token loss, with uniform noise on the input features. EAGLE-3 uses
the token loss only, unrolled. Token loss: any distillation loss (framework/training/losses.py:
KL as published, TV, LK) between the target's law and the head's over the head's draft vocabulary
(EAGLE-3: the target's law restricted to it and renormalised, as SpecForge trains), at positions
whose drafted token is a training label (the assistant's, in a conversation). Step j weighs decay**j.
Several losses train one head each, side by side on the same batches and target pass. The loop
(framework/training/loop.py) is shared: data-parallel, resumable from <out>/checkpoint.pt.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F
from transformers import DynamicCache

from framework.data.token_data import TokenData
from framework.training.loop import LoopConfig, resolve_device, train
from framework.training.losses import KL, CrossEntropy, acceptance
from proposers.eagle.head import EagleHead


@dataclass
class EagleTrainConfig(LoopConfig):
    unroll: int = 1  # training-time test steps (1 = teacher features only, EAGLE-1)
    decay: float = 0.8  # weight of unrolled step j
    feature_weight: float = 1.0  # smooth-L1 to the target's next feature (EAGLE-1); 0 = token loss only (EAGLE-3)
    token_weight: float = 0.1
    noise: float = 0.2  # uniform noise U(-noise/2, noise/2) on the step-0 input features
    losses: dict = field(default_factory=lambda: {"kl": KL()})  # name -> token loss: one head each, side by side
    eval_depth: int = 6
    ranks: int = 10

    def __post_init__(self) -> None:
        super().__post_init__()
        self.losses = dict(self.losses)
        if not self.losses:
            raise ValueError("losses is empty: name at least one (e.g. loss=kl)")
        for name, loss in self.losses.items():
            if isinstance(loss, CrossEntropy):
                raise ValueError(f"loss {name!r}: cross-entropy trains on the text's tokens; an EAGLE head trains on "
                                 "the target's law (kl, tv, lk, hybrid)")


@torch.no_grad()
def target_features(
    target, blocks: torch.Tensor, layers: tuple[int, ...]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """blocks [B, T] -> (hidden states at `layers` [B, T, L, H], last post-norm hidden [B, T, H], logits [B, T, V])."""
    out = target(input_ids=blocks, output_hidden_states=True)
    states = out.hidden_states
    return torch.stack([states[i] for i in layers], dim=2).float(), states[-1].float(), out.logits.float()


def unroll_mask(n: int, step: int, device=None) -> torch.Tensor:
    """[n, (step+1) n] bool: position t sees step-0 keys <= t and its own keys of steps 1..step."""
    causal = torch.ones(n, n, dtype=torch.bool, device=device).tril()
    own = torch.eye(n, dtype=torch.bool, device=device)
    return torch.cat([causal] + [own] * step, dim=1)


def draft_vocabulary(tokens: torch.Tensor, size: int, vocab_size: int) -> tuple[torch.Tensor, float]:
    """EAGLE-3's draft vocabulary: the `size` most frequent target tokens of the training stream,
    in increasing order (what d2t/t2d encode), and the share of the stream's tokens they cover."""
    counts = torch.bincount(tokens.flatten().long(), minlength=vocab_size)[:vocab_size]
    top = counts.topk(size).indices
    return top.sort().values, float(counts[top].sum() / counts.sum())


def head_layers(head: EagleHead, target) -> tuple[int, ...]:
    return head.config.layers_for(target.config.num_hidden_layers)


def unroll(head: EagleHead, embed, features: torch.Tensor, blocks: torch.Tensor, steps: int,
           noise: torch.Tensor | None = None) -> list[torch.Tensor]:
    """features [B, T, L, H] at the head's layers, blocks [B, T] -> outputs o^j [B, T-1, H], j < steps;
    noise [B, T-1, H] is added to the step-0 features. Rows of step j past position T-2-j read padding
    and must not be scored."""
    B, T = blocks.shape
    n = T - 1
    g = head.fused(features[:, :n])  # [B, n, H]
    if noise is not None:
        g = g + noise
    cache, outs = DynamicCache(), []
    positions = torch.arange(n, device=blocks.device).expand(B, n)
    for j in range(steps):
        tokens = F.pad(blocks[:, 1 + j :], (0, j))  # [B, n]: x[t+1+j]
        mask = unroll_mask(n, j, blocks.device)[None, None]
        g = head(embed(tokens), g, positions + j, cache, step=j, attention_mask=mask)
        outs.append(g)
    return outs


class EagleObjective(nn.Module):
    """One EAGLE head per token loss, side by side on the same batches and target pass (framework/training/loop.py).

    Parts, per head and unrolled step j: the token loss at positions whose predicted token x[t+2+j] is a
    training label, then (EAGLE-1) the feature regression at the same positions."""

    def __init__(self, target, heads: dict[str, EagleHead], cfg: EagleTrainConfig):
        super().__init__()
        self.target = target.eval().requires_grad_(False)  # frozen: DDP syncs no gradient for it
        self.heads, self.cfg = nn.ModuleDict(heads), cfg
        kinds = ["token"] + (["feature"] if cfg.feature_weight else [])
        self.part_names = [f"{name}/{kind}{j}" for name in heads for j in range(cfg.unroll) for kind in kinds]
        weights = [cfg.decay**j * (cfg.token_weight if kind == "token" else cfg.feature_weight)
                   for _ in heads for j in range(cfg.unroll) for kind in kinds]
        self.register_buffer("part_weights", torch.tensor(weights), persistent=False)

    def trained(self) -> nn.Module:
        return self.heads

    def forward(self, ids, mask, rows, generator):
        sums, counts = [], []
        first = next(iter(self.heads.values()))
        features, last_hidden, logits = target_features(self.target, ids, head_layers(first, self.target))
        noise = None
        if self.cfg.noise > 0:  # drawn for the whole batch: every process keeps its own rows of the same draw
            shape = (self.cfg.batch_size, ids.shape[1] - 1, first.config.hidden_size)
            noise = self.cfg.noise * (torch.rand(shape, generator=generator)[rows].to(ids.device) - 0.5)
        for name, head in self.heads.items():
            loss = self.cfg.losses[name]
            embed, lm_head = head.embedding(self.target.get_input_embeddings()), self.target.get_output_embeddings()
            n = ids.shape[1] - 1
            for j, out in enumerate(unroll(head, embed, features, ids, self.cfg.unroll, noise)):
                kept = mask[:, 2 + j :].flatten()  # [b (n - 1 - j)]: positions t whose x[t+2+j] is a label
                pred = head.draft_logits(out[:, : n - 1 - j], lm_head, step=j).float().log_softmax(-1)  # [b, n-1-j, Vd]
                teacher = logits[:, 1 + j : n]  # z[t+1+j]: the target's law for x[t+2+j]
                draft = head.draft_ids()
                teacher = (teacher if draft is None else teacher[..., draft]).log_softmax(-1)
                per = loss(pred.flatten(0, 1)[kept], teacher.flatten(0, 1)[kept], ids[:, 2 + j :].flatten()[kept])
                sums.append(per.sum())
                counts.append(kept.sum())
                if self.cfg.feature_weight:
                    gap = F.smooth_l1_loss(out[:, : n - 1 - j].float(), last_hidden[:, 1 + j : n], reduction="none")
                    sums.append(gap.mean(-1).flatten()[kept].sum())
                    counts.append(kept.sum())
        return torch.stack(sums), torch.stack(counts)


@torch.no_grad()
def accuracy(head: EagleHead, target, windows: torch.Tensor, ranks: int, depth: int, batch: int = 8,
             start: int = 0, mask: torch.Tensor | None = None) -> dict:
    """Drafting a chain from every position t >= start, fed the text's tokens: per depth d,
    accept[d][r] = P(the head's rank-r token == the target's own greedy token there), the
    per-depth, per-rank acceptance the tree search reads; `accept_sampled[d]` = mean of
    sum_x min(p, q), the chance a token the head samples is accepted against the target's law
    (T = 1); and top-1 agreement with the text. `mask` [N, T]: only positions whose drafted
    token is a training label (the assistant's, in a conversation) count."""
    embed, lm_head = head.embedding(target.get_input_embeddings()), target.get_output_embeddings()
    hits = torch.zeros(depth, ranks, dtype=torch.float64)
    text_hits, count = torch.zeros(depth, dtype=torch.float64), torch.zeros(depth, dtype=torch.float64)
    sampled = torch.zeros(depth, dtype=torch.float64)
    device = next(target.parameters()).device
    mask = torch.ones_like(windows, dtype=torch.bool) if mask is None else mask
    for first in range(0, len(windows), batch):
        blocks = windows[first : first + batch].to(device)
        features, _, logits = target_features(target, blocks, head_layers(head, target))
        n = blocks.shape[1] - 1
        for j, out in enumerate(unroll(head, embed, features, blocks, depth)):
            rows = slice(start, n - j - 1)  # t <= T-3-j: the text's token x[t+2+j] exists
            kept = mask[first : first + batch, start + 2 + j :].to(device)  # [b, P]
            head_logits = head.logits(out[:, rows], lm_head, step=j).float()  # [b, P, V]
            ranked = head_logits.topk(ranks, dim=-1).indices  # [b, P, R]
            greedy = logits[:, start + 1 + j : n].argmax(-1)  # z[t+1+j]
            truth = blocks[:, start + 2 + j :]
            hits[j] += (ranked == greedy[..., None])[kept].double().sum(0).cpu()
            text_hits[j] += (ranked[..., 0] == truth)[kept].double().sum().cpu()
            sampled[j] += acceptance(head_logits.log_softmax(-1)[kept],
                                     logits[:, start + 1 + j : n].log_softmax(-1)[kept]).double().sum().cpu()
            count[j] += kept.sum().cpu()
    count = count.clamp_min(1)
    return {"accept": (hits / count[:, None]).tolist(), "top1_target": (hits[:, 0] / count).tolist(),
            "accept_sampled": (sampled / count).tolist(), "top1_text": (text_hits / count).tolist(),
            "positions": count.tolist()}


def train_head(target, heads: dict[str, EagleHead], data: dict[str, TokenData], out_dir: str | Path,
               cfg: EagleTrainConfig | None = None) -> dict[str, EagleHead] | None:
    """Trains (or resumes) one head per loss against the frozen target; None when time_limit_s ran out first."""
    cfg = cfg if cfg is not None else EagleTrainConfig()  # a fresh one per call: the fields are mutable
    if set(heads) != set(cfg.losses):
        raise ValueError(f"heads {sorted(heads)} and losses {sorted(cfg.losses)} must be named alike")
    device = resolve_device(cfg.device)
    objective = EagleObjective(target.to(device), heads, cfg)
    valid, valid_mask = data["valid"].fixed(cfg.block_size, cfg.eval_tokens)

    def evaluate(trained) -> dict:
        trained.eval()
        rates = {name: accuracy(head, target, valid, 1, cfg.eval_depth, mask=valid_mask)
                 for name, head in trained.items()}
        trained.train()
        return {f"{name}_valid": {"top1_target": [round(x, 4) for x in r["top1_target"]],
                                  "accept_sampled": [round(x, 4) for x in r["accept_sampled"]]}
                for name, r in rates.items()}

    if not train(objective, data["train"], out_dir, cfg, evaluate, name="eagle heads"):
        return None
    return {name: head.eval() for name, head in objective.heads.items()}
