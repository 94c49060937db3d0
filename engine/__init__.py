"""The decoding loop (engine.loop: generate, Decoder) and continuous batching over it (engine.scheduler).

Above `verifiers` (it verifies with them) and beside `proposers` (it knows a proposer by its Protocol only); the
names scripts use are re-exported here: `from engine import generate`.
"""

from engine.loop import DecodeOptions, Decoder, GenerationOutput, generate

__all__ = ["DecodeOptions", "Decoder", "GenerationOutput", "generate"]
