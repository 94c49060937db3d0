"""Loading a zoo model, or any local Hugging Face checkpoint, by path.

A path names a folder with config.json + weights (+ tokenizer.json). A relative path that does
not exist from the working folder is looked up in the embedded zoo (experiments/zoo, committed
with the repository), so `target.path=target` and `target.path=/data/my-llama` both work.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
import transformers

from framework.core import files
from framework.lm.sharding import check_placement, placement_kwargs
from framework.zoo.tokenizer import load_tokenizer

EMBEDDED = Path(__file__).resolve().parents[2] / "experiments" / "zoo"  # folders: target, draft


def candidate_folders(path: str | Path) -> tuple[Path, ...]:
    """Where a path may point: itself, and for a relative one, the embedded zoo's folder of that name."""
    given = Path(path).expanduser()
    return (given,) if given.is_absolute() else (given, EMBEDDED / given)


def find_folder(path: str | Path, marker: str) -> Path | None:
    """The first candidate folder holding the file `marker`, or None."""
    return next((c.resolve() for c in candidate_folders(path) if (c / marker).is_file()), None)


def resolve_checkpoint(path: str | Path) -> Path:
    found = find_folder(path, "config.json")
    if found is not None:
        return found
    candidates = candidate_folders(path)
    tried = " or ".join(str(c.resolve()) for c in candidates)
    zoo = sorted(p.name for p in EMBEDDED.iterdir() if (p / "config.json").is_file()) if EMBEDDED.is_dir() else []
    raise ValueError(f"no Hugging Face checkpoint (a folder with config.json) at {tried}; "
                     f"embedded zoo models: {zoo or 'none found'}")


def torch_dtype(name: str) -> torch.dtype:
    """torch.float32 for "float32"; a name that is no torch dtype is refused, named."""
    if not isinstance(getattr(torch, name, None), torch.dtype):
        raise ValueError(f"dtype {name!r} is not a torch dtype (e.g. float32, bfloat16, float64)")
    return getattr(torch, name)


def load_causal_lm(path: str | Path, dtype: str = "float32", device: str = "cpu", device_map=None, tp_plan=None,
                   offload_folder: str | None = None) -> transformers.PreTrainedModel:
    """AutoModelForCausalLM in eval mode; config.name_or_path keeps the folder (its tokenizer).
    device_map: placed by layers across this process's devices (accelerate: "auto", or {module: device}, "disk"
    offloads to offload_folder); tp_plan: "auto" shards it by heads across the torchrun processes
    (framework/lm/sharding.py). Neither: the whole model on `device`."""
    torch_dtype(dtype)  # before any file is read
    check_placement(device, device_map, tp_plan)
    folder = resolve_checkpoint(path)
    placed = placement_kwargs(transformers.AutoConfig.from_pretrained(str(folder)), device_map, tp_plan, offload_folder)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch_dtype(dtype), **placed)
    return (model if placed else model.to(device)).eval()


def export_checkpoint(source: str | Path, destination: str | Path, dtype: str = "bfloat16") -> Path:
    """A copy of a checkpoint (weights in `dtype`, config, tokenizer, calibration.json) for committing: bf16
    halves the size. The destination folder is swapped in whole."""
    model = load_causal_lm(source, dtype=dtype)
    destination = Path(destination)
    with files.replacing_folder(destination) as temporary:
        model.save_pretrained(str(temporary))
        load_tokenizer(model.config.name_or_path).save_pretrained(str(temporary))
        calibration = Path(model.config.name_or_path) / "calibration.json"
        if calibration.is_file():
            shutil.copy2(calibration, temporary / calibration.name)
    return destination
