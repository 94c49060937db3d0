"""Layer 2, the language-model runtime: KV slots, the cached LM, tree attention, HFTarget, text.

Imports framework.core and verifiers (HFTarget scores trees for them); never the engine or proposers.
"""
