"""Speculum's framework: the layers under the verifiers and the proposers.

    framework.core     trees, sampling laws, random sources, the Proposer and Target roles (torch only)
    framework.data, framework.training    token data and the one training loop
    framework.lm       KV slots, the cached LM, tree attention, HFTarget, text
    framework.zoo      the embedded model family
    framework.control, framework.constraints, framework.metrics, framework.workloads

The loop itself is `engine` and the proofs `harness`, top-level folders above `verifiers` and `proposers`
(docs/design.md section 1; tests/test_layers.py keeps the order). This package re-exports the public names
scripts use (framework.CandidateTree, framework.SamplingConfig, framework.HFTarget, ...); the target loads on
first use, since importing `framework` must not pull transformers.
"""

from importlib import import_module

from framework.core.ragged_tree import RaggedTrees
from framework.core.randomness import RandomSource, ReplaySource, TorchSource
from framework.core.sampling import SamplingConfig, process_logits, process_tree_logits
from framework.core.tree import CandidateTree
from framework.core.tree_shape import TreeShape

_LAZY = {
    "HFTarget": "framework.lm.target",
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
