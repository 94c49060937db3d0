"""Self-speculation: drafting with part of the target itself (early exit, layer skipping)."""

from proposers.self_spec.proposer import EarlyExitProposer, LayerSkipProposer, SelfSpeculationProposer

__all__ = ["EarlyExitProposer", "LayerSkipProposer", "SelfSpeculationProposer"]
