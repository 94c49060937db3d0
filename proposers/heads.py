"""`load_head(path)`: a Medusa or EAGLE head or a DFlash drafter from a folder in any layout we read, told by its files.

| layout | files | reader |
|---|---|---|
| ours, EAGLE-1/2/3 | eagle_config.json, eagle_head.safetensors | EagleHead.load |
| ours, Medusa | medusa_config.json, medusa_heads.safetensors | MedusaHeads.load |
| speculators (vLLM) | config.json with speculators_config, model.safetensors | eagle/speculators.py |
| Medusa-1 / version 2 | config.json with medusa_num_heads, medusa_lm_head.{safetensors,pt} | medusa/published.py |
| Medusa-2 | a full model folder: config.json with medusa_num_heads, medusa_head.* weights | medusa/published.py |
| EAGLE-3 (SafeAILab, SpecForge) | config.json with draft_vocab_size or an Eagle3 architecture | eagle/published.py |
| EAGLE-1/2 (SafeAILab) | config.json, pytorch_model.bin or model.safetensors with fc.* and layers.0.* | eagle/published.py |
| DFlash (z-lab; ours too) | config.json with dflash_config, model.safetensors | parallel/dflash.py |

A relative name missing here is looked up in the embedded zoo. Nothing is fetched from a hub.
"""  # noqa: E501

from __future__ import annotations

from pathlib import Path

import torch

from framework.core import files
from framework.zoo.checkpoints import find_folder, torch_dtype
from proposers.common.head_files import WEIGHT_FILES
from proposers.eagle import published as eagle_published
from proposers.eagle import speculators
from proposers.eagle.head import CONFIG_FILE as EAGLE_CONFIG
from proposers.eagle.head import TREE_FILE as EAGLE_TREE
from proposers.eagle.head import EagleHead
from proposers.medusa import published as medusa_published
from proposers.medusa.heads import CONFIG_FILE as MEDUSA_CONFIG
from proposers.medusa.heads import TREE_FILE as MEDUSA_TREE
from proposers.medusa.heads import MedusaHeads
from proposers.parallel import dflash

LOOKED_FOR = (EAGLE_CONFIG, MEDUSA_CONFIG,
              "config.json (with " + ", ".join(medusa_published.HEAD_FILES + WEIGHT_FILES) + ")")


def layout(folder: Path) -> tuple[str, dict]:
    """The name of the folder's layout (the table above) and its config.json (empty for ours)."""
    if (folder / EAGLE_CONFIG).is_file():
        return "speculum-eagle", {}
    if (folder / MEDUSA_CONFIG).is_file():
        return "speculum-medusa", {}
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"no head at {folder}: looked for {', '.join(LOOKED_FOR)}")
    config = files.read_json(folder / "config.json")
    if "speculators_config" in config:
        return "speculators", config
    if "dflash_config" in config:
        return "dflash", config
    if "medusa_num_heads" in config:
        return "medusa" if any((folder / f).is_file() for f in medusa_published.HEAD_FILES) else "medusa2", config
    if "draft_vocab_size" in config or any("Eagle3" in a for a in config.get("architectures") or ()):
        return "eagle3", config
    return "eagle", config


def load_head(path: str | Path, dtype: str | torch.dtype = "float32", layer_ids: str | None = None):
    """The head at `path` (EagleHead, MedusaHeads or DFlashDrafter), in `dtype`. layer_ids: which stack wrote an EAGLE-3
    config's eagle_aux_hidden_state_layer_ids ("sglang"/"specforge": output of layer id; "vllm"/
    "speculators": before layer id); by default the layout's own (SafeAILab/SpecForge: sglang)."""
    dtype = torch_dtype(dtype) if isinstance(dtype, str) else dtype
    found = (find_folder(path, marker) for marker in (EAGLE_CONFIG, MEDUSA_CONFIG, "config.json"))
    folder = next((f for f in found if f is not None), Path(path).expanduser())
    if not folder.is_dir():
        raise FileNotFoundError(f"no head at {Path(path).expanduser()}: the folder does not exist "
                                f"(looked for {', '.join(LOOKED_FOR)})")
    kind, config = layout(folder)
    readers = {
        "speculum-eagle": lambda: EagleHead.load(folder),
        "speculum-medusa": lambda: MedusaHeads.load(folder),
        "speculators": lambda: speculators.read(folder, config, layer_ids or "speculators"),
        "medusa": lambda: medusa_published.read_medusa1(folder, config),
        "medusa2": lambda: medusa_published.read_medusa2(folder, config),
        "eagle3": lambda: eagle_published.read_eagle3(folder, config, layer_ids or "sglang"),
        "eagle": lambda: eagle_published.read_eagle1(folder, config),
        "dflash": lambda: dflash.read(folder, config),
    }
    head = readers[kind]().to(dtype).eval()
    measured = folder / (MEDUSA_TREE if isinstance(head, MedusaHeads) else EAGLE_TREE)
    if isinstance(head, (EagleHead, MedusaHeads)) and not head.searched and measured.is_file():
        head.searched = files.read_json(measured)  # a published head's tree, measured by experiments.search_tree
    return head
