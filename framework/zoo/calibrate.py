"""Post-hoc temperature calibration of a zoo model, folded into its output head.

A model trained for many passes over a small corpus is overconfident: its laws are sharper than
the text warrants (the 20-layer zoo target reaches a training loss far below its validation loss).
Dividing the logits by one temperature T, fitted on the validation documents (never the held-out
ones), is the standard remedy (Guo et al., 2017). T is folded into `lm_head` (W / T), so the
calibrated model is a plain checkpoint whose own laws are the calibrated ones: every consumer
(the verifier, the harness, plain sampling) sees one model.
A draft is fitted to its teacher instead: the T that minimises KL(teacher law || draft law).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
import transformers

from framework.core import files
from framework.data.token_data import TokenData

TEMPERATURES = tuple(round(1.0 + 0.05 * i, 2) for i in range(-2, 15))  # 0.90 .. 1.70


@torch.no_grad()
def loss_by_temperature(model, data: TokenData, block_size: int = 1024, teacher=None, batch_size: int = 4,
                        temperatures: tuple[float, ...] = TEMPERATURES) -> dict[float, float]:
    """Mean per-token loss at each temperature over non-overlapping windows of `data`:
    next-token cross-entropy, or with a teacher KL(teacher || model / T) at every position."""
    blocks = data.fixed(block_size, data.tokens)[0]  # [N, T]
    totals, count = torch.zeros(len(temperatures), dtype=torch.float64), 0
    for chunk in blocks.split(batch_size):
        logits = model(chunk).logits[:, :-1].float().flatten(0, 1)  # [B * (T-1), V]
        if teacher is not None:
            target_logp = teacher(chunk).logits[:, :-1].float().flatten(0, 1).log_softmax(-1)
        for i, t in enumerate(temperatures):
            logp = (logits / t).log_softmax(-1)
            if teacher is None:
                totals[i] += -logp.gather(1, chunk[:, 1:].reshape(-1, 1)).sum().double()
            else:
                totals[i] += (target_logp.exp() * (target_logp - logp)).sum().double()
        count += logits.shape[0]
    return {t: float(total) / count for t, total in zip(temperatures, totals)}


def fold_temperature(model, temperature: float) -> None:
    """Logits / T for every input: the output head's weight (and bias, if any) divided by T."""
    if not temperature > 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    head = model.get_output_embeddings()
    with torch.no_grad():
        head.weight.div_(temperature)
        if getattr(head, "bias", None) is not None:
            head.bias.div_(temperature)


def calibrate(model, stream: TokenData, block_size: int = 1024, teacher=None) -> dict:
    """Fits T on `stream`, folds it into `model` (in place); returns the fit for the record."""
    losses = loss_by_temperature(model, stream, block_size, teacher)
    best = min(losses, key=losses.get)
    if best in (TEMPERATURES[0], TEMPERATURES[-1]):
        raise ValueError(f"the best temperature {best} lies on the edge of the grid {TEMPERATURES}: widen it")
    fold_temperature(model, best)
    return {"temperature": best, "loss_at_1": losses[1.0], "loss": losses[best],
            "objective": "cross-entropy" if teacher is None else "KL to the teacher", "losses": losses}


def calibrate_checkpoint(folder: str | Path, stream: TokenData, block_size: int = 1024,
                         teacher_folder: str | Path | None = None) -> dict:
    """calibrate() on a saved checkpoint, rewritten (same dtype) with calibration.json beside it: the folder is
    swapped whole, so a kill leaves the checkpoint as it was or calibrated, never half written."""
    folder = Path(folder)
    saved_dtype = json.loads((folder / "config.json").read_text()).get("dtype") or "float32"  # as committed
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    teacher = None
    if teacher_folder is not None:
        teacher = transformers.AutoModelForCausalLM.from_pretrained(teacher_folder, dtype=torch.float32).eval()
    fit = calibrate(model, stream, block_size, teacher)
    model.to(getattr(torch, saved_dtype))
    with files.replacing_folder(folder) as temporary:
        shutil.copytree(folder, temporary, dirs_exist_ok=True)  # the tokenizer and the rest, then the new weights
        model.save_pretrained(temporary)
        files.write_json(temporary / "calibration.json", {**fit, "teacher": teacher_folder and str(teacher_folder)},
                         indent=1)
    return fit
