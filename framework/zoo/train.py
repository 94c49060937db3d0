"""The zoo's training loop: packed blocks, AdamW with warmup + cosine decay, bf16 autocast on CPU.

Resumable: every `save_every` steps a checkpoint folder step_XXXXXXX/ is written under
<out_dir>/checkpoints (a standard HF checkpoint: config + safetensors + tokenizer, plus
trainer_state.pt with the optimizer and step). A later call with the same out_dir continues from
the newest one. Batches are drawn by a generator seeded with (seed, step), so a resumed run sees
the same batches it would have seen uninterrupted. The final model goes to <out_dir>/final.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import transformers
from tqdm.auto import tqdm


@dataclass
class TrainConfig:
    steps: int = 2000
    batch_size: int = 16
    block_size: int = 256
    lr: float = 1e-3
    min_lr_ratio: float = 0.1  # cosine decays to lr * min_lr_ratio
    warmup: int = 100
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    eval_every: int = 200
    eval_blocks: int = 64  # held-out blocks per evaluation (the first ones: a fixed set)
    save_every: int = 200
    keep_checkpoints: int = 2
    bf16: bool = True
    seed: int = 0


def pack(tokenizer, texts: list[str], block_size: int) -> torch.Tensor:
    """Token ids of all texts, each preceded by EOS, cut into [N, block_size] (the tail is dropped)."""
    ids = tokenizer(list(texts), add_special_tokens=False)["input_ids"]
    flat = torch.tensor([t for doc in ids for t in [tokenizer.eos_token_id, *doc]], dtype=torch.long)
    n = len(flat) // block_size
    if n == 0:
        raise ValueError(f"{len(flat)} tokens: not one block of {block_size}")
    return flat[: n * block_size].view(n, block_size)  # [N, T]


def lr_at(step: int, cfg: TrainConfig) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = min(1.0, (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup))
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def lm_loss(model, blocks: torch.Tensor, bf16: bool) -> torch.Tensor:
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        return model(input_ids=blocks, labels=blocks).loss  # HF shifts labels by one


@torch.no_grad()
def heldout_loss(model, blocks: torch.Tensor, cfg: TrainConfig) -> float:
    model.eval()
    losses = [lm_loss(model, chunk, cfg.bf16).item() for chunk in blocks[: cfg.eval_blocks].split(cfg.batch_size)]
    model.train()
    return sum(losses) / len(losses)


def latest_checkpoint(out_dir: Path) -> Path | None:
    found = sorted((out_dir / "checkpoints").glob("step_*"))
    found = [p for p in found if (p / "trainer_state.pt").exists()]  # skip one cut off mid-save
    return found[-1] if found else None


def save_checkpoint(path: Path, model, tokenizer, optimizer, step: int, history: list[dict]) -> None:
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    # written last: its presence marks the checkpoint complete
    torch.save({"optimizer": optimizer.state_dict(), "step": step, "history": history}, path / "trainer_state.pt")


def train(model_config: Callable[[int], transformers.PretrainedConfig], tokenizer, corpus, out_dir: str | Path,
          cfg: TrainConfig = TrainConfig()) -> Path:
    """Trains (or resumes) a causal LM on corpus["train"]; returns the folder of the final model.

    `model_config(vocab_size)` builds the architecture; `corpus` has "train"/"heldout" rows {path, text}.
    """
    out_dir = Path(out_dir)
    train_blocks = pack(tokenizer, corpus["train"]["text"], cfg.block_size)  # [N, T]
    eval_blocks = pack(tokenizer, corpus["heldout"]["text"], cfg.block_size)  # [M, T]

    resume = latest_checkpoint(out_dir)
    torch.manual_seed(cfg.seed)
    if resume is not None:
        model = transformers.AutoModelForCausalLM.from_pretrained(resume, dtype=torch.float32)
    else:
        model = transformers.AutoModelForCausalLM.from_config(model_config(len(tokenizer)), dtype=torch.float32)
    decay = [p for p in model.parameters() if p.dim() >= 2]  # no decay on norms
    rest = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                                   {"params": rest, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.95))
    step, history = 0, []
    if resume is not None:
        state = torch.load(resume / "trainer_state.pt", weights_only=False)
        optimizer.load_state_dict(state["optimizer"])
        step, history = state["step"], state["history"]

    model.train()
    bar = tqdm(total=cfg.steps, initial=step, desc=out_dir.name, dynamic_ncols=True)
    while step < cfg.steps:
        generator = torch.Generator().manual_seed(cfg.seed * 1_000_003 + step)
        batch = train_blocks[torch.randint(len(train_blocks), (cfg.batch_size,), generator=generator)]  # [B, T]
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, cfg)
        loss = lm_loss(model, batch, cfg.bf16)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        record = {"step": step, "loss": loss.item()}
        if step % cfg.eval_every == 0 or step == cfg.steps:
            record["heldout_loss"] = heldout_loss(model, eval_blocks, cfg)
        history.append(record)
        bar.set_postfix({k: f"{v:.3f}" for k, v in record.items() if k != "step"})
        bar.update(1)
        if step % cfg.save_every == 0 or step == cfg.steps:
            save_checkpoint(out_dir / "checkpoints" / f"step_{step:07d}", model, tokenizer, optimizer, step, history)
            for old in sorted((out_dir / "checkpoints").glob("step_*"))[: -cfg.keep_checkpoints]:
                for f in old.iterdir():
                    f.unlink()
                old.rmdir()
    bar.close()
    final = out_dir / "final"
    model.save_pretrained(final)
    tokenizer.save_pretrained(final)
    return final
