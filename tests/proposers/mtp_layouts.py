"""Tiny target checkpoints that carry MTP modules in the published layouts (helpers for the MTP tests, not a test
module).

Each writer saves a tiny random target with save_pretrained (config.json + model.safetensors), then adds seeded-random
MTP tensors under the layout's own keys and states the module count in config.json as the family does:

| writer | target | keys of module k | config |
|---|---|---|---|
| deepseek_folder | deepseek_v3 / glm4_moe | `model.layers.{N+k}.`: enorm, hnorm, eh_proj [H, 2H], shared_head.norm, shared_head.head (a copy of lm_head), embed_tokens (DeepSeek-V3 only: a copy of the embedding), and a decoder block's keys as layer N+k would have them (experts one key per expert, as save_pretrained writes them) | `num_nextn_predict_layers` |
| qwen3_next_style_folder | qwen3 | `mtp.`: fc [H, 2H], pre_fc_norm_embedding, pre_fc_norm_hidden, layers.0.* (a qwen3 decoder layer), norm (one module) | `mtp_num_hidden_layers` |
| mimo_folder | qwen2 | `model.mtp_layers.{k}.`: token_layernorm, hidden_layernorm, input_proj [H, 2H], a qwen2 decoder layer's keys (q/k/v biases), final_layernorm | `num_nextn_predict_layers` |

The main model in the folder is exactly `tiny_random_model(arch, seed=seed, **sizes)` (init_std 0.3 unless given): the
MTP tensors come from another seed, and loading the folder with AutoModelForCausalLM ignores them. Norms are
1 + 0.1 randn and input projections 0.2 randn, so that drafts are not degenerate. `transformers_mtp_model` loads a
deepseek_folder so that transformers' own `generate(..., use_mtp=True)` finds its modules.
"""  # noqa: E501

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import torch
import transformers
from safetensors.torch import load_file, save_file

from framework.lm.models import tiny_random_model

DEFAULT_INIT_STD = 0.3  # as the tiny_* targets: peaked next-token laws


def target_and_block_donor(folder: Path, arch: str, seed: int, donor_layers: int, sizes: dict):
    """Save the target (tiny_random_model(arch, seed, **sizes)) into `folder`; return it, its saved state, and the saved
    state of a donor of the same sizes with `donor_layers` layers (seed + 1) whose layers become MTP blocks."""
    sizes = {"init_std": DEFAULT_INIT_STD, **sizes}
    target = tiny_random_model(arch, seed=seed, **sizes)
    donor = tiny_random_model(arch, seed=seed + 1, **{**sizes, "num_layers": donor_layers})
    with tempfile.TemporaryDirectory() as scratch:  # the donor's keys as save_pretrained writes them (experts unfused)
        donor.save_pretrained(scratch)
        donor_state = load_file(str(Path(scratch) / "model.safetensors"))
    folder.mkdir(parents=True, exist_ok=True)
    target.save_pretrained(folder)
    return target, load_file(str(folder / "model.safetensors")), donor_state


def finish(folder: Path, state: dict, added: dict, config_updates: dict) -> None:
    save_file({k: v.contiguous() for k, v in {**state, **added}.items()}, str(folder / "model.safetensors"),
              metadata={"format": "pt"})
    config = json.loads((folder / "config.json").read_text())
    config.update(config_updates)
    (folder / "config.json").write_text(json.dumps(config, indent=2))


def norm(size: int, generator: torch.Generator) -> torch.Tensor:
    return 1 + 0.1 * torch.randn(size, generator=generator)


def projection(size: int, generator: torch.Generator) -> torch.Tensor:
    return 0.2 * torch.randn(size, 2 * size, generator=generator)  # [H, 2H]: [embedding ; hidden] -> H


def deepseek_folder(folder, arch: str = "deepseek_v3", num_modules: int = 1, seed: int = 0,
                    **sizes) -> tuple[Path, dict]:
    """DeepSeek-V3 / GLM-4.5's layout: module k appended as decoder layer N+k of a target of N layers."""
    if arch not in ("deepseek_v3", "glm4_moe"):
        raise ValueError(f"the DeepSeek layout is written for deepseek_v3 or glm4_moe, not {arch!r}")
    folder = Path(folder)
    N = sizes.get("num_layers", 2)
    target, state, donor = target_and_block_donor(folder, arch, seed, N + num_modules, sizes)
    H = target.config.hidden_size
    g = torch.Generator().manual_seed(seed + 2)
    added, prefixes = {}, [f"model.layers.{N + k}." for k in range(num_modules)]
    for prefix in prefixes:
        added |= {k: v for k, v in donor.items() if k.startswith(prefix)}  # the block, as a layer N+k is stored
        added[prefix + "enorm.weight"] = norm(H, g)
        added[prefix + "hnorm.weight"] = norm(H, g)
        added[prefix + "eh_proj.weight"] = projection(H, g)
        added[prefix + "shared_head.norm.weight"] = norm(H, g)
        added[prefix + "shared_head.head.weight"] = state["lm_head.weight"].clone()
        if arch == "deepseek_v3":
            added[prefix + "embed_tokens.weight"] = state["model.embed_tokens.weight"].clone()
    finish(folder, state, added, {"num_hidden_layers": N, "num_nextn_predict_layers": num_modules})
    return folder, {"layout": "DeepSeek-V3" if arch == "deepseek_v3" else "GLM-4.5", "arch": arch, "N": N,
                    "num_modules": num_modules, "prefixes": prefixes, "keys": sorted(added),
                    "config": {"num_nextn_predict_layers": num_modules}}


def qwen3_next_style_folder(folder, seed: int = 0, **sizes) -> tuple[Path, dict]:
    """Qwen3-Next / Qwen3.5's layout (one module under `mtp.`) on a plain tiny qwen3 target of matching sizes."""
    folder = Path(folder)
    target, state, donor = target_and_block_donor(folder, "qwen3", seed, 1, sizes)
    H = target.config.hidden_size
    g = torch.Generator().manual_seed(seed + 2)
    added = {"mtp." + k.removeprefix("model."): v for k, v in donor.items() if k.startswith("model.layers.0.")}
    added |= {"mtp.fc.weight": projection(H, g), "mtp.pre_fc_norm_embedding.weight": norm(H, g),
              "mtp.pre_fc_norm_hidden.weight": norm(H, g), "mtp.norm.weight": norm(H, g)}
    finish(folder, state, added, {"mtp_num_hidden_layers": 1})
    return folder, {"layout": "Qwen3-Next", "arch": "qwen3", "N": target.config.num_hidden_layers, "num_modules": 1,
                    "prefixes": ["mtp."], "keys": sorted(added), "config": {"mtp_num_hidden_layers": 1}}


def mimo_folder(folder, seed: int = 0, num_modules: int = 1, **sizes) -> tuple[Path, dict]:
    """MiMo-7B's layout (`model.mtp_layers.{k}.`) on a tiny qwen2 target."""
    folder = Path(folder)
    target, state, donor = target_and_block_donor(folder, "qwen2", seed, num_modules, sizes)
    H = target.config.hidden_size
    g = torch.Generator().manual_seed(seed + 2)
    added, prefixes = {}, [f"model.mtp_layers.{k}." for k in range(num_modules)]
    for k, prefix in enumerate(prefixes):
        added |= {prefix + key.removeprefix(f"model.layers.{k}."): v for key, v in donor.items()
                  if key.startswith(f"model.layers.{k}.")}
        added[prefix + "token_layernorm.weight"] = norm(H, g)
        added[prefix + "hidden_layernorm.weight"] = norm(H, g)
        added[prefix + "input_proj.weight"] = projection(H, g)
        added[prefix + "final_layernorm.weight"] = norm(H, g)
    finish(folder, state, added, {"num_nextn_predict_layers": num_modules})
    return folder, {"layout": "MiMo", "arch": "qwen2", "N": target.config.num_hidden_layers,
                    "num_modules": num_modules, "prefixes": prefixes, "keys": sorted(added),
                    "config": {"num_nextn_predict_layers": num_modules}}


def transformers_mtp_model(folder, **kwargs):
    """A deepseek_folder loaded for transformers' own `generate(..., use_mtp=True)`: its MtpModel.from_pretrained takes
    the MTP keys' pattern from the main model's _keys_to_ignore_on_load_unexpected (upstream: layer 61, 46 or 92),
    pointed here at this folder's layers N .. N+num_modules-1."""
    config = json.loads((Path(folder) / "config.json").read_text())
    N, count = config["num_hidden_layers"], config["num_nextn_predict_layers"]
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, **kwargs).eval()
    model._keys_to_ignore_on_load_unexpected = [rf"model\.layers\.{N + k}\." for k in range(count)]
    return model
