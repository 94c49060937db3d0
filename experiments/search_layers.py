"""The layers self-speculation drafts with, measured for a target and written beside it (`auto` reads them).

    python -m experiments.search_layers                                   # the zoo target
    python -m experiments.search_layers target.path=/models/Llama-3.1-8B workload=spec_bench workload.suite.source=Q

1. Prompts: the workload's last ones (each category's end in turn: not the first ones a comparison times), each
   continued greedily by the target (as search_tree measures heads): the text the view will meet.
2. Per depth: every exit E in 1..L-1 (early_exit) and a skip set grown one layer a round (layer_skip), scored by
   the view's top-1 agreement with the target on those continuations and its forward's measured cost
   (proposers/self_spec/choose.py).
3. self_speculation.json in `out` (default: the target's folder): proposer=early_exit / layer_skip with `auto`
   draft with the saved layers from then on, on every machine.
"""

from __future__ import annotations

from pathlib import Path

import hydra
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig

from framework.lm.layer_view import decoder_stack
from measurement.common import continuations, prompt_ids
from proposers.self_spec.choose import Calibration, best_exit, best_skip_set
from proposers.self_spec.saved import save_choices


def search(cfg: DictConfig) -> Path:
    s = cfg.search
    model = instantiate(cfg.target)
    out = cfg.out or model.config.name_or_path
    if not cfg.out and not Path(out or "").is_dir():
        raise ValueError(f"the target was not loaded from a folder ({out!r}): pass out=DIR for the file")
    torch.set_num_threads(s.threads)
    windows, length = continuations(model, prompt_ids(cfg, model, from_end=True), s.prompt_tokens, s.new_tokens)
    print(f"{len(windows)} prompts of {length} tokens, each continued by the target for {s.new_tokens} tokens")
    choices = {}
    for depth in s.depths:
        calibration = Calibration(model, windows, int(depth))
        choices[f"exit/{depth}"] = best_exit(calibration)
        choices[f"skip/{depth}"] = best_skip_set(calibration)
    for key, score in choices.items():
        print(f"  {key}: {score.describe()}")
    measured_on = {"prompts": len(windows), "prompt_tokens": length, "new_tokens": s.new_tokens,
                   "threads": s.threads, "workload": str(cfg.workload.suite.get("_target_", ""))}
    written = save_choices(out, len(decoder_stack(model).layers), choices, measured_on)
    print(f"wrote {written}: `auto` self-speculation on this target reads it from now on")
    return written


@hydra.main(config_path="../conf", config_name="search_layers", version_base="1.3")
def main(cfg: DictConfig) -> None:
    search(cfg)


if __name__ == "__main__":
    main()
