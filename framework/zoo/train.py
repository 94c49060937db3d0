"""The zoo's training loop: random windows of the token stream, AdamW, warmup + cosine, bf16 autocast.

- Data: flat token streams (framework/data: each document preceded by EOS, int32, checked against the
  tokenizer that made them). A batch is
  `batch_size` windows at random offsets, so repeated epochs see new alignments.
- Long context: the last `long_fraction` of the steps read windows of `long_block_size` tokens
  (same tokens per step), so every position up to the context length is trained, not extrapolated.
- Distillation: given a `teacher`, the loss is KL(teacher law || student law) at every position
  instead of cross-entropy on the next token (the draft learns the target's own laws).
- Selection: "valid" (documents carved from the training files) is scored every `eval_every`
  steps; the best model of the last phase is kept in <out_dir>/best and becomes <out_dir>/final.
  "heldout" is scored too, for the record only.
- Resumable: every `save_every` steps (and when `time_limit_s` runs out) a checkpoint folder
  step_XXXXXXX/ is written under <out_dir>/checkpoints (config + safetensors + tokenizer, plus
  trainer_state.pt), built under a temporary name and renamed whole (framework/core/files.py): a kill
  mid-save leaves the checkpoints before it as they were. A later call with the same out_dir continues
  from the newest one that loads (one that does not is named and moved aside). Batches are drawn by a
  generator seeded with (seed, step), so a resumed run sees the same batches. best/ and final/ are
  swapped in whole too. One training per out_dir at a time (a second is refused).
"""

from __future__ import annotations

import math
import re
import shutil
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import transformers
from tqdm.auto import tqdm

from framework.core import files
from framework.data.token_data import TokenData
from framework.training.loop import batch_generator, lr_at, resolve_device, step_if_finite


@dataclass
class TrainConfig:
    steps: int = 2000
    batch_size: int = 16
    block_size: int = 256
    long_block_size: int | None = None  # e.g. 1024: the last phase's window
    long_fraction: float = 0.0  # share of the steps (at the end) that use long_block_size
    lr: float = 1e-3
    min_lr_ratio: float = 0.1  # cosine decays to lr * min_lr_ratio
    warmup: int = 100
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    eval_every: int = 200
    eval_tokens: int = 16384  # per split and evaluation (the first windows: a fixed set)
    save_every: int = 200
    keep_checkpoints: int = 2
    bf16: bool = True
    device: str = "auto"  # "auto": CUDA when there is one
    time_limit_s: float | None = None  # stop (with a checkpoint) after this long; call again to resume
    max_skipped: int = 50  # steps with a non-finite loss or gradient that are skipped before giving up
    seed: int = 0
    select_best: bool = True  # keep the model with the best valid loss; False: the last one (a fine-tune whose
                              # objective is not the valid loss, e.g. LayerSkip's, would otherwise keep its start)

    def window(self, step: int) -> tuple[int, int]:
        """(batch size, block size) at `step`: the long phase keeps the tokens per step."""
        if self.long_block_size is None or step < self.long_start:
            return self.batch_size, self.block_size
        return max(1, self.batch_size * self.block_size // self.long_block_size), self.long_block_size

    def selects(self, step: int) -> bool:
        """May the evaluation after `step` steps pick the final model? Only in the last phase:
        a model that never read long windows must not win on short-window scores."""
        return self.long_block_size is None or step > self.long_start

    @property
    def long_start(self) -> int:
        return self.steps if self.long_block_size is None else round(self.steps * (1 - self.long_fraction))


def loss_on(model, blocks: torch.Tensor, bf16: bool, teacher=None) -> torch.Tensor:
    """Next-token cross-entropy, or with a teacher KL(teacher || model) per position (mean)."""
    with torch.autocast(blocks.device.type, dtype=torch.bfloat16, enabled=bf16):
        if teacher is None:
            return model(input_ids=blocks, labels=blocks).loss  # HF shifts labels by one
        with torch.no_grad():
            target_logp = teacher(input_ids=blocks).logits.float().log_softmax(-1)  # [B, T, V]
        logp = model(input_ids=blocks).logits.float().log_softmax(-1)  # [B, T, V]
    return torch.nn.functional.kl_div(logp.flatten(0, 1), target_logp.flatten(0, 1), log_target=True,
                                      reduction="batchmean")


@torch.no_grad()
def eval_loss(model, blocks: torch.Tensor, batch_size: int, bf16: bool) -> float:
    """Mean next-token cross-entropy (nats/token) over fixed windows."""
    model.eval()
    losses = [loss_on(model, chunk.to(next(model.parameters()).device), bf16).item()
              for chunk in blocks.split(batch_size)]
    model.train()
    return sum(losses) / len(losses)


def checkpoints(out_dir: Path) -> list[Path]:
    """<out_dir>/checkpoints/step_XXXXXXX, oldest first (never a temporary or set-aside name)."""
    folder = out_dir / "checkpoints"
    return sorted(p for p in folder.glob("step_*") if re.fullmatch(r"step_\d+", p.name)) if folder.is_dir() else []


def latest_checkpoint(out_dir: Path) -> Path | None:
    found = checkpoints(out_dir)
    return found[-1] if found else None


def load_checkpoint(path: Path):
    """(model, trainer state) of one checkpoint folder; raises if any part of it is missing or unreadable."""
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    return model, torch.load(path / "trainer_state.pt", weights_only=False)


def newest_loadable(out_dir: Path):
    """(model, trainer state) of the newest checkpoint that loads, or None. One that does not (cut off by a
    kill under an older version, or damaged) is named and moved aside, and the one before it is tried."""
    for path in reversed(checkpoints(out_dir)):
        try:
            return load_checkpoint(path)
        except Exception as error:  # noqa: BLE001 - any part unreadable: the checkpoint is unusable
            aside = path.with_name(path.name + ".unreadable")
            shutil.rmtree(aside, ignore_errors=True)
            path.rename(aside)
            warnings.warn(f"{path} could not be loaded ({type(error).__name__}: {error}); moved to {aside.name}, "
                          "resuming from the one before", stacklevel=2)
    return None


def save_model(path: Path, model, tokenizer) -> None:
    """A model folder, swapped in whole."""
    with files.replacing_folder(path) as temporary:
        model.save_pretrained(temporary)
        tokenizer.save_pretrained(temporary)


def save_checkpoint(path: Path, model, tokenizer, optimizer, state: dict) -> None:
    with files.replacing_folder(path) as temporary:
        model.save_pretrained(temporary)
        tokenizer.save_pretrained(temporary)
        torch.save({"optimizer": optimizer.state_dict(), **state}, temporary / "trainer_state.pt")


def train(model_config: Callable[[int], transformers.PretrainedConfig], tokenizer, streams: dict[str, TokenData],
          out_dir: str | Path, cfg: TrainConfig | None = None, teacher=None, init=None,
          objective: Callable | None = None) -> Path | None:
    """Trains (or resumes) a causal LM on streams["train"]; returns the folder of the final model.

    `model_config(vocab_size)` builds the architecture; `streams` come from framework/data (made by `tokenizer`);
    `teacher` (a causal LM on the same tokenizer) switches the loss to distillation; `init` (a causal LM) is
    the start instead of random weights (a fine-tune); `objective(model, batch, step, bf16) -> loss` replaces the
    training loss (evaluation stays next-token cross-entropy).
    Returns <out_dir>/final, or None when `time_limit_s` ran out first (call again to resume).
    """
    cfg = cfg if cfg is not None else TrainConfig()  # a fresh one per call: the fields are mutable
    out_dir = Path(out_dir)
    with files.exclusive(out_dir, "zoo training"):
        return _train(model_config, tokenizer, streams, out_dir, cfg, teacher, init, objective)


def _train(model_config, tokenizer, streams, out_dir: Path, cfg: TrainConfig, teacher, init=None,
           objective=None) -> Path | None:
    device, started = resolve_device(cfg.device), time.monotonic()
    for folder in ("best", "final"):
        files.recover_folder(out_dir / folder)  # a kill between a swap's two renames
    resume = newest_loadable(out_dir)
    torch.manual_seed(cfg.seed)
    if resume is not None:
        model, saved = resume
    elif init is not None:
        model = init.float()
    else:
        model = transformers.AutoModelForCausalLM.from_config(model_config(len(tokenizer)), dtype=torch.float32)
    model.to(device).train()
    if teacher is not None:
        teacher.to(device).eval()
    decay = [p for p in model.parameters() if p.dim() >= 2]  # no decay on norms
    rest = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                                   {"params": rest, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.95))
    state = {"step": 0, "history": [], "best_valid": math.inf, "best_step": None, "skipped": 0}
    if resume is not None:
        optimizer.load_state_dict(saved.pop("optimizer"))
        state.update(saved)

    bar = tqdm(total=cfg.steps, initial=state["step"], desc=out_dir.name, dynamic_ncols=True)
    while state["step"] < cfg.steps:
        step = state["step"]
        if cfg.time_limit_s is not None and time.monotonic() - started > cfg.time_limit_s:
            save_checkpoint(out_dir / "checkpoints" / f"step_{step:07d}", model, tokenizer, optimizer, state)
            bar.close()
            return None
        batch_size, block_size = cfg.window(step)
        batch = streams["train"].batch(batch_size, block_size, batch_generator(cfg, step))[0].to(device)  # [B, T]
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, cfg)
        loss = objective(model, batch, step, cfg.bf16) if objective else loss_on(model, batch, cfg.bf16, teacher)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip).item()
        step_if_finite(optimizer, math.isfinite(grad_norm) and math.isfinite(loss.item()), state, cfg.max_skipped, step)
        state["step"] = step = step + 1
        record = {"step": step, "loss": loss.item(), "grad_norm": grad_norm, "block": block_size}
        if step % cfg.eval_every == 0 or step == cfg.steps:
            for split in ("valid", "heldout"):
                blocks = streams[split].fixed(block_size, cfg.eval_tokens)[0]
                record[f"{split}_loss"] = eval_loss(model, blocks, batch_size, cfg.bf16)
            if cfg.select_best and cfg.selects(step) and record["valid_loss"] < state["best_valid"]:
                state["best_valid"], state["best_step"] = record["valid_loss"], step
                save_model(out_dir / "best", model, tokenizer)
        state["history"].append(record)
        bar.set_postfix({k: f"{v:.3f}" for k, v in record.items() if k not in ("step", "block", "grad_norm")})
        bar.update(1)
        if step % cfg.save_every == 0 or step == cfg.steps:
            save_checkpoint(out_dir / "checkpoints" / f"step_{step:07d}", model, tokenizer, optimizer, state)
            for old in checkpoints(out_dir)[: -cfg.keep_checkpoints]:  # only once the new one is whole
                shutil.rmtree(old)
    bar.close()
    final = out_dir / "final"
    if (out_dir / "best").is_dir():
        with files.replacing_folder(final) as temporary:
            shutil.copytree(out_dir / "best", temporary, dirs_exist_ok=True)
    else:
        save_model(final, model, tokenizer)
    return final
