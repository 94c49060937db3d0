"""Each verification rule's expected accepted length against the best any lossless verifier can reach.

    python -m experiments.oracle                  # V = 3, chains of 2 and 3, iid trees; 3 law seeds each
    python -m experiments.oracle vocab=2 seeds=5
    python -m experiments.oracle kind=wor       # siblings drawn without replacement (point: top-k trees)

The bound is a linear program over every coupling of the drafted tree with the target's stream
(harness/oracle.py); each rule's figure enumerates every draw and coin of the real code.
Both are exact: the table needs no sampling error.
"""

from __future__ import annotations

import warnings

import hydra
from omegaconf import DictConfig

from harness.oracle import ToyLaws, best_acceptance, rule_acceptance
from verifiers import LOSSLESS
from verifiers.block import BlockVerifier
from verifiers.multidraft import multidraft_verifier
from verifiers.traversal import TraversalVerifier

SHAPES = {"chain2": [-1, 0], "chain3": [-1, 0, 1], "root2 (iid)": [-1, -1], "root3 (iid)": [-1, -1, -1],
          "binary2 (iid)": [-1, -1, 0, 0], "two chains of 2 (iid)": [-1, 0, -1, 2]}
RULES = {"token": LOSSLESS, "block": BlockVerifier(), "traversal": TraversalVerifier(),
         "multidraft": multidraft_verifier()}


@hydra.main(config_path="../conf", config_name="oracle", version_base="1.3")
def main(args: DictConfig) -> None:
    warnings.simplefilter("ignore")  # block's "trees go to the token rule": the table says it
    print("| shape | seed | best lossless (LP) | " + " | ".join(f"{r} (share of best)" for r in RULES) + " |")
    print("|---|---:|---:|" + "---:|" * len(RULES))
    for name, parents in SHAPES.items():
        for seed in range(args.seeds):
            laws = ToyLaws(args.vocab, seed)
            best = best_acceptance(parents, laws, args.kind)
            cells = [rule_acceptance(rule, parents, laws, args.kind) for rule in RULES.values()]
            print(f"| {name.replace('iid', args.kind)} | {seed} | {best:.4f} | "
                  + " | ".join(f"{c:.4f} ({c / best:.3f})" for c in cells) + " |")
    return


if __name__ == "__main__":
    main()
