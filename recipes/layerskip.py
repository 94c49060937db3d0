"""A LayerSkip-style fine-tune of a target (proposers/self_spec/training.py): an optional zoo model whose early
layers draft for early_exit, with what it costs in plain quality.

    python -m experiments.train training=zoo_layerskip                  # the zoo target, ~25 min on 2 cores
    python -m experiments.train training=zoo_layerskip training.target=/models/my-target

Starts from the target's weights (float32), trains on the target's own data (data=, its tokenizer) with the zoo
trainer (resumable under root/<run>), keeps the last model (the valid loss is recorded, not selected on), writes it
with the target's tokenizer to `export` (default root/<run>/final) and measurements.json beside it: the valid and
held-out next-token loss and each exit's top-1 agreement with the final layer, before and after.
"""

from __future__ import annotations

from pathlib import Path

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from framework.core import files
from framework.lm.layer_view import decoder_stack
from framework.lm.text import tokenizer_of
from framework.zoo.checkpoints import export_checkpoint, load_causal_lm
from framework.zoo.train import eval_loss, train
from recipes.common import training_data


@torch.no_grad()
def exit_agreement(model, blocks: torch.Tensor, batch_size: int) -> dict[int, float]:
    """Per exit E in 1..L-1: how often the first E layers' top-1 next token is the whole model's."""
    stack = decoder_stack(model)
    hits = {E: 0 for E in range(1, len(stack.layers))}
    for chunk in blocks.split(batch_size):
        out = model(input_ids=chunk, output_hidden_states=True, use_cache=False)
        final = out.logits.argmax(-1)  # [B, T]
        for E in hits:
            hits[E] += int((model.lm_head(stack.norm(out.hidden_states[E])).argmax(-1) == final).sum())
    return {E: h / blocks.numel() for E, h in hits.items()}


def quality(model, streams: dict, block_size: int, tokens: int, batch_size: int) -> dict:
    model.eval()
    blocks = streams["heldout"].fixed(block_size, tokens)[0]
    return {"valid_loss": eval_loss(model, streams["valid"].fixed(block_size, tokens)[0], batch_size, False),
            "heldout_loss": eval_loss(model, blocks, batch_size, False),
            "exit_agreement": exit_agreement(model, blocks, batch_size)}


def run(cfg: DictConfig) -> Path | None:
    exp = cfg.training
    if exp.num_threads is not None:
        torch.set_num_threads(exp.num_threads)
    root = Path(exp.root)
    target = load_causal_lm(exp.target, dtype="float32")
    settings = instantiate(exp.train)
    streams = training_data(cfg, target, root)
    size, tokens, batch = settings.block_size, exp.eval_tokens, settings.batch_size
    before = quality(target, streams, size, tokens, batch)
    final = train(lambda vocab: target.config, tokenizer_of(target), streams, root / exp.run, settings,
                  init=target.train(), objective=instantiate(exp.objective))
    if final is None:
        print("stopped at the time limit (call again to resume)")
        return None
    tuned = load_causal_lm(str(final), dtype="float32")
    after = quality(tuned, streams, size, tokens, batch)
    out = export_checkpoint(final, Path(exp.export)) if exp.export else final
    files.write_json(out / "measurements.json", {
        "before": before, "after": after, "target": str(exp.target), "steps": settings.steps,
        "objective": OmegaConf.to_container(exp.objective), "eval_tokens": tokens}, indent=1)
    for name, q in (("before", before), ("after", after)):
        best = max(q["exit_agreement"], key=q["exit_agreement"].get)
        print(f"{name}: valid {q['valid_loss']:.4f} held-out {q['heldout_loss']:.4f} nats/token; exit agreement "
              + " ".join(f"E{E}:{a:.2f}" for E, a in q["exit_agreement"].items() if E <= 10) + f" (best E{best})")
    print(f"written to {out}")
    return out
