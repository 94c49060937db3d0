"""Medusa heads for the zoo target (python -m experiments.train training=zoo_medusa).

1. Trains one head set per objective ("ce": the text's next tokens, "kl": self-distillation to the
   target's own laws) side by side on the same batches, resumable (training.root/<training_text.run>).
   The text is the corpus, or (training_text.self_generated) the target's own continuations of corpus
   prompts, greedy and sampled: the text the heads meet when decoding.
2. Measures each on validation and held-out text of two kinds: corpus windows, and the target's
   own continuations of validation / held-out prompts. Per head and rank: how often the candidate
   is the target's own next token (the acceptance the tree search reads); top-1/top-5 against the text.
3. Searches the tree (proposers/search/tree_search.py) from the rates on the target's continuations of
   validation prompts and the measured forward_tree cost on this machine, and keeps the objective
   whose tree promises more tokens per unit cost.
4. Writes the winner (bf16 safetensors, config, searched tree, every measurement) to
   training.export (experiments/zoo/medusa is what proposer=medusa loads).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import torch
from omegaconf import DictConfig

from framework.core import files
from framework.zoo.checkpoints import resolve_checkpoint
from framework.zoo.continuations import cached_continuations
from measurement.tree_search import medusa_tree
from proposers.medusa.heads import TREE_FILE
from proposers.medusa.training import accuracy, train_heads
from proposers.search.tree_cost import forward_tree_cost
from recipes.common import evaluation_sets, head_setup, measures_here


def run(cfg: DictConfig) -> Path | None:
    exp, root, streams, settings, target = head_setup(cfg)  # settings: MedusaTrainConfig
    g = exp.training_text.continuations
    if exp.training_text.self_generated:  # train on the target's own continuations
        streams = {**streams, "train": cached_continuations(target, streams["train"], root, "self", g, g.sequences)}
    heads = train_heads(target, streams, root / exp.training_text.run, settings)
    if not measures_here(heads, settings):  # one process measures and writes
        return None
    target = target.cpu()
    evals = evaluation_sets(target, streams, root, g, settings.block_size, exp.eval_tokens)
    threads = torch.get_num_threads()
    torch.set_num_threads(exp.tree.cost_threads)  # the thread count decoding runs at
    cost = forward_tree_cost(target, tuple(exp.tree.cost_sizes), repeats=exp.tree.cost_repeats)  # ms, this machine
    torch.set_num_threads(threads)
    measured = {}
    for name, h in heads.items():
        h = h.cpu().eval()
        tables = {split: {kind: accuracy(h, target, windows, settings.ranks, False, start=start, mask=mask)
                          for kind, (windows, mask, start) in by_kind.items()} for split, by_kind in evals.items()}
        tree, searched = medusa_tree(torch.tensor(tables["valid"]["continuations"]["accept"]), exp.tree.max_nodes, cost)
        measured[name] = {**tables, "budget": len(tree["choices"]), "choices": tree["choices"],
                          "expected_tokens": tree["expected_tokens"], **searched}
        for kind in ("text", "continuations"):
            held = tables["heldout"][kind]
            print(f"{name}, held-out {kind}: top-1 (target's token) per head "
                  f"{[round(x, 3) for x in held['top1_target']]}, "
                  f"top-5 {[round(x, 3) for x in held['top5_target']]}, "
                  f"sampled acceptance {[round(x, 3) for x in held['accept_sampled']]}")
    score = {n: m["table"][m["budget"]]["tokens_per_cost"] for n, m in measured.items()}
    best = max(score, key=score.get)
    print(f"kept {best}: expected tokens per ms of forward_tree {score}")
    out = Path(exp.export)
    heads[best].cpu().save(out, extra={"objective": best, "self_generated": bool(exp.training_text.self_generated),
                                       "target": str(resolve_checkpoint(exp.target).name), "train": asdict(settings)})
    files.write_json(out / TREE_FILE, {"choices": measured[best]["choices"], "cost_ms": cost,
                                       "expected_tokens": measured[best]["expected_tokens"]}, indent=1)
    files.write_json(out / "measurements.json", {"kept": best, "score": score, **measured}, indent=1)
    files.write_json(root / exp.training_text.run / "acceptance.json",  # the run's own record, beside its checkpoint
                     {name: m["heldout"] for name, m in measured.items()}, indent=1)
    return out
