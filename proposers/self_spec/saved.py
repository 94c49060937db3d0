"""Self-speculation choices saved beside the target (`self_speculation.json`), as a measured tree is saved beside a
head: `python -m experiments.search_layers` writes it from held-out prompts, and `auto` reads it from then on, so
every run on that target drafts with the same layers (a choice measured at run time depends on the machine's
timing). Keys are the proposer's setting, e.g. "exit/4" (early exit, depth 4) or "skip/4" (layer skipping)."""

from __future__ import annotations

from pathlib import Path

from framework.core import files
from framework.lm.layer_view import decoder_stack

CHOICE_FILE = "self_speculation.json"


def choice_file(model) -> Path | None:
    """The choice file beside the target's checkpoint, where the model was loaded from a folder that has one."""
    folder = getattr(getattr(model, "config", None), "name_or_path", "") or ""
    path = Path(folder) / CHOICE_FILE if folder else None
    return path if path is not None and path.is_file() else None


def saved_layers(model, key: str) -> tuple[int, ...] | None:
    """The layers saved for `key` beside this target, checked against it; None where nothing is saved for it."""
    path = choice_file(model)
    if path is None:
        return None
    saved = files.read_json(path)
    if key not in saved.get("choices", {}):
        return None
    total = len(decoder_stack(model).layers)
    if saved.get("num_layers") != total:
        raise ValueError(f"{path} was measured on a {saved.get('num_layers')}-layer target, this one has {total} "
                         "layers: rerun python -m experiments.search_layers for it")
    layers = tuple(saved["choices"][key]["layers"])
    if not layers or len(layers) >= total or any(not 0 <= i < total for i in layers):
        raise ValueError(f"{path}: {key} keeps layers {list(layers)}, "
                         f"not a proper subset of this target's 0..{total - 1}")
    return layers


def save_choices(folder: str | Path, num_layers: int, choices: dict, measured_on: dict) -> Path:
    """choices: key -> ViewScore (its fields kept: layers, agreement, cost, score)."""
    table = {key: {"layers": list(s.layers), "agreement": s.agreement, "cost": s.cost, "score": s.speed}
             for key, s in choices.items()}
    return files.write_json(Path(folder) / CHOICE_FILE, {"num_layers": num_layers, "choices": table,
                                                         "measured_on": measured_on}, indent=1)
