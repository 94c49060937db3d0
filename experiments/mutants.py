"""Mutation suite: plant each known bug, run the exact harness, and demand that it is caught.

The verifier's and the pipeline's bugs run on the exact matrix (toy tables); the target adapter's
(positions, KV commit, side rows) on their witness through the real loop.

    python -m experiments.mutants          # exits non-zero if a bug survives or the clean verifier fails
"""

from __future__ import annotations

import argparse
import sys

from framework.harness.cases import exact_cases
from framework.harness.mutants import mutants
from framework.harness.report import mutants_table, run_case, run_mutant
from framework.harness.target_mutants import target_mutants
from framework.target import HFTarget


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--full", action="store_true", help="run every case for every mutant (worst TV over all)")
    args = parser.parse_args(argv)
    cases = exact_cases()
    clean_failures = [r for r in map(run_case, cases) if not r.passed]
    results = [run_mutant(m, cases, stop_when_caught=not args.full) for m in mutants()]
    print(mutants_table(results))
    survivors = [r.mutant.name for r in results if not r.caught]
    print("\n| target adapter bug | TV (clean adapter) | TV (with the bug) | caught |\n|---|---|---|---|")
    for m in target_mutants():
        clean, buggy = m.witness(HFTarget), m.witness(m.target)
        caught = clean <= 1e-9 and buggy > 1e-6
        print(f"| {m.name}: {m.bug} | {clean:.1e} | {buggy:.2e} | {'yes' if caught else 'NO'} |")
        if not caught:
            survivors.append(m.name)
    total = len(results) + len(target_mutants())
    print(f"\nclean verifier: {len(cases) - len(clean_failures)}/{len(cases)} cases pass")
    print(f"mutants caught: {total - len(survivors)}/{total}")
    if clean_failures or survivors:
        print("FAILED:", [r.case for r in clean_failures], survivors, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
