"""Parallel drafters for any target (python -m experiments.train training=zoo_dflash / zoo_pard / zoo_peagle).

1. The drafter (training.drafter, a builder given the frozen target): a fresh DFlash drafter on the
   target's layers; a PARD draft made from a draft model (one mask row appended to its vocabulary,
   its config naming it pard_token); a P-EAGLE head made from an EAGLE-3 head (a pard_token and a
   learned mask_hidden added). Or training.init: a drafter of the same kind to continue.
2. Trains one copy per loss= on data= through the shared loop (proposers/parallel/training.py),
   resumable under root/<run>.
3. Measures each copy per depth on held-out text and on the target's own continuations (top-1
   agreement with the target's greedy token, and sum min(p, q): a sampled draft's acceptance),
   writes root/<run>/acceptance.json, and exports the best (validation sampled acceptance, summed
   over depths) with training.exporter to training.export, its measurements beside it, and the
   tree it drafts fastest with on this machine (prefixes of the tree searched from its per-depth,
   per-rank acceptance, and chains, decoded; position_tree.json: what `choices` reads with models=zoo).
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from framework.core import files
from framework.lm.text import tokenizer_of
from framework.training.loop import resolve_device, train
from framework.zoo.checkpoints import load_causal_lm
from framework.zoo.train import save_model
from measurement.tree_search import score_settings
from proposers.common.position_tree import TREE_FILE
from proposers.eagle.head import HEADS, EagleHead, config_from
from proposers.heads import load_head
from proposers.parallel.dflash import DFlashConfig, DFlashDrafter, spread_layers
from proposers.search.tree_cost import forward_tree_cost
from proposers.search.tree_search import grow_tree
from recipes.common import evaluation_sets, head_setup, measures_here


# ---- builders: (frozen target, settings) -> a drafter ----------------------------------------------
def check_mask_token(target, token: int) -> None:
    """A mask read through the target's embedding must have content: a zero row (a padding row) gives every
    mask position zero queries and keys, so the block attends evenly to everything and learns nothing of
    where it stands (seen: DFlash stuck at the unigram law with token 0, the zoo's padding token)."""
    row = target.get_input_embeddings().weight[token]
    if not bool(row.abs().sum() > 0):
        raise ValueError(f"mask token {token} has a zero embedding in the target (a padding row?): choose another "
                         "(a rare token of the vocabulary, or a spare row)")


def fresh_dflash(target, depth: int, layers: int = 3, mask_token_id: int = 0, **sizes) -> DFlashDrafter:
    """A DFlash drafter for `target`: block of depth + 1, `layers` target layers spread from low to high."""
    check_mask_token(target, mask_token_id)
    c = target.config
    config = DFlashConfig(c.hidden_size, target.get_output_embeddings().weight.shape[0], c.num_hidden_layers,
                          spread_layers(c.num_hidden_layers, layers), depth + 1, mask_token_id, **sizes)
    torch.manual_seed(0)
    drafter = DFlashDrafter(config)
    for p in drafter.parameters():
        if p.dim() > 1:
            torch.nn.init.normal_(p, std=0.02)
    return drafter


def pard_from_draft(target, draft: str) -> torch.nn.Module:
    """A draft model (a folder or zoo name, on the target's vocabulary) with one more row: its mask token.
    The mask's embedding starts at zero: it carries no content, and its first keys and queries are zero, so
    a mask position starts by attending evenly to what it sees (a mean-like row drew the mask positions'
    attention onto the masks themselves, and they learnt the unigram law)."""
    model = load_causal_lm(draft).float()
    V = model.get_output_embeddings().weight.shape[0]
    if V != target.get_output_embeddings().weight.shape[0]:
        raise ValueError(f"the draft's vocabulary ({V}) is not the target's: a PARD draft predicts the target's tokens")
    model.resize_token_embeddings(V + 1, mean_resizing=False)
    with torch.no_grad():
        model.get_input_embeddings().weight[V].zero_()
    model.config.pard_token = V
    return model


def peagle_from_head(target, head: str, pard_token: int) -> EagleHead:
    """An EAGLE head (any layout load_head reads) with mask positions: `pard_token`, and mask_hidden drawn small."""
    check_mask_token(target, pard_token)
    base = load_head(head)
    config = config_from({**base.config.__dict__, "pard_token": pard_token})
    parallel = HEADS[config.architecture](config, base.searched)
    missing = parallel.load_state_dict(base.state_dict(), strict=False).missing_keys
    if missing != ["mask_hidden"]:
        raise ValueError(f"{head} does not carry over to a P-EAGLE head: missing {missing}")
    torch.manual_seed(0)
    torch.nn.init.normal_(parallel.mask_hidden, std=0.02)
    return parallel


# ---- exporters: (drafter, folder, target) ------------------------------------------------------------
def export_dflash(drafter: DFlashDrafter, folder: Path, target) -> None:
    drafter.save(folder)


def export_pard(draft, folder: Path, target) -> None:
    save_model(folder, draft.to(torch.bfloat16), tokenizer_of(target))


def export_head(head: EagleHead, folder: Path, target) -> None:
    head.save(folder)


def scored_from(mask: torch.Tensor, start: int) -> torch.Tensor:
    """The label mask without the labels before position `start` (a continuation's prompt)."""
    mask = mask.clone()
    mask[:, :start] = False
    return mask


def run(cfg: DictConfig) -> Path | None:
    exp, root, data, settings, target = head_setup(cfg)  # settings: ParallelTrainConfig
    start = instantiate(exp.drafter)(target) if exp.get("init") is None else instantiate(exp.load)(exp.init)
    drafters = {name: copy.deepcopy(start).float().train() for name in settings.losses}
    device = resolve_device(settings.device)
    objective = instantiate(exp.objective)(target.to(device), drafters, settings)
    valid, valid_mask = data["valid"].fixed(settings.block_size, settings.eval_tokens)

    def evaluate(trained) -> dict:
        trained.eval()
        rates = {f"{n}_valid": objective.measure(d, valid, valid_mask) for n, d in trained.items()}
        trained.train()
        return {k: {m: [round(x, 4) for x in r[m]] for m in ("top1_target", "accept_sampled")}
                for k, r in rates.items()}

    finished = train(objective, data["train"], root / exp.run, settings, evaluate, name=exp.run) or None
    if not measures_here(finished, settings):  # one process measures and writes
        return None
    sets = evaluation_sets(target, data, root, exp.continuations, settings.block_size, exp.eval_tokens)
    measured = {}
    for name, drafter in objective.drafters.items():
        drafter.eval()
        measured[name] = {f"{split}/{kind}": objective.measure(drafter, windows, scored_from(mask, start_at))
                          for split, kinds in sets.items() for kind, (windows, mask, start_at) in kinds.items()}
        print(f"{name}: held-out accept_sampled by depth "
              f"{[round(x, 3) for x in measured[name]['heldout/text']['accept_sampled']]}")
    files.write_json(root / exp.run / "acceptance.json", measured, indent=1)
    kept = max(measured, key=lambda n: sum(measured[n]["valid/text"]["accept_sampled"]))
    if exp.get("export") is None:
        return None
    prompts = sets["valid"]["continuations"][0][: exp.tree.budget_prompts, : exp.continuations.prompt_tokens]
    tree = searched_tree(target.cpu(), objective.drafters[kept].cpu().eval(), instantiate(exp.proposer),
                         measured[kept]["valid/continuations"]["accept"], prompts, exp.tree)
    out = Path(exp.export)
    instantiate(exp.exporter)(objective.drafters[kept].cpu(), out, target.cpu())
    files.write_json(out / TREE_FILE, tree, indent=1)
    files.write_json(out / "measurements.json", {"kept": kept, "acceptance": measured, "tree": tree,
                                                 "settings": OmegaConf.to_container(cfg.training, resolve=True)},
                     indent=1)
    return out


def searched_tree(target, drafter, make, accept: list, prompts: torch.Tensor, g) -> dict:
    """The tree to draft with, by decoding: prefixes of the tree searched from the per-depth, per-rank acceptance
    (proposers/search/tree_search.py, which takes depths as independent) and chains, each decoding the same
    validation prompts greedily (g.cost_threads threads, as experiments.run); the one with the most tokens per ms
    of forward_tree (timed here) plus the drafter's own time is kept."""
    threads = torch.get_num_threads()
    torch.set_num_threads(g.cost_threads)
    cost = forward_tree_cost(target, tuple(g.cost_sizes), repeats=g.cost_repeats)
    searched = grow_tree(torch.tensor(accept), g.max_nodes)
    candidates = {f"tree{n}": searched.choices[:n] for n in g.budgets if n <= len(searched.choices)}
    candidates.update({f"chain{k}": [(0,) * d for d in range(1, k + 1)] for k in g.chains if k <= len(accept)})
    print("trees, by decoding:")
    table = score_settings(target, {name: (lambda c=c: make(drafter, choices=c)) for name, c in candidates.items()},
                           prompts, g.budget_tokens, cost)
    torch.set_num_threads(threads)
    best = max(table, key=lambda name: table[name]["tokens_per_ms"])
    return {"choices": candidates[best], "setting": best, "cost_ms": cost, "decoded": table,
            "searched_expected_tokens": searched.expected_tokens}
