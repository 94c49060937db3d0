"""The tree Medusa decodes with when nothing was measured for a set of heads: FasterDecoding/Medusa's published
default (`mc_sim_7b_63` of medusa/model/medusa_choices.py, 63 nodes as rank paths), for published heads that come
without our medusa_tree.json. Paths deeper than the heads reach are left out, as a tree cannot use them."""

from __future__ import annotations

MEDUSA_CHOICES = (
    (0,), (0, 0), (1,), (0, 1), (2,), (0, 0, 0), (1, 0), (0, 2), (3,), (0, 3), (4,), (0, 4), (2, 0), (0, 5), (0, 0, 1),
    (5,), (0, 6), (6,), (0, 7), (0, 1, 0), (1, 1), (7,), (0, 8), (0, 0, 2), (3, 0), (0, 9), (8,), (9,), (1, 0, 0),
    (0, 2, 0), (1, 2), (0, 0, 3), (4, 0), (2, 1), (0, 0, 4), (0, 0, 5), (0, 0, 0, 0), (0, 1, 1), (0, 0, 6), (0, 3, 0),
    (5, 0), (1, 3), (0, 0, 7), (0, 0, 8), (0, 0, 9), (6, 0), (0, 4, 0), (1, 4), (7, 0), (0, 1, 2), (2, 0, 0), (3, 1),
    (2, 2), (8, 0), (0, 5, 0), (1, 5), (1, 0, 1), (0, 2, 1), (9, 0), (0, 6, 0), (0, 0, 0, 1), (1, 6), (0, 7, 0),
)
SOURCE = "FasterDecoding/Medusa's default tree (mc_sim_7b_63)"


def published_choices(num_heads: int) -> list[tuple[int, ...]]:
    return [c for c in MEDUSA_CHOICES if len(c) <= num_heads]
