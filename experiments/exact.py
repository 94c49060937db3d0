"""Exact harness table: every lossless case against the target's own law, plus the lossy baseline.

    python -m experiments.exact            # the default matrix (~10 s)
    python -m experiments.exact all=true      # adds the heavy cases (minutes)
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from harness.cases import exact_cases
from harness.exact import Pipeline
from harness.report import cases_table, run_case
from verifiers import typical_verifier


@hydra.main(config_path="../conf", config_name="exact", version_base="1.3")
def main(args: DictConfig) -> None:
    cases = exact_cases(heavy=args.all)
    results = [run_case(case) for case in cases]
    print("## Lossless verifier: exact law of the first D tokens vs the target's\n")
    print(cases_table(results))
    lossy = Pipeline(verifier=typical_verifier())
    lossy_results = [run_case(case, lossy) for case in cases if case.name.startswith("chain3/")]
    print("\n## Typical acceptance (lossy baseline; must fail)\n")
    print(cases_table(lossy_results))
    passed = sum(r.passed for r in results)
    caught = sum(not r.passed for r in lossy_results)
    print(f"\nlossless: {passed}/{len(results)} cases exact; typical acceptance: fails {caught}/{len(lossy_results)}")
    if not (passed == len(results) and caught > 0):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
