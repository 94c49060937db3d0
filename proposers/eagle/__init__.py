"""EAGLE-1/2/3: a one-layer head drafts autoregressively on the target's features (head, layers,
proposer, tree, training; published.py and speculators.py read and write the published layouts).
Public names come from `proposers`."""
