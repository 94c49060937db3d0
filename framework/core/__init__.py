"""Layer 0, the contract: trees, sampling laws, the random source and the roles (torch only).

Everything above imports this; this imports nothing of the project. See docs/design.md.
"""
