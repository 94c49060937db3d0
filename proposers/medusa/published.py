"""The published Medusa layouts (FasterDecoding/Medusa), read and written.

- Medusa-1: config.json (medusa_num_heads, medusa_num_layers, base_model_name_or_path) beside
  medusa_lm_head.pt or .safetensors with keys {k}.{j}.linear.{weight,bias} (block j of head k)
  and {k}.{L}.weight (its lm_head). The uploaded configs understate the head count (Medusa's own
  loader overrides them), so the count comes from the weights and a disagreement is reported.
  With L > 1 the published code repeats one block instance: its L copies in the file are equal,
  and applying them in turn is applying that block L times.
- "version 2" (TGI's): config "version": "2", the blocks only; logits through the target's lm_head.
- Medusa-2: a full model folder (the target itself, fine-tuned) whose weights hold the heads as
  medusa_head.{k}.*; the same folder is the target and the heads' source.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import torch

from framework.core import files
from proposers.common.head_files import read_weights, weight_files
from proposers.medusa.heads import WRITERS, MedusaConfig, MedusaHeads

HEAD_FILES = ("medusa_lm_head.safetensors", "medusa_lm_head.pt")
KEY = re.compile(r"(\d+)\.(\d+)\.(linear\.weight|linear\.bias|weight)$")


def heads_from_state(state: dict[str, torch.Tensor], config: dict, where: Path) -> MedusaHeads:
    """Published keys ({k}.{j}.linear.*, {k}.{L}.weight) -> our heads; sizes and count from the weights."""
    parsed = {}
    for key, value in state.items():
        match = KEY.fullmatch(key)
        if match is None:
            raise ValueError(f"{where}: {key!r} is not a Medusa head key "
                             "({k}.{j}.linear.weight/bias, {k}.{L}.weight)")
        parsed[int(match[1]), int(match[2]), match[3]] = value
    count = len({k for k, _, _ in parsed})
    layers = len({j for _, j, kind in parsed if kind.startswith("linear")})
    outputs = {k: value for (k, j, kind), value in parsed.items() if kind == "weight"}
    own = bool(outputs)
    if str(config.get("version", "1")) == "2" and own:
        raise ValueError(f"{where}: a version 2 config, but the file holds per-head lm_heads")
    stated = config.get("medusa_num_heads")
    if stated is not None and stated != count:
        warnings.warn(f"{where}: config says {stated} Medusa heads, the weights hold {count}; using {count}",
                      stacklevel=3)
    block = next(v for (k, j, kind), v in parsed.items() if kind == "linear.weight")
    hidden = block.shape[1]
    vocab = next(iter(outputs.values())).shape[0] if own else None
    heads = MedusaHeads(MedusaConfig(hidden, vocab, count, layers, own_lm_heads=own))
    ours = {}
    for (k, j, kind), value in parsed.items():
        ours[f"lm_heads.{k}.weight" if kind == "weight" else f"blocks.{k}.{j}.{kind}"] = value.float()
    missing, unknown = sorted(set(heads.state_dict()) - set(ours)), sorted(set(ours) - set(heads.state_dict()))
    if missing or unknown:
        raise ValueError(f"{where}: an incomplete Medusa head layout (missing {missing[:6]}, unexpected {unknown[:6]})")
    heads.load_state_dict(ours)
    return heads.eval()


def read_medusa1(folder: Path, config: dict) -> MedusaHeads:
    """Medusa-1 or "version 2" heads: config.json beside medusa_lm_head.safetensors / .pt."""
    return heads_from_state(read_weights(weight_files(folder, HEAD_FILES)), config, folder)


def read_medusa2(folder: Path, config: dict) -> MedusaHeads:
    """The heads inside a Medusa-2 full model folder (medusa_head.* beside the model's own weights)."""
    prefix = "medusa_head."
    state = read_weights(weight_files(folder), lambda key: key.startswith(prefix))
    if not state:
        raise ValueError(f"{folder}: config.json names Medusa heads, but no medusa_head.* weights are in the model")
    return heads_from_state({k[len(prefix):]: v for k, v in state.items()}, config, folder)


def write_medusa(heads: MedusaHeads, folder, dtype: torch.dtype = torch.bfloat16) -> Path:
    """FasterDecoding's Medusa-1 layout (version 2 for heads through the target's lm_head)."""
    from safetensors.torch import save_file

    c = heads.config
    state = {}
    for k in range(c.num_heads):
        for j in range(c.num_blocks):
            for kind in ("weight", "bias"):
                state[f"{k}.{j}.linear.{kind}"] = getattr(heads.blocks[k][j].linear, kind)
        if c.own_lm_heads:
            state[f"{k}.{c.num_blocks}.weight"] = heads.lm_heads[k].weight
    folder = Path(folder)
    with files.replacing(folder / HEAD_FILES[0]) as temporary:
        save_file({k: v.detach().to(dtype).contiguous().cpu() for k, v in state.items()}, temporary)
    config = {"medusa_num_heads": c.num_heads, "medusa_num_layers": c.num_blocks, "base_model_name_or_path": None}
    files.write_json(folder / "config.json", config if c.own_lm_heads else {**config, "version": "2"})
    return folder


WRITERS.update(medusa=write_medusa)
