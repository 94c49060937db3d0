"""MTP modules read from the published layouts, by their files; ours written in the speculators MTP layout.

| layout | where | keys of module k (-> ours) |
|---|---|---|
| DeepSeek-V3/R1, GLM-4.5+ | the target's folder, `num_nextn_predict_layers` | `model.layers.{N+k}.`: enorm -> token_norm, hnorm -> hidden_norm, eh_proj -> input_proj, shared_head.norm -> final_norm, the block's keys -> block (shared_head.head and embed_tokens, copies of the target's, are not read) |
| Qwen3-Next, Qwen3.5 | the target's folder | `mtp.`: pre_fc_norm_embedding -> token_norm, pre_fc_norm_hidden -> hidden_norm, fc -> input_proj, layers.0 -> block, norm -> final_norm (one module) |
| MiMo | the target's folder, `num_nextn_predict_layers` | `model.mtp_layers.{k}.`: token_layernorm, hidden_layernorm, input_proj, final_layernorm, the block's keys |
| speculators MTP (ours) | config.json with `speculators_model_type: mtp` and `transformer_layer_config` | `mtp_layers.{k}.` as MiMo's |

Only the MTP tensors are read (a full model's other tensors never leave the disk; shards and torch pickles as
the other published readers read them, proposers/common/head_files.py). Routed experts stored one key
per expert are merged as transformers' own conversion for the model type merges them (stacked per expert,
gate and up side by side), since the block is transformers' class.
"""  # noqa: E501

from __future__ import annotations

import re
from pathlib import Path

import torch
import transformers
from transformers.conversion_mapping import get_checkpoint_conversion_mapping
from transformers.core_model_loading import WeightConverter

from framework.core import files
from framework.zoo.checkpoints import find_folder
from proposers.common.head_files import read_weights, stored_tensors, weight_files
from proposers.eagle.head import TREE_FILE
from proposers.eagle.published import write_folder
from proposers.mtp.head import MtpConfig, MtpHead

SHORT = {"token_layernorm": "token_norm", "hidden_layernorm": "hidden_norm", "input_proj": "input_proj",
         "final_layernorm": "final_norm"}  # MiMo's and speculators' names of a module's own parts
DEEPSEEK = {"enorm": "token_norm", "hnorm": "hidden_norm", "eh_proj": "input_proj", "shared_head.norm": "final_norm",
            "shared_head.head": None, "embed_tokens": None}
QWEN3_NEXT = {"pre_fc_norm_embedding": "token_norm", "pre_fc_norm_hidden": "hidden_norm", "fc": "input_proj",
              "norm": "final_norm", "layers.0": "block"}


def is_mtp_key(key: str, num_layers: int | None) -> bool:
    """A tensor of an MTP module in any layout: `mtp.*`, `(model.)mtp_layers.*`, or a decoder layer past the
    target's `num_layers` (DeepSeek-V3's appended layers)."""
    if key.startswith(("mtp.", "mtp_layers.", "model.mtp_layers.")):
        return True
    layer = re.match(r"model\.layers\.(\d+)\.", key)
    if layer is None or num_layers is None or int(layer.group(1)) < num_layers:
        return False
    return module_key(key[layer.end():], DEEPSEEK) is not None  # the copies of the target's head and embedding: no


def module_key(rest: str, parts: dict[str, str | None]) -> str | None:
    """A key inside module k in a layout's names -> ours (None: not read); the block's keys keep their names."""
    for theirs, ours in parts.items():
        if rest == theirs or rest.startswith(theirs + "."):
            return None if ours is None else ours + rest[len(theirs):]
    return "block." + rest


def merged_experts(state: dict[str, torch.Tensor], model_type: str) -> dict[str, torch.Tensor]:
    """Routed experts stored per expert (`...experts.{e}.gate_proj.weight`) merged into the tensors transformers'
    classes hold (`...experts.gate_up_proj` [E, 2I, H]), by the model type's own conversion rules."""
    for rule in get_checkpoint_conversion_mapping(model_type) or []:
        if not isinstance(rule, WeightConverter) or not any("*" in p for p in rule.source_patterns):
            continue
        if len(rule.target_patterns) != 1:
            raise ValueError(f"{model_type}: the weight conversion {rule.source_patterns} -> {rule.target_patterns} "
                             "is not one the MTP reader knows")
        groups: dict[str, list[list[torch.Tensor]]] = {}
        for index, pattern in enumerate(rule.source_patterns):
            regex = re.compile("(.*?)" + re.escape(pattern).replace(r"\*", r"(\d+)") + "$")
            found = sorted(((m.group(1), int(m.group(2)), k) for k in list(state) if (m := regex.match(k))))
            for prefix, _, key in found:
                groups.setdefault(prefix, [[] for _ in rule.source_patterns])[index].append(state.pop(key))
        for prefix, sources in groups.items():
            stacked = [torch.stack(tensors) for tensors in sources]  # each [E, out, in]
            state[prefix + rule.target_patterns[0]] = torch.cat(stacked, dim=1) if len(stacked) > 1 else stacked[0]
    return state


def target_layout(folder: Path, config: dict, names) -> tuple[list[str], dict, int, str]:
    """(the module prefixes in the weights, the parts' names, the module count, the layout's name) of a target
    folder that carries its MTP modules; a named error where it carries none."""
    N = config.get("num_hidden_layers")
    if any(k.startswith("mtp.") for k in names):
        deeper = sorted({k.split(".")[2] for k in names if k.startswith("mtp.layers.") and k.split(".")[2] != "0"})
        if deeper:
            raise ValueError(f"{folder}: a Qwen3-Next MTP block of {len(deeper) + 1} layers is not supported (one)")
        return ["mtp."], QWEN3_NEXT, 1, "Qwen3-Next"
    count = int(config.get("num_nextn_predict_layers") or config.get("num_mtp_layers") or 0)
    if any(k.startswith("model.mtp_layers.") for k in names):
        count = count or len({k.split(".")[2] for k in names if k.startswith("model.mtp_layers.")})
        return [f"model.mtp_layers.{k}." for k in range(count)], SHORT, count, "MiMo"
    if count and N is not None and any(k.startswith(f"model.layers.{N}.") for k in names):
        return [f"model.layers.{N + k}." for k in range(count)], DEEPSEEK, count, "DeepSeek-V3"
    raise ValueError(f"{folder} holds no MTP module: looked for mtp.* (Qwen3-Next), model.mtp_layers.* (MiMo) and "
                     f"model.layers.{N}.* with num_nextn_predict_layers (DeepSeek-V3, GLM); this checkpoint has "
                     f"num_nextn_predict_layers={config.get('num_nextn_predict_layers')}")


def read_mtp(path: str | Path, dtype: torch.dtype = torch.float32) -> MtpHead:
    """The MTP head in a folder: a target's own (DeepSeek-V3, GLM, Qwen3-Next, MiMo) or ours (speculators MTP)."""
    folder = find_folder(path, "config.json") or Path(path).expanduser()
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"no MTP head at {folder}: no config.json")
    config = files.read_json(folder / "config.json")
    found = read_weights(weight_files(folder), lambda key: is_mtp_key(key, config.get("num_hidden_layers")))
    if config.get("speculators_model_type") == "mtp":
        target_config = transformers.AutoConfig.for_model(**config["transformer_layer_config"])
        count = int(config.get("num_nextn_predict_layers", 1))
        prefixes, parts, kind = [f"mtp_layers.{k}." for k in range(count)], SHORT, "speculators"
    else:
        target_config = transformers.AutoConfig.for_model(**config)
        prefixes, parts, count, kind = target_layout(folder, config, found)
    state = {}
    for k, prefix in enumerate(prefixes):
        for name, tensor in found.items():
            ours = module_key(name[len(prefix):], parts) if name.startswith(prefix) else None
            if ours is not None:
                state[f"layers.{k}.{ours}"] = tensor
    mtp = MtpConfig(count, target_config.hidden_size, target_config.vocab_size, target_config.num_hidden_layers,
                    target_config.model_type, own_head=any(".head." in k for k in state))
    searched = files.read_json(folder / TREE_FILE) if (folder / TREE_FILE).is_file() else None  # a zoo run's search
    head = MtpHead(mtp, target_config, searched)
    state = merged_experts(state, target_config.model_type)
    missing = sorted(set(head.state_dict()) - set(state))
    unknown = sorted(set(state) - set(head.state_dict()))
    if missing or unknown:
        raise ValueError(f"{folder}: its {kind} MTP tensors do not fit the {target_config.model_type} block: "
                         f"missing {missing[:6]}, unexpected {unknown[:6]}")
    head.load_state_dict(state)
    return head.to(dtype).eval()


def write_speculators(head: MtpHead, folder: str | Path, dtype: torch.dtype = torch.bfloat16,
                      speculative_tokens: int = 3) -> Path:
    """Our head in the speculators MTP layout (config.json + model.safetensors with mtp_layers.{k}.*)."""
    names = {ours: theirs for theirs, ours in SHORT.items()}
    state = {}
    for key, tensor in stored_tensors(head, dtype).items():
        if not key.startswith("layers."):
            continue  # the rotary's buffers
        _, k, part, rest = key.split(".", 3)
        state[f"mtp_layers.{k}." + (rest if part == "block" else f"{names[part]}.{rest}")] = tensor
    return write_folder(folder, {
        "speculators_model_type": "mtp", "architectures": ["MTPDraftModel"],
        "transformer_layer_config": head.target_config.to_dict(),
        "num_nextn_predict_layers": head.config.num_modules,
        "speculators_config": {"algorithm": "mtp", "default_proposal_method": "greedy",
                               "proposal_methods": [{"proposal_type": "greedy",
                                                     "speculative_tokens": speculative_tokens}],
                               "verifier": {"name_or_path": None, "architectures": head.target_config.architectures}}},
        state)
