"""Pieces more than one proposer family uses: token histories, head files, the depth schedule."""
