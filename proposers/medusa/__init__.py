"""Medusa: extra heads on the target's last hidden state draft a static tree in one step (heads,
proposer, training; published.py reads and writes FasterDecoding's layouts). Public names come from `proposers`."""
