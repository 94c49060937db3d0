"""A distilled draft model for any target (python -m experiments.train training=distill_draft training.target=PATH).

1. The draft: a copy of training.draft (a checkpoint folder or zoo name, on the target's vocabulary) or,
   when null, a fresh Llama of training.architecture's sizes on the target's vocabulary.
2. Distils it against the frozen target on data= (the target's own tokenizer and chat template; the loss
   on the assistant's tokens), one copy per loss= side by side, through the shared loop
   (framework/training/loop.py: `accelerate launch` / `torchrun` for several processes, resumable).
3. Writes each draft's held-out acceptance (greedy and sampled) to root/<run>/acceptance.json and the
   best (by sampled acceptance on validation) as a Hugging Face checkpoint, with the target's tokenizer,
   to training.export.
"""

from __future__ import annotations

from pathlib import Path

import torch
import transformers
from omegaconf import DictConfig, OmegaConf

from framework.core import files
from framework.lm.text import tokenizer_of
from framework.zoo.checkpoints import load_causal_lm
from framework.zoo.train import save_model
from proposers.draft_training import draft_acceptance, train_drafts
from recipes.common import head_setup, measures_here


def fresh_draft(target, sizes: dict) -> torch.nn.Module:
    """A small Llama on the target's vocabulary and special tokens."""
    c = target.config
    config = transformers.LlamaConfig(vocab_size=target.get_output_embeddings().weight.shape[0],
                                      max_position_embeddings=getattr(c, "max_position_embeddings", 2048),
                                      bos_token_id=c.bos_token_id, eos_token_id=c.eos_token_id, **sizes)
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(config)


def run(cfg: DictConfig) -> Path | None:
    exp, root, data, settings, target = head_setup(cfg)  # settings: DraftTrainConfig
    draft = (load_causal_lm(exp.draft) if exp.get("draft")
             else fresh_draft(target, OmegaConf.to_container(exp.architecture)))
    drafts = train_drafts(target, draft, data, root / exp.run, settings)
    if not measures_here(drafts, settings):  # one process measures and writes
        return None
    target = target.cpu()
    measured = {}
    for name, d in drafts.items():
        d = d.cpu()
        measured[name] = {split: draft_acceptance(d, target, *data[split].fixed(settings.block_size, exp.eval_tokens))
                          for split in ("valid", "heldout")}
        print(f"{name}: held-out acceptance {measured[name]['heldout']}")
    files.write_json(root / exp.run / "acceptance.json", measured, indent=1)
    kept = max(measured, key=lambda n: measured[n]["valid"]["accept_sampled"])
    print(f"kept the {kept} draft")
    if exp.get("export") is None:
        return None
    out = Path(exp.export)
    save_model(out, drafts[kept], tokenizer_of(target))  # a Hugging Face folder, swapped in whole
    return out
