"""Distilling an independent draft model from a frozen target, through the shared loop (framework/training/loop.py).

The draft is any Hugging Face causal LM on the target's vocabulary. At position t it predicts token
t+1, whose target law is softmax(z_t): any loss of framework/training/losses.py (KL as usual, TV,
LK, or cross-entropy to the text), counted where token t+1 is a training label. Several losses
train one draft each (the same initial weights), side by side on the same batches and target pass.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from framework.data.token_data import TokenData
from framework.training.loop import LoopConfig, resolve_device, train
from framework.training.losses import KL, acceptance


@dataclass
class DraftTrainConfig(LoopConfig):
    losses: dict = field(default_factory=lambda: {"kl": KL()})  # name -> loss: one draft each, side by side
    weight_decay: float = 0.1


def check_vocabulary(draft, target) -> None:
    have, want = draft.get_output_embeddings().weight.shape[0], target.get_output_embeddings().weight.shape[0]
    if have != want:
        raise ValueError(f"the draft's vocabulary has {have} rows, the target's {want}: a distilled draft predicts "
                         "the target's tokens (build it from the target's tokenizer)")


class DraftObjective(nn.Module):
    def __init__(self, target, drafts: dict[str, nn.Module], losses: dict):
        super().__init__()
        for draft in drafts.values():
            check_vocabulary(draft, target)
        self.target = target.eval().requires_grad_(False)
        self.drafts, self.losses = nn.ModuleDict(drafts), losses
        self.part_names = list(drafts)
        self.register_buffer("part_weights", torch.ones(len(drafts)), persistent=False)

    def trained(self) -> nn.Module:
        return self.drafts

    def forward(self, ids, mask, rows, generator):
        with torch.no_grad():
            target_logp = self.target(input_ids=ids).logits[:, :-1].float().log_softmax(-1)  # [b, T-1, V]
        kept = mask[:, 1:].flatten()  # positions t whose token t+1 is a label
        sums = []
        for name, draft in self.drafts.items():
            logp = draft(input_ids=ids).logits[:, :-1].float().log_softmax(-1)  # [b, T-1, V]
            per = self.losses[name](logp.flatten(0, 1)[kept], target_logp.flatten(0, 1)[kept],
                                    ids[:, 1:].flatten()[kept])
            sums.append(per.sum())
        return torch.stack(sums), kept.sum().expand(len(sums))


@torch.no_grad()
def draft_acceptance(draft, target, windows: torch.Tensor, mask: torch.Tensor | None = None, batch: int = 8) -> dict:
    """At every labelled position: how often the draft's greedy token is the target's (greedy acceptance)
    and the mean of sum_x min(p, q) (the chance a sampled draft token is accepted at T = 1)."""
    mask = torch.ones_like(windows, dtype=torch.bool) if mask is None else mask
    device = next(target.parameters()).device
    greedy = sampled = count = 0.0
    for first in range(0, len(windows), batch):
        ids = windows[first : first + batch].to(device)
        kept = mask[first : first + batch, 1:].to(device)
        p = target(input_ids=ids).logits[:, :-1].float().log_softmax(-1)[kept]  # [N, V]
        q = draft(input_ids=ids).logits[:, :-1].float().log_softmax(-1)[kept]
        greedy += float((p.argmax(-1) == q.argmax(-1)).sum())
        sampled += float(acceptance(q, p).sum())
        count += float(kept.sum())
    count = max(count, 1.0)
    return {"top1_target": greedy / count, "accept_sampled": sampled / count, "positions": count}


def train_drafts(target, draft: nn.Module, data: dict[str, TokenData], out_dir: str | Path,
                 cfg: DraftTrainConfig | None = None) -> dict[str, nn.Module] | None:
    """Distils one copy of `draft` per loss (or resumes); None when time_limit_s ran out first."""
    cfg = cfg if cfg is not None else DraftTrainConfig()  # a fresh one per call: the fields are mutable
    device = resolve_device(cfg.device)
    target = target.to(device)
    drafts = {name: copy.deepcopy(draft).float().train() for name in cfg.losses}
    objective = DraftObjective(target, drafts, cfg.losses)
    valid, valid_mask = data["valid"].fixed(cfg.block_size, cfg.eval_tokens)

    def evaluate(trained) -> dict:
        trained.eval()
        rates = {f"{name}_valid": draft_acceptance(d, target, valid, valid_mask) for name, d in trained.items()}
        trained.train()
        return {k: {m: round(v, 4) for m, v in r.items() if m != "positions"} for k, r in rates.items()}

    if not train(objective, data["train"], out_dir, cfg, evaluate, name="draft"):
        return None
    return {name: d.eval() for name, d in objective.drafts.items()}
