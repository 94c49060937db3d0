"""MtpProposer: a model's own MTP modules draft a chain (top_k 1) or a tree (top_k per depth, a budget of nodes),
through the feature-level drafter EAGLE heads use (proposers/eagle/proposer.py): the modules keep their own KV,
the committed positions are read with the target's last hidden state, each drafted level through the module for
its depth. Children by the drafts' values: kind point, lossless through the shared verifier."""

from __future__ import annotations

from proposers.eagle.proposer import EagleProposer
from proposers.mtp.head import MtpHead


class MtpProposer(EagleProposer):
    HEAD = MtpHead
    HEAD_ARGUMENT, HEAD_KEY, HEAD_LOADER = "modules", "models.mtp.modules.path", "proposers.mtp.layouts.read_mtp"

    def __init__(self, modules: MtpHead, depth: int | str = 3, top_k: int | str = 1,
                 budget: int | str | None = None, choices=None, backend: str = "auto"):
        """modules: a loaded MtpHead (proposers.mtp.layouts.read_mtp reads a target's own MTP tensors or a
        speculators MTP folder; a config builds it: models.mtp.modules.path=<folder>). depth: draft tokens per step
        (past the checkpoint's modules the last is reused); top_k 1 drafts a chain, more a tree of at most `budget`
        nodes (default top_k x depth). Any of them "auto": the setting its training run measured best
        (eagle_tree.json beside the modules, as for an EAGLE head)."""
        if budget is None:
            budget = "auto" if "auto" in (depth, top_k) else top_k * depth
        super().__init__(modules, choices, top_k, depth, budget, backend)
