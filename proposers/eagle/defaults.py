"""The settings SafeAILab's EAGLE decodes with when nothing was measured for a head (its published defaults), for
published heads that come without our eagle_tree.json.

- EAGLE-1's static tree: `mc_sim_7b_63` of eagle/model/choices.py (what `EaModel.eagenerate` takes by default),
  25 nodes as rank paths.
- EAGLE-2/3's dynamic tree: `EaModel.from_pretrained(total_token=60, depth=7, top_k=10)`: top_k children per
  beam node, `depth` as EAGLE's argument, at most 60 drafted nodes (our `budget`).
"""

from __future__ import annotations

EAGLE1_CHOICES = (
    (0,), (1,), (2,), (3,),
    (0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2, 0), (2, 1), (3, 0),
    (0, 0, 0), (0, 0, 1), (0, 0, 2), (0, 1, 0), (0, 1, 1), (0, 2, 0), (0, 2, 1), (1, 0, 0),
    (0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 0, 2),
    (0, 0, 0, 0, 0), (0, 0, 0, 0, 1),
)
PUBLISHED = {"choices": [list(c) for c in EAGLE1_CHOICES], "top_k": 10, "depth": 7, "budget": 60}
SOURCE = "SafeAILab/EAGLE's defaults (choices: mc_sim_7b_63; EaModel: top_k 10, depth 7, total_token 60)"
