"""The first speculated token, sampled many times through the real loop, against the target's own law;
the draft's law of its first candidates beside it; a summary and a plot.

A library of experiments.first_token and experiments.compare; not an entry point.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from tqdm.auto import tqdm

from engine.loop import DecodeOptions, Decoder
from framework.core import files
from framework.core.path_tree import node_token_paths
from framework.core.policy import FixedPolicy, Plan
from framework.core.randomness import TorchSource
from framework.core.sampling import process_logits
from framework.core.target import TargetOutput
from framework.core.tree import CandidateTree
from framework.lm.target import HFTarget
from harness.stats import g_test
from verifiers import LOSSLESS, Verifier

FAN_ROWS = 65_536  # runs one fanned-out step verifies (in rounds of `batch`)


class FirstCandidates:
    """A proposer that passes its calls through (but the commit: it serves one step) and adds up its trees'
    first-candidate laws."""

    def __init__(self, inner, vocab_size: int):
        self.inner, self.law = inner, torch.zeros(vocab_size, dtype=torch.float64)
        self.hidden_layers, self.couples_rows = inner.hidden_layers, getattr(inner, "couples_rows", False)

    def prefill(self, input_ids, target):
        self.inner.prefill(input_ids, target)
        self.hidden_layers = self.inner.hidden_layers  # settled against the target at its prefill

    def propose(self, state):
        tree = self.inner.propose(state)
        if tree.draft_probs is not None:  # the exact law the root's children were drawn from
            self.law += tree.draft_probs[:, 0].sum(0).double().cpu()
        elif tree.num_nodes:  # point: each row's depth-1 candidates, equally weighted
            depth1 = tree.tokens[:, tree.parents < 0].cpu()  # [B, k]
            self.law.index_add_(0, depth1.flatten(),
                                torch.full((depth1.numel(),), 1.0 / depth1.shape[1], dtype=torch.float64))
        return tree

    def commit(self, result):
        pass  # the first token is out before this, and the proposer is dropped after its one step

    def select(self, rows: torch.Tensor):
        self.inner.select(rows)


class Fanout:
    """A verifier that judges the one row it is given as `rows` independent rows, each with its own coins.

    At the first step of one shared prompt, a point tree (no draws: EAGLE-2's, Medusa's, the n-gram methods') and
    the target's laws along it are the same in every run, so `rows` runs of the loop's first step are one proposal,
    one target forward and `rows` verifications (the real rule on the tree and laws expanded, in chunks of `batch`).
    A drawn tree (iid, wor, or a point tree whose proposer drew from the source) is one draw among many: it is not
    fanned out (`fanned` stays False); its runs go side by side through the loop on a SharedPrefix target."""

    def __init__(self, verifier: Verifier, rows: int, batch: int, rng_of):
        self.verifier, self.rows, self.batch, self.rng_of = verifier, rows, batch, rng_of
        self.first: torch.Tensor | None = None  # [rows] the first emitted token of every run
        self.fanned = False

    def __call__(self, tree, p, rng, eos_token_id):
        if tree.kind != "point" or tree.tokens.shape[0] != 1 or getattr(rng, "drawn", True):  # a proposer spent coins
            # on it (a source that cannot tell is taken as drawn: one draw is never fanned out)
            return self.verifier(tree, p, rng, eos_token_id)
        firsts = []
        for chunk, start in enumerate(range(0, self.rows, self.batch)):
            b = min(self.batch, self.rows - start)
            q = None if tree.draft_probs is None else tree.draft_probs.expand(b, -1, -1)
            wide = CandidateTree(tree.tokens.expand(b, -1), tree.shape, q, tree.kind)
            firsts.append(self.verifier(wide, p.expand(b, -1, -1), self.rng_of(chunk), eos_token_id).tokens[:, 0].cpu())
        self.first, self.fanned = torch.cat(firsts), True
        return self.verifier(tree, p, rng, eos_token_id)


def first_tokens(model, factory, prompt: torch.Tensor, sampling, samples: int, batch: int, seed: int,
                 verifier: Verifier = LOSSLESS, progress: bool = False, partial: Path | None = None,
                 settings: dict | None = None) -> dict:
    """Counts of the first speculated token [V], the draft's first-candidate law [V], the target's law [V].

    Runs go in rounds of `batch`; every round's coins come from its own seed (seed, round), so a run stopped after
    k rounds and resumed from `partial` (written whole after each round; resumed only for the same batch, seed and
    settings) ends with the same counts. A point tree
    fans out (Fanout): one step at batch 1 per `fan` rounds. progress: a bar with the rate and the time left."""
    with torch.no_grad():
        target_law = process_logits(model(prompt).logits[:, -1].double(), sampling)[0]  # [V]
    V = target_law.numel()
    counts, draft, done = torch.zeros(V, dtype=torch.float64), torch.zeros(V, dtype=torch.float64), 0
    # What the rounds are (settings: the caller's names for the method, law and prompt); a larger `samples` goes on.
    key = {"batch": batch, "seed": seed, "settings": settings or {}}
    if partial is not None and partial.is_file():
        saved = json.loads(partial.read_text())
        if saved["key"] == key:
            done = saved["done"]
            counts[torch.tensor(saved["tokens"], dtype=torch.long)] = torch.tensor(saved["counts"], dtype=torch.float64)
            draft = torch.tensor(saved["draft"], dtype=torch.float64)
    rounds = -(-samples // batch)
    fan = max(1, min(rounds, FAN_ROWS // batch))  # rounds one fanned-out step serves
    bar = tqdm(total=samples, initial=done, unit="run", disable=not progress, dynamic_ncols=True, desc="first tokens")
    fans = None  # unknown until a step at batch 1 shows a point tree (True) or a drawn one (False)
    shared = SharedPrefix(HFTarget(model))  # the prompt's prefill and the laws met so far, for every drawn round
    while done < samples:
        first_round = done // batch
        rows = min(batch * fan, samples - done)
        fanout = Fanout(verifier, rows, batch, lambda chunk: TorchSource(seed=round_seed(seed, first_round + chunk)))
        if fans is not False:
            proposer = FirstCandidates(factory(), V) if factory is not None else None
            decoder = Decoder(HFTarget(model), proposer, sampling, WatchedSource(seed=round_seed(seed, first_round)),
                              options=DecodeOptions(verifier=fanout,
                                                    policy=OneLevel() if verifier is LOSSLESS else None))
            decoder.prefill(prompt[:, :-1], root=prompt[0, -1:])
            decoder.step()
            fans = fanout.fanned
        if not fanout.fanned:  # a drawn tree: this round's runs side by side through the whole loop
            rows = min(batch, samples - done)
            proposer = FirstCandidates(factory(), V) if factory is not None else None
            decoder = Decoder(shared, proposer, sampling, TorchSource(seed=round_seed(seed, first_round)),
                              options=DecodeOptions(verifier=verifier,
                                                    policy=OneLevel() if verifier is LOSSLESS else None))
            decoder.prefill(prompt[:, :-1], copies=rows, root=prompt[0, -1:])
            firsts = decoder.step()[:, 0].cpu()
        else:
            firsts = fanout.first
        counts += torch.bincount(firsts, minlength=V).double()
        draft += proposer.law / proposer.law.sum().clamp_min(1e-300) * rows if proposer is not None else 0.0
        done += rows
        bar.update(rows)
        if partial is not None:
            seen = counts.nonzero().flatten()
            files.write_json(partial, {"key": key, "done": done, "tokens": seen.tolist(),
                                       "counts": counts[seen].tolist(), "draft": draft.tolist()})
    bar.close()
    return {"counts": counts, "draft": draft / draft.sum().clamp_min(1e-300), "target": target_law, "fanned": fans}


class SharedPrefix:
    """The target (framework.core.target.Target) of first steps whose rows are copies of one prompt and one root.
    The prompt's cache stays one row, prefilled once for every round. A node's logits read only the prompt, the
    root and the node's own path (tree attention keeps siblings apart), so they are kept by path: a step runs the
    target once, at batch 1, on the union of the paths no earlier step met (with their ancestors), and every row
    reads its nodes from what is kept. First steps only: it commits nothing."""

    packs_rows = False  # every row's nodes are read from what is kept

    def __init__(self, target: HFTarget, max_nodes: int = 2048, kept_bytes: int = 2**30):
        self.target, self.max_nodes = target, max_nodes  # a larger union is split (its mask is [M, M])
        self.kept_bytes = kept_bytes  # the kept laws' budget: past it, new paths run every time they appear
        self.vocab_size, self.device, self.dtype = target.vocab_size, target.device, target.dtype
        self.max_positions, self.lm = target.max_positions, target.lm  # heads read the model behind it
        self.forwards, self.nodes = 0, 0  # forwards the target ran, and the nodes in them
        self.prompt: torch.Tensor | None = None
        self.prefilled: TargetOutput | None = None
        self.forget()

    def forget(self) -> None:
        self.root: int | None = None
        self.index: dict[tuple[int, ...], int] = {}  # a node's token path (the root's is ()) -> its kept row
        self.logits: list[torch.Tensor] = []  # kept rows, [V] each
        self.hidden: list[torch.Tensor] = []  # [layers, H] each, when the target returns hidden states

    def room(self) -> int | None:
        return self.target.room()

    def provide_hidden(self, layers: tuple[int, ...]) -> None:
        if tuple(layers) != tuple(self.lm.hidden_layers):
            self.prompt = None  # kept rows lack (or hold other) hidden states
        self.target.provide_hidden(layers)

    def prefill(self, input_ids: torch.Tensor):
        if input_ids.shape[0] != 1:
            raise ValueError("SharedPrefix holds one prompt: prefill one row and copy it (Decoder.prefill(copies=))")
        if self.prompt is None or not torch.equal(self.prompt, input_ids):
            self.forget()
            self.prefilled, self.prompt = self.target.prefill(input_ids), input_ids.clone()
        return self.prefilled  # the cache is still the prompt's: every step drops its pending slots

    def select(self, rows: torch.Tensor) -> None:
        if bool((rows != 0).any()):
            raise ValueError("SharedPrefix rows are copies of its one prefill row")

    def forward_tree(self, root: torch.Tensor, tree: CandidateTree, side=None, speculating=None) -> TargetOutput:
        if side is not None:
            raise ValueError("SharedPrefix runs no side rows (a proposer that adds them drafts a point tree: Fanout)")
        if bool((root != root[0]).any()) or self.root not in (None, int(root[0])):
            raise ValueError("SharedPrefix rows share one root (Decoder.prefill(root=) at the first step)")
        self.root = int(root[0])
        B, N = tree.tokens.shape
        paths = torch.cat([torch.full((B, 1, max(tree.shape.max_depth, 1)), -1, dtype=torch.long, device=root.device),
                           node_token_paths(tree).to(root.device)], dim=1)  # [B, 1+N, D]: the root's path is empty
        distinct, inverse = torch.unique(paths.flatten(0, 1), dim=0, return_inverse=True)  # [K, D], [B (1+N)]
        inverse = inverse.view(B, 1 + N)  # sorted: a prefix (-1 padded) before its extensions, the root first
        parent = torch.zeros(distinct.shape[0], dtype=torch.long, device=root.device)
        parent[inverse[:, 1:]] = inverse[:, tree.parents.to(root.device) + 1]  # each distinct path's parent
        keys = [tuple(t for t in path if t >= 0) for path in distinct.tolist()]
        missing = [k for k, key in enumerate(keys) if key not in self.index]
        fresh = self.run(distinct, parent, missing, root[:1]) if missing else {}
        logits = torch.stack([fresh[k][0] if k in fresh else self.logits[self.index[key]]
                              for k, key in enumerate(keys)])
        hidden = None
        if self.lm.hidden_layers:
            hidden = torch.stack([fresh[k][1] if k in fresh else self.hidden[self.index[key]]
                                  for k, key in enumerate(keys)])
        for k in missing:  # kept while the budget lasts
            if (len(self.logits) + 1) * logits[0].numel() * logits.element_size() > self.kept_bytes:
                break
            self.index[keys[k]] = len(self.logits)
            self.logits.append(fresh[k][0])
            if hidden is not None:
                self.hidden.append(fresh[k][1])
        return TargetOutput(logits[inverse], None if hidden is None else hidden[inverse])  # [B, 1+N, V]

    def run(self, distinct: torch.Tensor, parent: torch.Tensor, missing: list[int], root: torch.Tensor) -> dict:
        """One forward at batch 1 on the `missing` distinct paths and their ancestors (split while over max_nodes):
        {distinct index: (logits [V], hidden [layers, H] or None)}."""
        needed = torch.zeros(distinct.shape[0], dtype=torch.bool)
        needed[missing] = True
        for _ in range(distinct.shape[1]):  # ancestors, a level a pass
            needed[parent[needed]] = True
        needed[0] = True  # the root: position 0 of every forward
        if int(needed.sum()) - 1 > self.max_nodes and len(missing) > 1:
            half = len(missing) // 2
            return {**self.run(distinct, parent, missing[:half], root),
                    **self.run(distinct, parent, missing[half:], root)}
        at = needed.nonzero().flatten()  # [M] in sorted order: parents first
        local = torch.full((distinct.shape[0],), -1, dtype=torch.long)
        local[at] = torch.arange(at.numel())
        token = distinct.gather(1, (distinct >= 0).sum(1, keepdim=True).clamp_min(1) - 1).flatten()  # each path's last
        sub = CandidateTree(token[at[1:]][None], local[parent[at[1:]]] - 1, kind="point")  # the root's children at -1
        out = self.target.forward_tree(root, sub)  # [1, M, V]
        self.target.lm.drop_pending()  # the prompt's row as it was
        self.forwards, self.nodes = self.forwards + 1, self.nodes + at.numel() - 1
        return {k: (out.logits[0, local[k]], None if out.hidden is None else out.hidden[0, local[k]]) for k in missing}

    def commit(self, result) -> None:
        pass


class OneLevel(FixedPolicy):
    """Draft the root's children only. The token rule tries them in order and emits the first it accepts, or a
    draw from the residual at the root: the first token's law reads nothing deeper, so deeper levels would only
    cost, in every fanned-out verification too (rules that judge a path jointly, block and traversal, keep the
    whole tree)."""

    def plan(self) -> Plan:
        return Plan(depth=1)


class WatchedSource(TorchSource):
    """A TorchSource that remembers whether anything drew from it (a point tree drawn with coins is not fixed)."""

    drawn = False

    def _rand(self, shape, device):
        self.drawn = True
        return super()._rand(shape, device)


def round_seed(seed: int, round_: int) -> int:
    """The seed of round `round_` of a run seeded `seed` (rounds are independent and each reproducible)."""
    return seed * 1_000_003 + round_


def summarise(counts: torch.Tensor, target: torch.Tensor, least_expected: float = 5.0) -> dict:
    """deviation_std / multinomial_std: EAGLE's figure, the spread of (frequency - p) over the support against
    its noise; carried by the few tokens of large p, it scatters by ~15-20% at any N. standardized_std: the spread of
    z = (frequency - p) / sqrt(p (1 - p) / N) over the tokens expected at least `least_expected` times, each z of
    variance 1 when the law is the target's: ~1 within a few 1 / sqrt(2 tokens)."""
    n = float(counts.sum())
    deviation = counts / n - target  # [V]
    noise = (target * (1 - target) / n).sqrt()
    support = target > 0
    expected = (target * n >= least_expected) & (target < 1)
    z = deviation[expected] / noise[expected]
    test = g_test({(i,): int(c) for i, c in enumerate(counts.tolist()) if c > 0},
                  {(i,): float(p) for i, p in enumerate(target.tolist()) if p > 0})
    return {"samples": int(n), "deviation_std": float(deviation[support].std()),
            "multinomial_std": float(noise[support].pow(2).mean().sqrt()),
            "standardized_std": float(z.pow(2).mean().sqrt()) if z.numel() else None,
            "standardized_tokens": int(z.numel()), "outside_support": int(counts[~support].sum()),
            "g_test_p": test.p_value, "g_test_passes": test.passes(1e-3),
            "g_test_dof": test.dof, "detectable_tv": test.detectable_tv()}  # the TV it detects with power 0.9


def plot(result: dict, top: int, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    order = result["target"].argsort(descending=True)[:top]
    x = torch.arange(order.numel()).numpy()
    fig, ax = plt.subplots(figsize=(10, 4))
    ax.bar(x - 0.27, result["target"][order].numpy(), 0.27, label="target law")
    ax.bar(x, result["draft"][order].numpy(), 0.27, label="draft's first candidates")
    ax.bar(x + 0.27, (result["counts"][order] / result["counts"].sum()).numpy(), 0.27, label="sampled frequency")
    ax.set_xticks(x, [str(int(i)) for i in order], rotation=90, fontsize=7)
    ax.set_xlabel("token id (the target's most likely first)")
    ax.set_ylabel("probability")
    ax.set_title(title, fontsize=9)
    ax.legend()
    fig.tight_layout()
    files.save_figure(fig, path, dpi=120)
    plt.close(fig)
