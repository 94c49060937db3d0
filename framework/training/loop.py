"""The one training loop every drafter shares: data-parallel through accelerate, resumable, exact across process counts.

An `Objective` is an nn.Module holding what trains (a head set, a draft model) and reading a frozen
target; `forward(ids, mask, rows, generator)` returns per loss part the sum over its rows and the
count of positions summed. The loop turns those into the mean over the *global* batch:

    loss = world x sum_p weight_p x sums_p / (counts_p summed over every process)

DDP averages gradients over the processes, so every process's gradient is that of the one-process
loss on the whole batch: `accelerate launch --num_processes N` (or `torchrun`) follows the curve one
process follows with the same global batch, up to float summation order. Batches are drawn from a
generator seeded by (seed, step), the same on every process, and process r keeps rows r, r + N, ...
(`rows`, so that a drafter drawing noise draws it for the whole batch and keeps its rows).

Resumable: <out>/checkpoint.pt (the trained module, optimiser, log, step) is written by the main
process only, whole, the previous kept (framework/core/files.py); a later call continues the same
curve. `time_limit_s` stops every process at the same step (the main process decides).
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

import torch
from torch import nn
from tqdm.auto import tqdm

from framework.core import files
from framework.data.token_data import TokenData


@dataclass
class LoopConfig:
    steps: int = 1000
    batch_size: int = 8  # global: split over the processes
    block_size: int = 128
    lr: float = 1e-3
    min_lr_ratio: float = 0.0  # cosine decays to lr x min_lr_ratio
    warmup: int = 50
    weight_decay: float = 0.0
    grad_clip: float | None = None  # max global gradient norm (None: no clipping)
    eval_every: int = 200
    eval_tokens: int = 8192
    save_every: int = 25
    device: str = "auto"  # "auto": CUDA when there is one (one device per process under accelerate)
    time_limit_s: float | None = None  # stop (with a checkpoint) after this long; call again to resume
    max_skipped: int = 50  # steps with a non-finite loss or gradient skipped (never applied) before giving up
    seed: int = 0

    def __post_init__(self) -> None:
        """Before any model loads: a run of no steps would export the untrained initial weights."""
        for name, least in (("steps", 1), ("batch_size", 1), ("block_size", 2), ("eval_every", 1), ("eval_tokens", 1),
                            ("save_every", 1), ("warmup", 0), ("max_skipped", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"train.{name} must be an integer >= {least}, got {value!r}")
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"train.lr must be a positive number, got {self.lr!r}")


class Objective(Protocol):
    """An nn.Module: what trains, and how its losses are read off a batch."""

    part_names: list[str]  # one per loss part (e.g. "kl/depth0")
    part_weights: torch.Tensor  # [P]

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, rows: torch.Tensor,
                generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """ids, mask [b, T] (this process's rows of the batch), rows [b] (their indices in it) ->
        (sums [P] with gradient, counts [P])."""
        ...

    def trained(self) -> nn.Module:
        """The module whose state is saved and resumed (the heads, the draft model), not the target."""
        ...


def lr_at(step: int, cfg) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = min(1.0, (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup))
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def accelerator_for(device: str):
    """One accelerate Accelerator per process (the launcher's process group, or a single process)."""
    from accelerate import Accelerator  # late: importing accelerate costs a second that decoding never pays

    return Accelerator(cpu=resolve_device(device).type == "cpu")


def process_state(device: str = "auto"):
    """accelerate's view of this process among those a launcher started (one, when none did)."""
    from accelerate import PartialState

    return PartialState(cpu=resolve_device(device).type == "cpu")


@contextmanager
def main_process_first(device: str = "auto") -> Iterator[None]:
    """The main process runs the block first, then the others (which then read what it cached): data
    made by several processes at once would race for the same files (datasets' cache, token data)."""
    with process_state(device).main_process_first():
        yield


def is_main_process(device: str = "auto") -> bool:
    """True in the one process (of those a launcher started) that measures and writes what follows training."""
    return process_state(device).is_main_process


def batch_generator(cfg: LoopConfig, step: int) -> torch.Generator:
    return torch.Generator().manual_seed(cfg.seed * 1_000_003 + step)


def step_if_finite(optimizer, finite: bool, state: dict, max_skipped: int, step: int) -> None:
    """The optimiser's step when the loss and gradient are finite (a non-finite gradient would turn every
    weight into NaN), else a skipped step counted in state["skipped"]; past `max_skipped` the run gives up."""
    if finite:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    state["skipped"] += not finite
    if state["skipped"] > max_skipped:
        raise FloatingPointError(f"{state['skipped']} steps had a non-finite loss or gradient (last at step {step})")


def train(objective: nn.Module, data: TokenData, out_dir: str | Path, cfg: LoopConfig,
          evaluate: Callable[[nn.Module], dict] | None = None, name: str = "training") -> bool:
    """Trains (or resumes) `objective` on `data`; True when every step is done, False when time_limit_s ran out.
    `evaluate(trained)` runs on the main process every eval_every steps; its dict lands in the log."""
    out_dir = Path(out_dir)
    context = getattr(getattr(getattr(objective, "target", None), "config", None), "max_position_embeddings", None)
    if isinstance(context, int) and cfg.block_size > context:
        raise ValueError(f"train.block_size {cfg.block_size} is past the target's context of {context} positions: "
                         "it would train on positions the target never saw")
    acc = accelerator_for(cfg.device)
    if cfg.batch_size % acc.num_processes:
        raise ValueError(f"batch_size {cfg.batch_size} does not split over {acc.num_processes} processes")
    trained = objective.trained()
    optimizer = torch.optim.AdamW([p for p in trained.parameters() if p.requires_grad], lr=cfg.lr,
                                  weight_decay=cfg.weight_decay)
    with files.exclusive(out_dir, name) if acc.is_main_process else contextlib.nullcontext():
        return _train(objective, data, out_dir, cfg, evaluate, name, acc, trained, optimizer)


def target_identity(objective: nn.Module) -> dict | None:
    """What a root was trained against: the frozen target's checkpoint, configuration and embedding (a target of the
    same vocabulary size but other weights differs here), or None for an objective without one."""
    target = getattr(objective, "target", None)
    if target is None or not hasattr(target, "config"):
        return None
    embedding = target.get_input_embeddings().weight.detach()
    return {"name_or_path": str(getattr(target.config, "name_or_path", "")),
            "config": hashlib.sha256(target.config.to_json_string(use_diff=False).encode()).hexdigest()[:16],
            "embedding": [float(embedding.double().sum()), float(embedding.double().abs().sum())]}


def same_target(saved: dict | None, current: dict | None) -> bool:
    if saved is None or current is None:
        return True  # a checkpoint from before identities were recorded
    close = all(abs(a - b) <= 1e-6 * max(1.0, abs(b)) for a, b in zip(saved["embedding"], current["embedding"]))
    return saved["config"] == current["config"] and close


def _train(objective, data, out_dir: Path, cfg: LoopConfig, evaluate, name: str, acc, trained, optimizer) -> bool:
    world, rank = acc.num_processes, acc.process_index
    ckpt = out_dir / "checkpoint.pt"
    state = {"step": 0, "log": [], "skipped": 0}
    identity = target_identity(objective)
    saved = files.load_torch(ckpt, f"{name} checkpoint")  # the newest that loads: the file, then its previous version
    if saved is not None:
        if not same_target(saved.get("target"), identity):
            raise ValueError(f"{ckpt} was trained against another target ({saved['target']['name_or_path']}, config "
                             f"{saved['target']['config']}) than this one ({identity['name_or_path']}, config "
                             f"{identity['config']}): resuming would mix them; give this run another root or run")
        trained.load_state_dict(saved["trained"])
        optimizer.load_state_dict(saved["optimizer"])
        state = {k: saved[k] for k in state}
    objective.to(acc.device)
    model, optimizer = acc.prepare(objective, optimizer)  # DDP when there are several processes
    weights = objective.part_weights.to(acc.device)
    started = time.monotonic()

    def save() -> None:
        if acc.is_main_process:
            out_dir.mkdir(parents=True, exist_ok=True)
            files.save_torch({**state, "trained": trained.state_dict(), "optimizer": optimizer.state_dict(),
                              "part_names": objective.part_names, "config": asdict(cfg), "processes": world,
                              "target": identity}, ckpt,
                             keep_previous=True)
        acc.wait_for_everyone()

    bar = tqdm(total=cfg.steps, initial=state["step"], desc=name, disable=not acc.is_main_process, dynamic_ncols=True)
    while state["step"] < cfg.steps:
        step = state["step"]
        generator = batch_generator(cfg, step)
        ids, mask = data.batch(cfg.batch_size, cfg.block_size, generator)  # [B, T]: the global batch, on every process
        rows = torch.arange(rank, cfg.batch_size, world)
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, cfg)
        sums, counts = model(ids[rows].to(acc.device), mask[rows].to(acc.device), rows, generator)
        counts = acc.reduce(counts.detach().float(), "sum").clamp_min(1)  # [P]: positions over the global batch
        loss = world * (weights * sums / counts).sum()
        acc.backward(loss)
        grad_norm = acc.clip_grad_norm_(trained.parameters(), cfg.grad_clip if cfg.grad_clip else math.inf)
        parts = acc.reduce(sums.detach(), "sum") / counts  # [P]: the global mean per part
        step_if_finite(optimizer, bool(torch.isfinite(parts).all()) and math.isfinite(float(grad_norm)), state,
                       cfg.max_skipped, step)
        state["step"] = step = step + 1
        row = {"step": step, "loss": float((weights * parts).sum()), "parts": parts.tolist(),
               "grad_norm": float(grad_norm)}  # the global gradient's: Adam hides a mis-scaled one, this does not
        if evaluate is not None and (step % cfg.eval_every == 0 or step == cfg.steps):
            if acc.is_main_process:
                row.update(evaluate(trained))
                tqdm.write(f"step {step}: " + ", ".join(f"{k} {v}" for k, v in row.items()
                                                         if k not in ("step", "parts", "grad_norm")))
            acc.wait_for_everyone()
        state["log"].append(row)
        bar.set_postfix(loss=f"{row['loss']:.4f}")
        bar.update(1)
        out_of_time = torch.tensor(float(cfg.time_limit_s is not None
                                         and time.monotonic() - started > cfg.time_limit_s))
        out_of_time = bool(acc.reduce(out_of_time.to(acc.device), "sum") > 0)  # every process stops at the same step
        if step % cfg.save_every == 0 or step == cfg.steps or out_of_time:
            save()
        if out_of_time and step < cfg.steps:
            bar.close()
            return False
    bar.close()
    return True
