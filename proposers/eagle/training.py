"""Training an EAGLE head against a frozen target, and measuring its acceptance per depth.

Indexing (proposers/eagle/head.py): head position t reads token x[t+1] and g_t, outputs o_t, which
predicts token x[t+2], whose target law is softmax(z[t+1]) (z: the target's logits).

Unrolled training ("training-time test", EAGLE-3): step 0 reads the target's fused features;
step j >= 1 reads, at position t, token x[t+1+j] and the head's own step-(j-1) output there, and
predicts x[t+2+j]. Its attention sees what it would see when drafting a chain from t: the
step-0 keys of positions <= t (features from the target) and its own chain (steps 1..j at t).
EAGLE-1 is the one-step case with a feature regression: smooth-L1(o_t, target's last hidden
state at t+1) plus a weighted token loss, with uniform noise on the input features. EAGLE-3 uses
the token loss only, unrolled. Token loss: KL(target law || head law) over the head's draft
vocabulary (EAGLE-3: the target's law restricted to it and renormalised, as SpecForge trains).
Step j weighs decay**j.
Resumable: <out>/checkpoint.pt holds the head, its optimiser and the data generator.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch.nn import functional as F
from tqdm import tqdm
from transformers import DynamicCache

from framework.core import files
from framework.zoo.train import fixed_windows, lr_at, resolve_device, save_or_stop
from proposers.eagle.head import EagleHead
from proposers.medusa.training import batch_of


@dataclass
class EagleTrainConfig:
    steps: int = 1000
    batch_size: int = 8
    block_size: int = 128
    lr: float = 1e-3
    min_lr_ratio: float = 0.0
    warmup: int = 50
    unroll: int = 1  # training-time test steps (1 = teacher features only, EAGLE-1)
    decay: float = 0.8  # weight of unrolled step j
    feature_weight: float = 1.0  # smooth-L1 to the target's next feature (EAGLE-1); 0 = token loss only (EAGLE-3)
    token_weight: float = 0.1
    noise: float = 0.2  # uniform noise U(-noise/2, noise/2) on the step-0 input features
    eval_every: int = 200
    eval_tokens: int = 8192
    eval_depth: int = 6
    save_every: int = 25
    ranks: int = 10
    device: str = "auto"
    time_limit_s: float | None = None
    seed: int = 0


@torch.no_grad()
def target_features(target, blocks: torch.Tensor, layers: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
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
           noise: float = 0.0, generator: torch.Generator | None = None) -> list[torch.Tensor]:
    """features [B, T, L, H] at the head's layers, blocks [B, T] -> outputs o^j [B, T-1, H], j < steps.
    Rows of step j past position T-2-j read padding and must not be scored."""
    B, T = blocks.shape
    n = T - 1
    g = head.fused(features[:, :n])  # [B, n, H]
    if noise > 0:
        g = g + noise * (torch.rand(g.shape, generator=generator).to(g.device) - 0.5)
    cache, outs = DynamicCache(), []
    positions = torch.arange(n, device=blocks.device).expand(B, n)
    for j in range(steps):
        tokens = F.pad(blocks[:, 1 + j :], (0, j))  # [B, n]: x[t+1+j]
        mask = unroll_mask(n, j, blocks.device)[None, None]
        g = head(embed(tokens), g, positions + j, cache, attention_mask=mask)
        outs.append(g)
    return outs


def unroll_losses(head, embed, lm_head, features, last_hidden, logits, blocks, cfg: EagleTrainConfig,
                  generator=None) -> torch.Tensor:
    """Per unrolled step: token loss + feature loss, weighted as configured [unroll]."""
    n = blocks.shape[1] - 1
    losses = []
    for j, out in enumerate(unroll(head, embed, features, blocks, cfg.unroll, cfg.noise, generator)):
        rows = n - j  # positions t <= T-2-j
        pred = head.draft_logits(out[:, :rows], lm_head).float().log_softmax(-1)
        teacher = logits[:, 1 + j :]  # z[t+1+j]
        ids = head.draft_ids()
        teacher = (teacher if ids is None else teacher[..., ids]).log_softmax(-1)
        loss = cfg.token_weight * F.kl_div(pred.flatten(0, 1), teacher.flatten(0, 1), log_target=True, reduction="batchmean")
        if cfg.feature_weight:
            loss = loss + cfg.feature_weight * F.smooth_l1_loss(out[:, :rows].float(), last_hidden[:, 1 + j :])
        losses.append(loss)
    return torch.stack(losses)


@torch.no_grad()
def accuracy(head: EagleHead, target, windows: torch.Tensor, ranks: int, depth: int, batch: int = 8,
             start: int = 0) -> dict:
    """Drafting a chain from every position t >= start, fed the text's tokens: per depth d,
    accept[d][r] = P(the head's rank-r token == the target's own greedy token there), the
    per-depth, per-rank acceptance the tree search reads; and top-1 agreement with the text."""
    embed, lm_head = head.embedding(target.get_input_embeddings()), target.get_output_embeddings()
    hits = torch.zeros(depth, ranks, dtype=torch.float64)
    text_hits, count = torch.zeros(depth, dtype=torch.float64), torch.zeros(depth, dtype=torch.float64)
    device = next(target.parameters()).device
    for first in range(0, len(windows), batch):
        blocks = windows[first : first + batch].to(device)
        features, _, logits = target_features(target, blocks, head_layers(head, target))
        n = blocks.shape[1] - 1
        for j, out in enumerate(unroll(head, embed, features, blocks, depth)):
            rows = slice(start, n - j - 1)  # t <= T-3-j: the text's token x[t+2+j] exists
            ranked = head.logits(out[:, rows], lm_head).topk(ranks, dim=-1).indices  # [B, P, R]
            greedy = logits[:, start + 1 + j : n].argmax(-1)  # z[t+1+j]
            truth = blocks[:, start + 2 + j :]
            hits[j] += (ranked == greedy[..., None]).flatten(0, 1).double().sum(0).cpu()
            text_hits[j] += (ranked[..., 0] == truth).double().sum().cpu()
            count[j] += truth.numel()
    return {"accept": (hits / count[:, None]).tolist(), "top1_target": (hits[:, 0] / count).tolist(),
            "top1_text": (text_hits / count).tolist(), "positions": count.tolist()}


def train_head(target, head: EagleHead, streams: dict[str, torch.Tensor], out_dir: str | Path,
               cfg: EagleTrainConfig = EagleTrainConfig()) -> EagleHead | None:
    """Trains (or resumes) `head` against the frozen target; None when time_limit_s ran out first."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    device = resolve_device(cfg.device)
    target = target.to(device).eval().requires_grad_(False)
    embed, lm_head = head.embedding(target.get_input_embeddings()), target.get_output_embeddings()
    head = head.to(device).train()
    optim = torch.optim.AdamW(head.parameters(), lr=cfg.lr, weight_decay=0.0)
    generator = torch.Generator().manual_seed(cfg.seed)
    step, log = 0, []
    ckpt = out_dir / "checkpoint.pt"
    state = files.load_torch(ckpt, "EAGLE training")  # the newest that loads: the file, then its previous version
    if state is not None:
        head.load_state_dict(state["head"])
        optim.load_state_dict(state["optim"])
        generator.set_state(state["generator"])
        step, log = state["step"], state["log"]
    valid = fixed_windows(streams["valid"], cfg.block_size, cfg.eval_tokens).to(device)
    start = time.monotonic()

    def save() -> None:
        files.save_torch({"step": step, "head": head.state_dict(), "optim": optim.state_dict(),
                          "generator": generator.get_state(), "log": log, "config": asdict(cfg)}, ckpt, keep_previous=True)

    weights = torch.tensor([cfg.decay**j for j in range(cfg.unroll)], device=device)
    bar = tqdm(total=cfg.steps, initial=step, desc="eagle head")
    while step < cfg.steps:
        blocks = batch_of(streams["train"], cfg.batch_size, cfg.block_size, generator).to(device)
        features, last_hidden, logits = target_features(target, blocks, head_layers(head, target))
        for group in optim.param_groups:
            group["lr"] = lr_at(step, cfg)
        per_step = unroll_losses(head, embed, lm_head, features, last_hidden, logits, blocks, cfg, generator)
        loss = (weights * per_step).sum()
        optim.zero_grad(set_to_none=True)
        loss.backward()
        optim.step()
        step += 1
        row = {"step": step, "loss": per_step.detach().cpu().tolist()}
        bar.update(1)
        bar.set_postfix(loss=f"{float(loss.detach()):.3f}")
        if step % cfg.eval_every == 0 or step == cfg.steps:
            head.eval()
            row["valid_top1_target"] = accuracy(head, target, valid, 1, cfg.eval_depth)["top1_target"]
            head.train()
            tqdm.write(f"step {step}: valid top-1 (target's token) per depth "
                       f"{[round(x, 3) for x in row['valid_top1_target']]}")
        log.append(row)
        if save_or_stop(step, cfg, save, start):
            bar.close()
            return None
    bar.close()
    return head.eval()
