"""Training Medusa heads against a frozen target, and measuring them (per-head, per-rank accuracy).

Indexing: the target's hidden state h_t (post-norm, what lm_head reads) yields the logits z_t for
token t+1. Head k (0-based) reads h_t and predicts token t+k+2, whose target law is softmax(z_{t+k+1}).
Any loss of framework/training/losses.py: cross-entropy to the text's token x[t+k+2] (Medusa-1),
KL to the target's law (self-distillation, Medusa-2), TV or LK; counted where x[t+k+2] is a training
label (the assistant's, in a conversation). Several losses train one head set each, side by side on
the same batches and the same target pass, so the comparison is fair and costs one target pass.
Hidden states are computed on the fly; the target never trains. Loss weight of head k: decay**k.
The loop (framework/training/loop.py) is shared: data-parallel, resumable from <out>/checkpoint.pt.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from framework.data.token_data import TokenData
from framework.training.loop import LoopConfig, resolve_device, train
from framework.training.losses import KL, CrossEntropy, acceptance
from proposers.medusa.heads import MedusaHeads


@dataclass
class MedusaTrainConfig(LoopConfig):
    num_heads: int = 4
    decay: float = 0.8  # loss weight of head k
    losses: dict = field(default_factory=lambda: {"ce": CrossEntropy(), "kl": KL()})  # name -> loss: a head set each
    ranks: int = 10  # accuracy measured for ranks 0..ranks-1
    bf16: bool = True  # autocast on CUDA (CPU runs in the target's dtype)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.losses = dict(self.losses)
        if not self.losses:
            raise ValueError("losses is empty: name at least one (e.g. loss=kl)")


@torch.no_grad()
def target_pass(target, blocks: torch.Tensor, bf16: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """blocks [B, T] -> (last hidden state [B, T, H], logits [B, T, V]) of the frozen target, in float32."""
    with torch.autocast(blocks.device.type, dtype=torch.bfloat16, enabled=bf16 and blocks.device.type == "cuda"):
        out = target(input_ids=blocks, output_hidden_states=True)
    return out.hidden_states[-1].float(), out.logits.float()


def head_losses(heads: MedusaHeads, hidden: torch.Tensor, logits: torch.Tensor, blocks: torch.Tensor,
                mask: torch.Tensor, loss) -> tuple[torch.Tensor, torch.Tensor]:
    """Per head: (summed loss [K], positions counted [K]) on one batch (hidden [B, T, H], target logits
    [B, T, V], blocks and mask [B, T])."""
    T, K = blocks.shape[1], heads.config.num_heads
    out = heads(hidden)  # [B, T, K, V]
    sums, counts = [], []
    for k in range(K):
        kept = mask[:, k + 2 :].flatten()  # positions t whose x[t+k+2] is a label
        pred = out[:, : T - k - 2, k].float().log_softmax(-1).flatten(0, 1)[kept]  # [N, V]
        teacher = None if logits is None else logits[:, k + 1 : T - 1].log_softmax(-1).flatten(0, 1)[kept]
        sums.append(loss(pred, teacher, blocks[:, k + 2 :].flatten()[kept]).sum())
        counts.append(kept.sum())
    return torch.stack(sums), torch.stack(counts)


class MedusaObjective(nn.Module):
    """One head set per loss, side by side on the same batches and target pass (framework/training/loop.py)."""

    def __init__(self, target, heads: dict[str, MedusaHeads], cfg: MedusaTrainConfig):
        super().__init__()
        self.target = target.eval().requires_grad_(False)
        self.heads, self.cfg = nn.ModuleDict(heads), cfg
        self.part_names = [f"{name}/head{k}" for name in heads for k in range(cfg.num_heads)]
        weights = [cfg.decay**k for _ in heads for k in range(cfg.num_heads)]
        self.register_buffer("part_weights", torch.tensor(weights), persistent=False)

    def trained(self) -> nn.Module:
        return self.heads

    def forward(self, ids, mask, rows, generator):
        hidden, logits = target_pass(self.target, ids, self.cfg.bf16)
        parts = []
        with torch.autocast(ids.device.type, dtype=torch.bfloat16, enabled=self.cfg.bf16 and ids.device.type == "cuda"):
            for name, heads in self.heads.items():
                parts.append(head_losses(heads, hidden, logits, ids, mask, self.cfg.losses[name]))
        return torch.cat([s for s, _ in parts]), torch.cat([c for _, c in parts])


@torch.no_grad()
def accuracy(heads: MedusaHeads, target, windows: torch.Tensor, ranks: int, bf16: bool, batch: int = 8,
             start: int = 0, mask: torch.Tensor | None = None) -> dict:
    """Per head k: accept[k][r] = P(rank r of head k == the target's own greedy token at that position),
    the per-rank acceptance the tree search reads; accept_sampled[k] = mean sum_x min(p, q) (T = 1);
    top-1 / top-5 accuracy against the text. Positions t >= start only (a self-generated window: from
    the last prompt token on) whose predicted token is a training label (`mask` [N, T])."""
    K = heads.config.num_heads
    hits_target = torch.zeros(K, ranks, dtype=torch.float64)
    hits_corpus = torch.zeros(K, 2, dtype=torch.float64)
    sampled, count = torch.zeros(K, dtype=torch.float64), torch.zeros(K, dtype=torch.float64)
    mask = torch.ones_like(windows, dtype=torch.bool) if mask is None else mask
    for first in range(0, len(windows), batch):
        blocks = windows[first : first + batch]
        hidden, logits = target_pass(target, blocks, bf16)
        out = heads(hidden).float()  # [B, T, K, V]
        T = blocks.shape[1]
        for k in range(K):
            kept = mask[first : first + batch, start + k + 2 :].to(blocks.device)  # [B, P]
            head_logits = out[:, start : T - k - 2, k]  # [B, P, V]
            ranked = head_logits.topk(max(ranks, 5), dim=-1).indices[kept]  # [N, R]
            target_logits = logits[:, start + k + 1 : T - 1]  # the target's law there
            greedy = target_logits.argmax(-1)[kept]
            truth = blocks[:, start + k + 2 :][kept]
            hits_target[k] += (ranked[..., :ranks] == greedy[..., None]).double().sum(0).cpu()
            hits_corpus[k, 0] += (ranked[..., 0] == truth).double().sum().cpu()
            hits_corpus[k, 1] += (ranked[..., :5] == truth[..., None]).any(-1).double().sum().cpu()
            sampled[k] += acceptance(head_logits.log_softmax(-1)[kept],
                                     target_logits.log_softmax(-1)[kept]).double().sum().cpu()
            count[k] += truth.numel()
    count = count.clamp_min(1)
    return {"accept": (hits_target / count[:, None]).tolist(), "accept_sampled": (sampled / count).tolist(),
            "top1_corpus": (hits_corpus[:, 0] / count).tolist(), "top5_corpus": (hits_corpus[:, 1] / count).tolist(),
            "top1_target": (hits_target[:, 0] / count).tolist(),
            "top5_target": (hits_target[:, :5].sum(1) / count).tolist(), "positions": count.tolist()}


def train_heads(target, data: dict[str, TokenData], out_dir: str | Path,
                cfg: MedusaTrainConfig | None = None) -> dict[str, MedusaHeads] | None:
    """Trains one head set per loss (or resumes); None when time_limit_s ran out first."""
    cfg = cfg if cfg is not None else MedusaTrainConfig()  # a fresh one per call: the fields are mutable
    device = resolve_device(cfg.device)
    target = target.to(device)
    heads = {}
    for name in cfg.losses:  # the same initial weights for every loss: the comparison is of the losses alone
        torch.manual_seed(cfg.seed)
        heads[name] = MedusaHeads.for_target(target, cfg.num_heads)
    objective = MedusaObjective(target, heads, cfg)
    valid, _ = data["valid"].fixed(cfg.block_size, cfg.eval_tokens)

    def evaluate(trained) -> dict:
        return {"valid_top1_target": {name: [round(x, 4)
                                             for x in accuracy(h, target, valid.to(device), 1, cfg.bf16)["top1_target"]]
                                      for name, h in trained.items()}}

    if not train(objective, data["train"], out_dir, cfg, evaluate, name="medusa heads"):
        return None
    return dict(objective.heads.items())
