"""Training Medusa heads against a frozen target, and measuring them (per-head, per-rank accuracy).

Indexing: the target's hidden state h_t (post-norm, what lm_head reads) yields the logits z_t for
token t+1. Head k (0-based) reads h_t and predicts token t+k+2. Two objectives:
- "ce": cross-entropy to the corpus's token x[t+k+2];
- "kl": self-distillation, KL(target law || head law), the target's law being softmax(z_{t+k+1}).
Both train side by side on the same batches (one target forward serves every head set), so the
comparison is fair and costs one target pass. Hidden states are computed on the fly; the target
never trains. Loss weight of head k: decay**k (later heads are harder and matter less).
Resumable: <out>/checkpoint.pt holds every head set, its optimiser and the data generator (written whole,
the one before kept as checkpoint.prev.pt: a resume falls back to it if the newest does not load).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from framework.core import files
from framework.zoo.train import fixed_windows, lr_at, random_windows, resolve_device, save_or_stop
from proposers.medusa.heads import MedusaHeads

OBJECTIVES = ("ce", "kl")


@dataclass
class MedusaTrainConfig:
    num_heads: int = 4
    steps: int = 600
    batch_size: int = 8
    block_size: int = 256
    lr: float = 1e-3
    min_lr_ratio: float = 0.0  # cosine decays to lr * min_lr_ratio (framework.zoo.train.lr_at)
    warmup: int = 30
    decay: float = 0.8  # loss weight of head k
    objectives: tuple[str, ...] = OBJECTIVES
    eval_every: int = 100
    eval_tokens: int = 16384
    save_every: int = 50
    ranks: int = 10  # accuracy measured for ranks 0..ranks-1
    bf16: bool = True  # autocast on CUDA (CPU runs in the target's dtype)
    device: str = "auto"
    time_limit_s: float | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        self.objectives = tuple(self.objectives)  # Hydra passes a ListConfig
        unknown = set(self.objectives) - set(OBJECTIVES)
        if unknown or not self.objectives:
            raise ValueError(f"objectives must be among {OBJECTIVES}, got {list(self.objectives)}")


def batch_of(source: torch.Tensor, batch_size: int, block_size: int, generator: torch.Generator) -> torch.Tensor:
    """Training windows [B, T]: random windows of a token stream [S], or random rows of windows [N, T]."""
    if source.dim() == 1:
        return random_windows(source, batch_size, block_size, generator)
    return source[torch.randint(len(source), (batch_size,), generator=generator), :block_size].long()


@torch.no_grad()
def target_pass(target, blocks: torch.Tensor, bf16: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """blocks [B, T] -> (last hidden state [B, T, H], logits [B, T, V]) of the frozen target, in float32."""
    with torch.autocast(blocks.device.type, dtype=torch.bfloat16, enabled=bf16 and blocks.device.type == "cuda"):
        out = target(input_ids=blocks, output_hidden_states=True)
    return out.hidden_states[-1].float(), out.logits.float()


def head_losses(heads: MedusaHeads, hidden: torch.Tensor, logits: torch.Tensor, blocks: torch.Tensor,
                objective: str) -> torch.Tensor:
    """Per-head mean loss [K] on one batch (hidden [B, T, H], target logits [B, T, V], blocks [B, T])."""
    T, K = blocks.shape[1], heads.config.num_heads
    out = heads(hidden)  # [B, T, K, V]
    losses = []
    for k in range(K):
        pred = out[:, : T - k - 2, k].float().log_softmax(-1)  # [B, T-k-2, V]
        if objective == "ce":
            losses.append(torch.nn.functional.nll_loss(pred.flatten(0, 1), blocks[:, k + 2 :].flatten()))
        else:
            teacher = logits[:, k + 1 : T - 1].log_softmax(-1)  # [B, T-k-2, V]
            losses.append(torch.nn.functional.kl_div(pred.flatten(0, 1), teacher.flatten(0, 1), log_target=True,
                                                     reduction="batchmean"))
    return torch.stack(losses)


@torch.no_grad()
def accuracy(heads: MedusaHeads, target, windows: torch.Tensor, ranks: int, bf16: bool, batch: int = 8,
             start: int = 0) -> dict:
    """Per head k: accept[k][r] = P(rank r of head k == the target's own greedy token at that position),
    the per-rank acceptance the tree search reads; and top-1 / top-5 accuracy against the text.
    Positions t >= start only (a self-generated window: from the last prompt token on)."""
    K = heads.config.num_heads
    hits_target = torch.zeros(K, ranks, dtype=torch.float64)
    hits_corpus = torch.zeros(K, 2, dtype=torch.float64)
    count = torch.zeros(K, dtype=torch.float64)
    for first in range(0, len(windows), batch):
        blocks = windows[first : first + batch]
        hidden, logits = target_pass(target, blocks, bf16)
        out = heads(hidden)  # [B, T, K, V]
        T = blocks.shape[1]
        for k in range(K):
            ranked = out[:, start : T - k - 2, k].topk(max(ranks, 5), dim=-1).indices  # [B, T-k-2-start, R]
            greedy = logits[:, start + k + 1 : T - 1].argmax(-1)  # the target's token there
            truth = blocks[:, start + k + 2 :]
            hits_target[k] += (ranked[..., :ranks] == greedy[..., None]).flatten(0, 1).double().sum(0).cpu()
            hits_corpus[k, 0] += (ranked[..., 0] == truth).double().sum().cpu()
            hits_corpus[k, 1] += (ranked[..., :5] == truth[..., None]).any(-1).double().sum().cpu()
            count[k] += truth.numel()
    return {"accept": (hits_target / count[:, None]).tolist(),
            "top1_corpus": (hits_corpus[:, 0] / count).tolist(), "top5_corpus": (hits_corpus[:, 1] / count).tolist(),
            "top1_target": (hits_target[:, 0] / count).tolist(),
            "top5_target": (hits_target[:, :5].sum(1) / count).tolist(), "positions": count.tolist()}


def train_heads(target, streams: dict[str, torch.Tensor], out_dir: str | Path,
                cfg: MedusaTrainConfig = MedusaTrainConfig()) -> dict[str, MedusaHeads] | None:
    """Trains one head set per objective (or resumes); None when time_limit_s ran out first.
    streams["train"]: a token stream [S] or ready windows [N, T] (self-generated text)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    device = resolve_device(cfg.device)
    target = target.to(device).eval().requires_grad_(False)
    heads = {name: MedusaHeads.for_target(target, cfg.num_heads).to(device) for name in cfg.objectives}
    optims = {name: torch.optim.AdamW(h.parameters(), lr=cfg.lr, weight_decay=0.0) for name, h in heads.items()}
    generator = torch.Generator().manual_seed(cfg.seed)
    step, log = 0, []
    ckpt = out_dir / "checkpoint.pt"
    state = files.load_torch(ckpt, "Medusa training")  # the newest that loads: the file, then its previous version
    if state is not None:
        for name in heads:
            heads[name].load_state_dict(state["heads"][name])
            optims[name].load_state_dict(state["optims"][name])
        generator.set_state(state["generator"])
        step, log = state["step"], state["log"]
    valid = fixed_windows(streams["valid"], cfg.block_size, cfg.eval_tokens).to(device)
    start = time.monotonic()

    def save() -> None:
        files.save_torch({"step": step, "heads": {n: h.state_dict() for n, h in heads.items()},
                          "optims": {n: o.state_dict() for n, o in optims.items()}, "generator": generator.get_state(),
                          "log": log, "config": asdict(cfg)}, ckpt, keep_previous=True)

    weights = torch.tensor([cfg.decay**k for k in range(cfg.num_heads)], device=device)
    bar = tqdm(total=cfg.steps, initial=step, desc="medusa heads")
    while step < cfg.steps:
        blocks = batch_of(streams["train"], cfg.batch_size, cfg.block_size, generator).to(device)
        hidden, logits = target_pass(target, blocks, cfg.bf16)
        row = {"step": step + 1}
        for name, h in heads.items():
            for group in optims[name].param_groups:
                group["lr"] = lr_at(step, cfg)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cfg.bf16 and device.type == "cuda"):
                per_head = head_losses(h, hidden, logits, blocks, name)
            loss = (weights * per_head).sum()
            optims[name].zero_grad(set_to_none=True)
            loss.backward()
            optims[name].step()
            row[name] = per_head.detach().cpu().tolist()
        step += 1
        bar.update(1)
        bar.set_postfix({n: f"{sum(v):.2f}" for n, v in row.items() if n != "step"})
        if step % cfg.eval_every == 0 or step == cfg.steps:
            row["valid_top1_target"] = {n: accuracy(h, target, valid, 1, cfg.bf16)["top1_target"] for n, h in heads.items()}
            tqdm.write(f"step {step}: valid top-1 (target's token) per head {row['valid_top1_target']}")
        log.append(row)
        if save_or_stop(step, cfg, save, start):
            bar.close()
            return None
    bar.close()
    return heads
