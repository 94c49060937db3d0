"""Speculum core: types, sampling, randomness, the target adapter, the loop and the harness.

The target adapter and the loop load lazily: importing the types (as verifiers do) pulls in
neither transformers nor the engine.
"""

from importlib import import_module

from framework.core.ragged_tree import RaggedTrees
from framework.core.randomness import RandomSource, ReplaySource, TorchSource
from framework.core.sampling import SamplingConfig, process_logits, process_tree_logits
from framework.core.tree import CandidateTree
from framework.core.tree_shape import TreeShape

_LAZY = {
    "HFTarget": "framework.lm.target",
    "generate": "framework.engine",
    "GenerationOutput": "framework.engine",
    "Decoder": "framework.engine",
    "DecodeState": "framework.core.proposer",
    "Proposer": "framework.core.proposer",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'framework' has no attribute {name!r}")


__all__ = [
    "CandidateTree", "RaggedTrees", "TreeShape", "SamplingConfig", "process_logits", "process_tree_logits",
    "RandomSource", "TorchSource", "ReplaySource", *_LAZY,
]
