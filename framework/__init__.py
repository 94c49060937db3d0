"""Speculum core: types, sampling, randomness, the target adapter, the loop and the harness."""

from framework.randomness import RandomSource, ReplaySource, TorchSource
from framework.sampling import SamplingConfig, process_logits, process_tree_logits
from framework.tree import CandidateTree
from framework.tree_shape import TreeShape

__all__ = [
    "CandidateTree", "TreeShape", "SamplingConfig", "process_logits", "process_tree_logits",
    "RandomSource", "TorchSource", "ReplaySource",
]
