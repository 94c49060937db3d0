"""Trained heads on disk: safetensors weights beside a JSON config that records the target's sizes.

Shared by every head family (Medusa, EAGLE), so one folder layout and one error for a missing
head serve them all. A relative folder missing here is looked up in the embedded zoo.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch

from framework.core import files
from framework.zoo.checkpoints import find_folder


def head_folder(path: str | Path, config_file: str) -> Path:
    """The folder holding a head: the path, or for a relative one missing here, the embedded zoo's."""

    return find_folder(path, config_file) or Path(path).expanduser()


def save_head(module: torch.nn.Module, folder: str | Path, fields: dict, config_file: str, weights_file: str,
              dtype: torch.dtype = torch.bfloat16) -> Path:
    from safetensors.torch import save_file

    folder = Path(folder)
    with files.replacing(folder / weights_file) as temporary:  # each file whole; the config, read first, last
        save_file(stored_tensors(module, dtype), temporary)
    files.write_json(folder / config_file, {**fields, WEIGHTS_SHA256: file_sha256(folder / weights_file)})
    return folder


WEIGHTS_SHA256 = "weights_sha256"  # the weights file's checksum, in the config written after it


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def stored_tensors(module: torch.nn.Module, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """The state dict as written: floats in `dtype`, integer and boolean maps (d2t, t2d) as they are."""
    return {k: v.detach().to(dtype if v.is_floating_point() else v.dtype).contiguous().cpu()
            for k, v in module.state_dict().items()}


def renamed(state: dict[str, torch.Tensor], old: str, new: str) -> dict[str, torch.Tensor]:
    """The same tensors, keys starting with `old` starting with `new` instead (a layout's module names)."""
    return {(new + k[len(old):] if k.startswith(old) else k): v for k, v in state.items()}


def read_head(
    path: str | Path, config_file: str, weights_file: str, what: str, command: str
) -> tuple[Path, dict, dict]:
    """(folder, config fields, state dict); a missing head names the path and the training command."""
    from safetensors.torch import load_file

    folder = head_folder(path, config_file)
    if not (folder / config_file).exists() or not (folder / weights_file).exists():
        raise FileNotFoundError(f"no {what} at {folder} (expected {config_file} and {weights_file}); "
                                f"train it with `{command}`")
    fields = files.read_json(folder / config_file)
    stated = fields.pop(WEIGHTS_SHA256, None)  # heads saved before checksums were recorded have none
    if stated is not None and file_sha256(folder / weights_file) != stated:
        raise ValueError(f"{folder / weights_file} is not the file its config was written with (checksum differs): "
                         "a torn copy or altered weights; copy the head again, or retrain it")
    return folder, fields, load_file(folder / weights_file)


WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json",
                "pytorch_model.bin.index.json")


def weight_files(folder: Path, names: tuple[str, ...] = WEIGHT_FILES) -> list[Path]:
    """The weight files of a published folder: the first of `names` present, its shards for an index."""
    for name in names:
        path = folder / name
        if path.is_file():
            if name.endswith(".index.json"):
                shards = sorted(set(files.read_json(path)["weight_map"].values()))
                return [folder / shard for shard in shards]
            return [path]
    raise FileNotFoundError(f"no weights in {folder} (looked for {', '.join(names)})")


def safetensors_keys(files: list[Path]) -> list[str]:
    """The tensor names the safetensors files among `files` hold, read from their headers (no tensor is read)."""
    from safetensors import safe_open

    keys = []
    for path in files:
        if path.suffix == ".safetensors":
            with safe_open(str(path), framework="pt") as f:
                keys += list(f.keys())
    return keys


def read_weights(files: list[Path], keep=lambda key: True) -> dict[str, torch.Tensor]:
    """The tensors whose key `keep` accepts, from safetensors or torch pickles (weights only, never code);
    a full model's other tensors are not read."""
    from safetensors import safe_open

    state = {}
    for path in files:
        if path.suffix == ".safetensors":
            with safe_open(str(path), framework="pt") as f:
                state.update({k: f.get_tensor(k) for k in f.keys() if keep(k)})
        else:
            state.update({k: v for k, v in torch.load(path, map_location="cpu", weights_only=True).items() if keep(k)})
    return state
