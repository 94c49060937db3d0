"""Pieces more than one proposer family uses: token histories, committed target positions, trees from per-position
laws, ragged reads into a draft's cache, head files and the refusal of heads given as paths."""
