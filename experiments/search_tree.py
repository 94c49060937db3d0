"""A tree measured for any head on any target, written beside the head (`auto` settings read it from then on).

    python -m experiments.search_tree target.path=/models/Llama-3.1-8B-Instruct head=/models/EAGLE3-LLaMA3.1-Instruct-8B

1. Prompts: the workload's (workload=..., rendered as the target expects; the zoo's held-out stdlib code by
   default), or, for a target without a tokenizer, the run's token-id prompt; each continued greedily by the target.
2. Acceptance on those continuations (the text the head will meet): per depth (EAGLE: a chain fed the text) or
   head (Medusa) and rank, how often the head's candidate is the target's own next token.
3. The static tree grown from it (proposers/search/tree_search.py) against this machine's forward_tree cost; for
   EAGLE, static prefixes and dynamic (top_k, depth, budget) settings decoded on the prompts, kept by tokens per ms.
4. eagle_tree.json / medusa_tree.json in `out` (default: the head's folder) and search_measurements.json beside it.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from measurement.tree_search import search


@hydra.main(config_path="../conf", config_name="search_tree", version_base="1.3")
def main(cfg: DictConfig) -> None:
    search(cfg)


if __name__ == "__main__":
    main()
