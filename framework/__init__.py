"""Speculum's framework: the layers under the verifiers and the proposers, and the ones above them.

    framework.core     trees, sampling laws, random sources, the Proposer and Target roles (torch only)
    framework.lm       KV slots, the cached LM, tree attention, HFTarget, text
    framework.zoo      the embedded model family
    framework.engine   the loop (generate, Decoder)
    framework.harness  the proofs

(docs/design.md section 1; tests/test_layers.py keeps the order). This package re-exports the public
names scripts use (framework.CandidateTree, framework.HFTarget, framework.generate, ...); the engine and
the target load on first use, since importing `framework` must not pull the layers above `verifiers`.
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
