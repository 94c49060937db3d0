"""The first speculated token, sampled many times through the real loop, against the target's own law;
the draft's law of its first candidates beside it; a summary and a plot.

A library of experiments.first_token and experiments.compare; not an entry point.
"""

from __future__ import annotations

from pathlib import Path

import torch

from framework.core import files
from framework.core.randomness import TorchSource
from framework.core.sampling import process_logits
from framework.engine import Decoder
from framework.harness.stats import g_test
from framework.lm.target import HFTarget
from verifiers import LOSSLESS, Verifier


class FirstCandidates:
    """A proposer that passes every call through and adds up its trees' first-candidate laws."""

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
            self.law.index_add_(0, depth1.flatten(), torch.full((depth1.numel(),), 1.0 / depth1.shape[1], dtype=torch.float64))
        return tree

    def commit(self, result):
        self.inner.commit(result)

    def select(self, rows: torch.Tensor):
        self.inner.select(rows)


def first_tokens(model, factory, prompt: torch.Tensor, sampling, samples: int, batch: int, seed: int,
                 verifier: Verifier = LOSSLESS) -> dict:
    """Counts of the first speculated token [V], the draft's first-candidate law [V], the target's law [V]."""
    with torch.no_grad():
        target_law = process_logits(model(prompt).logits[:, -1].double(), sampling)[0]  # [V]
    V = target_law.numel()
    counts, draft = torch.zeros(V, dtype=torch.float64), torch.zeros(V, dtype=torch.float64)
    rng, done = TorchSource(seed=seed), 0
    while done < samples:
        rows = min(batch, samples - done)
        proposer = FirstCandidates(factory(), V) if factory is not None else None
        decoder = Decoder(HFTarget(model), proposer, sampling, rng, verifier=verifier)
        decoder.prefill(prompt[:, :-1], copies=rows, root=prompt[0, -1:])
        counts += torch.bincount(decoder.step()[:, 0].cpu(), minlength=V).double()
        draft += proposer.law if proposer is not None else 0.0
        done += rows
    return {"counts": counts, "draft": draft / draft.sum().clamp_min(1e-300), "target": target_law}


def summarise(counts: torch.Tensor, target: torch.Tensor) -> dict:
    n = float(counts.sum())
    deviation = counts / n - target  # [V]
    noise = (target * (1 - target) / n).sqrt()
    support = target > 0
    test = g_test({(i,): int(c) for i, c in enumerate(counts.tolist()) if c > 0},
                  {(i,): float(p) for i, p in enumerate(target.tolist()) if p > 0})
    return {"samples": int(n), "deviation_std": float(deviation[support].std()),
            "multinomial_std": float(noise[support].pow(2).mean().sqrt()),
            "outside_support": int(counts[~support].sum()), "g_test_p": test.p_value, "g_test_passes": test.passes(1e-3),
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
