"""Mutation suite: plant each known bug, run the exact harness, and demand that it is caught.

Two kinds. The exact matrix's mutants (harness/mutants.py) swap one part of the pipeline on toy
tables: the verification rules' bugs are subclasses of the production rules ("production"), a few live in
the matrix's own toy loop ("harness"). The loop's mutants (harness/loop_mutants.py) plant a bug in
code users run (target adapter, attention, sampling law, draft model, decoder, the path handed to the KV
commit) and run the exact law through the real loop. Each row says where the bug lives and the TV its
witness measures, against the mutant's own clean rule.

    python -m experiments.mutants          # exits non-zero if a bug survives or a clean witness fails
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from harness.cases import exact_cases
from harness.exact import Pipeline
from harness.loop_mutants import CAUGHT_ABOVE, CLEAN_AT_MOST, loop_mutants
from harness.mutants import mutants
from harness.report import mutants_table, run_case, run_mutant


@hydra.main(config_path="../conf", config_name="mutants", version_base="1.3")
def main(args: DictConfig) -> None:
    cases = exact_cases()
    clean_failures = [r for r in map(run_case, cases) if not r.passed]
    # the token rule's mutants share the clean pipeline just run on every case: no need to run it again per case
    results = [run_mutant(m, cases, stop_when_caught=not args.full,
                          clean_checked=m.clean == Pipeline() and not clean_failures)
               for m in mutants()]
    print(mutants_table(results))
    survivors = [r.mutant.name for r in results if not r.caught]
    print("\n| loop bug | lives in | witness | TV (clean code) | TV (with the bug) | caught |\n"
          "|---|---|---|---|---|---|")
    for m in loop_mutants():
        clean, buggy = m.tvs()
        caught = clean <= CLEAN_AT_MOST and buggy > CAUGHT_ABOVE
        print(f"| {m.name}: {m.bug} | {m.where} | {m.witness.describe()} | {clean:.1e} | "
              f"{buggy:.2e} | {'yes' if caught else 'NO'} |")
        if not caught:
            survivors.append(m.name)
    total = len(results) + len(loop_mutants())
    production = sum(r.mutant.where == "production" for r in results) + len(loop_mutants())
    print(f"\nclean verifier: {len(cases) - len(clean_failures)}/{len(cases)} cases pass")
    print(f"mutants caught: {total - len(survivors)}/{total} ({production} in production code)")
    if clean_failures or survivors:
        print("FAILED:", [r.case for r in clean_failures], survivors, file=sys.stderr)
        raise SystemExit(1)
    return


if __name__ == "__main__":
    main()
