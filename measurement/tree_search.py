"""The tree search of a trained head, as the search_tree app and the training recipes run it: the static tree grown
from measured acceptance against this machine's forward_tree cost, and (EAGLE) the static and dynamic settings kept
by decoding prompts, each scored by tokens per ms (score_settings). `search` runs the whole of
`python -m experiments.search_tree` (conf/search_tree.yaml) and writes the tree beside the head.
"""

from __future__ import annotations

from pathlib import Path

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig

from engine.loop import generate
from framework.core import files
from framework.core.sampling import SamplingConfig
from framework.lm.target import HFTarget
from measurement.common import continuations, prompt_ids
from proposers.eagle.head import TREE_FILE as EAGLE_TREE
from proposers.eagle.head import EagleHead
from proposers.eagle.proposer import EagleProposer
from proposers.eagle.training import accuracy as eagle_accuracy
from proposers.heads import load_head
from proposers.medusa.heads import TREE_FILE as MEDUSA_TREE
from proposers.medusa.heads import MedusaHeads
from proposers.medusa.training import accuracy as medusa_accuracy
from proposers.search.tree_cost import forward_tree_cost
from proposers.search.tree_search import grow_tree, interpolate

MEASUREMENTS = "search_measurements.json"


def decode_rate(target, make, prompts: torch.Tensor, new_tokens: int) -> dict:
    """Greedy decoding of each prompt [P, L] with a fresh proposer: tokens per forward, nodes and head time per step
    (ms)."""
    steps = accepted = nodes = 0
    draft_s = 0.0
    for prompt in prompts:
        stats = generate(HFTarget(target), make(), prompt[None], new_tokens, SamplingConfig(temperature=0.0)).stats
        steps += len(stats.steps)
        accepted += stats.accepted_total
        nodes += sum(s.nodes for s in stats.steps)
        draft_s += sum(s.draft_s for s in stats.steps)
    return {"tokens_per_forward": 1 + accepted / steps, "nodes": nodes / steps, "head_ms": 1e3 * draft_s / steps}


def score_settings(target, makers: dict, prompts, new_tokens: int, cost: dict[int, float]) -> dict:
    """Per setting: its decode rate and tokens per ms of (forward_tree + head)."""
    table = {}
    for name, make in makers.items():
        rate = decode_rate(target, make, prompts, new_tokens)
        step_ms = interpolate(cost, round(rate["nodes"])) + rate["head_ms"]
        table[name] = {**rate, "step_ms": step_ms, "tokens_per_ms": rate["tokens_per_forward"] / step_ms}
        print(f"  {name}: {rate['tokens_per_forward']:.2f} tokens/forward, {rate['nodes']:.1f} nodes, "
              f"head {rate['head_ms']:.2f} ms + forward {step_ms - rate['head_ms']:.2f} ms per step")
    return table


def eagle_trees(target, head: EagleHead, accept: torch.Tensor, prompts: torch.Tensor, t,
                cost: dict, proposer: type = EagleProposer) -> tuple[dict, dict]:
    """The static tree grown from accept [depth, ranks] and the dynamic setting, each kept by decoding the prompts
    (t: max_nodes, budgets, top_ks, depths, budget_tokens) -> (eagle_tree.json, the measurements). proposer: the
    feature-level drafter the head belongs to (EagleProposer, MtpProposer)."""
    searched = grow_tree(accept, t.max_nodes)
    print("static trees (EAGLE-1), by decoding:")
    static = score_settings(target, {n: (lambda n=n: proposer(head, choices=searched.choices[:n]))
                                     for n in t.budgets if n <= len(searched.choices)}, prompts, t.budget_tokens, cost)
    print("dynamic trees (EAGLE-2/3: top_k, depth, budget), by decoding:")
    grid = [(k, d, n) for k in t.top_ks for d in t.depths for n in t.budgets]
    dynamic = score_settings(target, {f"{k},{d},{n}": (lambda k=k, d=d, n=n: proposer(head, top_k=k, depth=d, budget=n))
                                      for k, d, n in grid}, prompts, t.budget_tokens, cost)
    best_static = max(static, key=lambda n: static[n]["tokens_per_ms"])
    top_k, depth, budget = (int(x) for x in max(dynamic, key=lambda n: dynamic[n]["tokens_per_ms"]).split(","))
    print(f"kept: static tree of {best_static} nodes; dynamic top_k {top_k}, depth {depth}, budget {budget}")
    tree = {"choices": searched.choices[:best_static], "budget": budget, "top_k": top_k, "depth": depth,
            "cost_ms": cost}
    return tree, {"static": static, "dynamic": dynamic, "searched_expected_tokens": searched.expected_tokens}


def medusa_tree(accept: torch.Tensor, max_nodes: int, cost: dict) -> tuple[dict, dict]:
    """The tree grown from accept [heads, ranks], cut at the budget with the most expected tokens per ms."""
    tree = grow_tree(accept, max_nodes)
    budget = tree.best_budget(cost)
    print(f"searched tree {budget} nodes, expected {tree.expected_tokens[budget]:.3f} tokens/step")
    return ({"choices": tree.choices[:budget], "cost_ms": cost, "expected_tokens": tree.expected_tokens[budget]},
            {"table": tree.table(cost)})


def search(cfg: DictConfig) -> Path:
    s = cfg.search
    model = instantiate(cfg.target)
    head = load_head(cfg.head, dtype=next(model.parameters()).dtype, layer_ids=cfg.get("layer_ids"))
    if not isinstance(head, (EagleHead, MedusaHeads)):
        raise ValueError(f"{cfg.head} holds a {type(head).__name__}: a tree is searched for EAGLE or Medusa heads")
    torch.set_num_threads(s.threads)  # the thread count decoding runs at: the cost and the decodes alike
    windows, length = continuations(model, prompt_ids(cfg, model), s.prompt_tokens, s.new_tokens)
    print(f"{len(windows)} prompts of {length} tokens, each continued by the target for {s.new_tokens} tokens")
    cost = forward_tree_cost(model, tuple(s.cost_sizes), prompt_len=length, repeats=s.cost_repeats)  # ms, this machine
    if isinstance(head, EagleHead):
        head.check_target(model)
        table = eagle_accuracy(head, model, windows, s.ranks, s.depth, start=length - 1)
        prompts = windows[: s.decode_prompts, :length]
        tree, measured = eagle_trees(model, head, torch.tensor(table["accept"]), prompts, s, cost)
        name = EAGLE_TREE
    else:
        table = medusa_accuracy(head, model, windows, s.ranks, False, start=length - 1)
        tree, measured = medusa_tree(torch.tensor(table["accept"]), s.max_nodes, cost)
        name = MEDUSA_TREE
    out = Path(cfg.out or cfg.head).expanduser()
    files.write_json(out / name, tree, indent=1)
    files.write_json(out / MEASUREMENTS, {"acceptance": table, "prompt_tokens": length, **measured}, indent=1)
    print(f"wrote {out / name}: `auto` settings of this head read it from now on")
    return out / name
