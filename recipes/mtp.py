"""An MTP module for the zoo target (python -m experiments.train training=zoo_mtp), FastMTP-style: one module
of the target's own decoder-layer class, trained against the frozen target through the EAGLE pipeline
(proposers/eagle/training.py): the same data, loop, loss and training-time test, the module reading the target's
last hidden state at step 0 and its own output deeper, one shared module for every depth with step j weighed
decay**j. Then the same measurements and tree search as the EAGLE heads (recipes/eagle.py), plus
chains of 1..max depth (how engines deploy MTP), and the module written in the speculators MTP layout with
eagle_tree.json and measurements.json beside it (what proposer=mtp loads with models=zoo).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import torch
from omegaconf import DictConfig

from framework.core import files
from measurement.tree_search import score_settings
from proposers.eagle.head import TREE_FILE
from proposers.mtp.head import MtpConfig, MtpHead
from proposers.mtp.layouts import write_speculators
from proposers.mtp.proposer import MtpProposer
from recipes.common import head_setup
from recipes.eagle import train_and_search


def fresh_modules(target, num_modules: int, seed: int) -> MtpHead:
    """Modules of the target's own block class, PyTorch's default initialisation, norms at one."""
    c = target.config
    torch.manual_seed(seed)
    config = MtpConfig(num_modules, c.hidden_size, target.get_output_embeddings().weight.shape[0], c.num_hidden_layers,
                       c.model_type)
    return MtpHead(config, c)


def run(cfg: DictConfig) -> Path | None:
    exp, root, streams, settings, target = head_setup(cfg)  # settings: EagleTrainConfig
    heads = {name: fresh_modules(target, exp.head.num_modules, settings.seed).train() for name in settings.losses}
    done = train_and_search(exp, root, streams, settings, target, heads, MtpProposer)
    if done is None:
        return None
    head, tree, t, g = done.head, done.tree, exp.tree, exp.continuations
    target = target.cpu()
    print("chains (top_k 1, as engines deploy MTP), by decoding:")
    chains = score_settings(target, {d: (lambda d=d: MtpProposer(head, depth=d)) for d in t.chain_depths}, done.prompts,
                            t.budget_tokens, tree["cost_ms"])
    tree["chain_depth"] = max(chains, key=lambda d: chains[d]["tokens_per_ms"])
    out = Path(exp.export)
    write_speculators(head, out, speculative_tokens=tree["chain_depth"])
    files.write_json(out / TREE_FILE, tree, indent=1)
    size = sum(p.numel() for p in head.parameters())
    files.write_json(out / "measurements.json", {
        **done.measurements, "chains": chains, "parameters": size, "loss": done.loss,
        "train": {k: v for k, v in asdict(settings).items() if k != "losses"},
        "prompt_tokens": g.prompt_tokens}, indent=1)
    print(f"{size} parameters written to {out}")
    return out
