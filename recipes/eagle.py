"""EAGLE heads for the zoo target (python -m experiments.train training=zoo_eagle / zoo_eagle3).

1. Trains the head against the frozen target on the corpus's train split (resumable, under
   training.root/<run>): EAGLE-1 (last layer, feature regression + token loss) or EAGLE-3
   (fused low/middle/high layers, its own draft vocabulary of the train split's most frequent
   tokens, token loss, training-time test), as the experiment says: the published architectures.
2. Measures it on validation and held-out text of two kinds (corpus windows, and the target's own
   continuations of prompts): per depth and rank, how often the head's candidate, drafting a chain
   fed the text, is the target's own next token; top-1 against the text.
3. Trees, measured by decoding: the static tree (EAGLE-1) is searched from the per-depth, per-rank
   acceptance on validation continuations (proposers/search/tree_search.py) and each prefix size is
   decoded; the dynamic tree (EAGLE-2) is decoded at each top_k x depth x budget. Greedy, held-out prompts, one
   thread. Each setting scores tokens per forward / (forward_tree cost at its node count + the
   head's measured time per step); the best static tree and dynamic setting are kept as `auto`.
4. Writes the head (bf16 safetensors + config), eagle_tree.json and measurements.json to
   training.export (what proposer=eagle, eagle2 and eagle3 load with models=zoo); with
   training.export_speculators, the head again in vLLM's speculators layout.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from omegaconf import DictConfig

from engine.loop import generate
from framework.core import files
from framework.core.sampling import SamplingConfig
from framework.lm.target import HFTarget
from framework.zoo.checkpoints import resolve_checkpoint
from measurement.tree_search import eagle_trees
from proposers.eagle.head import TREE_FILE, EagleHead
from proposers.eagle.proposer import EagleProposer
from proposers.eagle.training import accuracy, draft_vocabulary, train_head
from proposers.search.tree_cost import forward_tree_cost
from recipes.common import evaluation_sets, head_setup, measures_here


def chain_length(table: dict) -> float:
    """Expected tokens per step of a chain as deep as the table, greedy and sampled averaged: 1 + sum over
    depths of the product of the per-depth rates (each rate read as the chance given the earlier ones)."""
    total = 0.0
    for rates in (table["top1_target"], table["accept_sampled"]):
        reach = 1.0
        for rate in rates:
            reach *= rate
            total += reach / 2
    return 1 + total


def paired_lengths(target, heads: dict, prompts: torch.Tensor, g, proposer: type = EagleProposer) -> dict:
    """The losses' heads decoding the same held-out prompts with the same tree (g: top_k, depth, budget,
    new_tokens, samplings), each prompt and sampling one paired sample: per head the mean tokens per
    forward, and per head after the first the mean difference to the first with its standard error."""
    first = next(iter(heads))
    table = {}
    for temperature in g.temperatures:
        sampling = SamplingConfig(temperature=temperature)
        lengths = {}
        for name, head in heads.items():
            per_prompt = []
            for seed, prompt in enumerate(prompts):  # the same seed per prompt for every head
                stats = generate(HFTarget(target), proposer(head, top_k=g.top_k, depth=g.depth, budget=g.budget),
                                 prompt[None], g.new_tokens, sampling, seed=seed).stats
                per_prompt.append(stats.summary()["tokens_per_forward"])
            lengths[name] = torch.tensor(per_prompt, dtype=torch.float64)
        row = {name: float(x.mean()) for name, x in lengths.items()}
        for name in list(heads)[1:]:
            gap = lengths[name] - lengths[first]
            row[f"{name}-{first}"] = {"mean": float(gap.mean()), "se": float(gap.std() / len(gap) ** 0.5),
                                      "relative": float(gap.mean() / lengths[first].mean())}
        table[f"T={temperature}"] = row
        print(f"T={temperature}, tokens per forward on {len(prompts)} held-out prompts: {row}")
    return table


def run(cfg: DictConfig) -> Path | None:
    exp, root, streams, settings, target = head_setup(cfg)  # settings: EagleTrainConfig
    h = exp.head
    if exp.get("init"):  # continue from a trained head (its architecture and draft vocabulary), one copy per loss
        heads = {name: EagleHead.load(exp.init).train() for name in settings.losses}
    else:
        vocabulary = None
        if h.architecture == "eagle3" and h.get("draft_vocab_size"):  # the most frequent labels of the train split
            labels = streams["train"].ids[streams["train"].loss_mask]
            vocabulary, covered = draft_vocabulary(labels, h.draft_vocab_size,
                                                   target.get_output_embeddings().weight.shape[0])
            print(f"draft vocabulary: {h.draft_vocab_size} tokens cover {covered:.3f} of the train split's labels")
        heads = {}
        for name in settings.losses:  # the same initial weights for every loss: the comparison is of the losses alone
            torch.manual_seed(settings.seed)
            head = EagleHead.for_target(target, h.architecture, h.target_layers, num_heads=h.num_heads,
                                        num_kv_heads=h.num_kv_heads, intermediate_size=h.intermediate_size,
                                        **({"draft_vocab_size": h.draft_vocab_size}
                                           if h.get("draft_vocab_size") else {}))
            heads[name] = head if vocabulary is None else head.set_vocabulary(vocabulary)
    done = train_and_search(exp, root, streams, settings, target, heads, EagleProposer)
    if done is None:
        return None
    out = Path(exp.export)
    done.head.save(out, extra={"target": str(resolve_checkpoint(exp.target).name), "loss": done.loss,
                               "train": {k: v for k, v in asdict(settings).items() if k != "losses"}})
    files.write_json(out / TREE_FILE, done.tree, indent=1)
    files.write_json(out / "measurements.json", done.measurements, indent=1)
    if exp.get("export_speculators"):  # the same head in vLLM's speculators layout, read back by a test
        done.head.save(exp.export_speculators, format="speculators", embedding=target.get_input_embeddings().weight,
                       verifier=str(exp.export_speculators_verifier), speculative_tokens=done.tree["depth"])
    return out


@dataclass
class Searched:
    """A trained feature-level head, measured, with its trees searched (train_and_search)."""

    head: torch.nn.Module
    loss: str  # the kept loss's name
    tree: dict  # eagle_tree.json: the static choices and the dynamic setting kept, the forward costs
    measurements: dict  # measurements.json
    prompts: torch.Tensor  # [P, L] the held-out prompts the settings were decoded on


def train_and_search(exp, root: Path, streams: dict, settings, target, heads: dict, proposer: type) -> Searched | None:
    """Steps 1-3 for feature-level heads (EAGLE's, MTP modules): train one head per loss, measure each, keep the
    one with the longest expected chain, search its trees; None where this process does not measure (time limit,
    another rank)."""
    for head in heads.values():
        head.check_target(target)
    heads = train_head(target, heads, streams, root / exp.run, settings)
    if not measures_here(heads, settings):  # one process measures and writes
        return None
    target = target.cpu()
    g = exp.continuations
    evals = evaluation_sets(target, streams, root, g, settings.block_size, exp.eval_tokens)
    by_loss = {name: {split: {kind: accuracy(head.cpu().eval(), target, windows, settings.ranks, settings.eval_depth,
                                             start=start, mask=mask)
                              for kind, (windows, mask, start) in by_kind.items()}
                      for split, by_kind in evals.items()} for name, head in heads.items()}
    files.write_json(root / exp.run / "acceptance.json", {name: t["heldout"] for name, t in by_loss.items()}, indent=1)
    for name, tables in by_loss.items():
        for kind in ("text", "continuations"):
            held = tables["heldout"][kind]
            print(f"{name}, held-out {kind}: top-1 (target's token) per depth "
                  f"{[round(x, 3) for x in held['top1_target']]}, "
                  f"sampled acceptance {[round(x, 3) for x in held['accept_sampled']]}")
    # kept: the head whose chain is longest on validation continuations, greedy and sampled alike
    kept = max(by_loss, key=lambda n: chain_length(by_loss[n]["valid"]["continuations"]))
    head, tables = heads[kept], by_loss[kept]
    print(f"kept the {kept} head (expected chain length on validation continuations: "
          f"{ {n: round(chain_length(t['valid']['continuations']), 3) for n, t in by_loss.items()} })")
    continuations = {split: evals[split]["continuations"][0] for split in evals}
    paired = None
    if len(heads) > 1:  # the losses compared by decoding: accepted length, paired by prompt
        c = exp.loss_comparison
        paired = paired_lengths(target, heads, continuations["heldout"][: c.prompts, : g.prompt_tokens], c, proposer)

    t = exp.tree
    torch.set_num_threads(t.cost_threads)  # the thread count decoding runs at
    cost = forward_tree_cost(target, tuple(t.cost_sizes), repeats=t.cost_repeats)  # ms, this machine
    prompts = continuations["heldout"][: t.budget_prompts, : g.prompt_tokens]
    tree, measured = eagle_trees(target, head, torch.tensor(tables["valid"]["continuations"]["accept"]), prompts, t,
                                 cost, proposer)
    return Searched(head, kept, tree, {"acceptance": tables, "by_loss": by_loss, "paired_lengths": paired, **measured},
                    prompts)
