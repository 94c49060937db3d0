"""One table of a Hydra multirun sweep: every job's overrides beside its figures.

    python -m experiments.sweep_merge folder=multirun/2026-12-01/10-00-00           # one sweep (or all of multirun/)
    python -m experiments.sweep_merge folder=multirun/2026-12-01/10-00-00 all=true  # nested figures in the table too

A job folder is one holding `.hydra/overrides.yaml` (Hydra writes it before the job runs) or a
result.json (experiments.run and experiments.compare write one per job). A job without a result
(it crashed, or is still running) is a row with an `error`, never dropped; so is a job the sweep planned
but never started (killed before it): the sweep's multirun.yaml says what was planned (every job of the
basic sweeper, with its overrides; the number of trials of a search). Prints a markdown table and writes
<folder>/sweep.csv with every column.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import hydra
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

from framework.core import files
from measurement.common import job_overrides, parse_overrides

RESULT = "result.json"
PLAN = "multirun.yaml"  # Hydra writes it in the sweep folder before the first job
NESTED = ":"  # "stats:tokens_per_forward"; Hydra keys never hold a colon, so no override column does
SKIPPED = ("config", "choices", "overrides")  # the job's whole config and group choices: its overrides say what varied


def collect(folder: str | Path) -> list[dict]:
    """One row per job under `folder`: {"job": its path under folder, **overrides, "error"?, **figures}."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"not a folder: {folder}")
    jobs = {p.parent.parent for p in folder.rglob(".hydra/overrides.yaml")} | {p.parent for p in folder.rglob(RESULT)}
    if not jobs:
        raise ValueError(f"no Hydra job folders (with .hydra/overrides.yaml or {RESULT}) under {folder}")
    rows = [row(job, folder) for job in sorted(jobs, key=lambda p: natural(p.relative_to(folder)))]
    for plan in sorted(folder.rglob(PLAN)):
        rows += never_started(plan, [job for job in jobs if job.parent == plan.parent], folder)
    return rows


NOT_STARTED = "never started: the sweep stopped before this job (no job folder)"


def planned_jobs(plan: Path) -> list[list[str]] | int | None:
    """What a sweep's multirun.yaml planned: each job's overrides (the basic sweeper: the product of the
    sweep's values, in launch order), or a number of trials (a search), or None (no way to tell)."""
    config = OmegaConf.load(plan)
    sweeper = config.hydra.get("sweeper", {})
    if str(sweeper.get("_target_", "")).endswith("BasicSweeper"):
        params = [f"{k}={v}" for k, v in (sweeper.get("params") or {}).items()]
        overrides = OverridesParser.create().parse_overrides(params + list(config.hydra.overrides.task))
        return [job for batch in BasicSweeper.split_arguments(overrides, None) for job in batch]
    trials = sweeper.get("n_trials")
    return trials if isinstance(trials, int) else None


def never_started(plan: Path, jobs: list[Path], folder: Path) -> list[dict]:
    """Rows for the jobs `plan` planned that none of `jobs` (the folders beside it) ran."""
    where = plan.parent.relative_to(folder).as_posix()
    label = "" if where == "." else f"{where}/"
    try:
        planned = planned_jobs(plan)
    except Exception as e:  # noqa: BLE001 - an unreadable plan costs its rows, not the table
        return [{"job": f"{label}{PLAN}", "error": f"unreadable {PLAN}: {e}"}]
    if isinstance(planned, int):
        return [{"job": f"{label}(trial {n})", "error": NOT_STARTED} for n in range(len(jobs), planned)]
    if planned is None:
        return []
    ran = [job_overrides(job) for job in jobs]
    return [{"job": f"{label}(job {n})", **parse_overrides(job), "error": NOT_STARTED}
            for n, job in enumerate(planned) if parse_overrides(job) not in ran]


def natural(path: Path) -> tuple:
    """Sort key: job 10 after job 9."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in path.parts)


def row(job: Path, folder: Path) -> dict:
    out, errors = {"job": job.relative_to(folder).as_posix() or "."}, []
    try:
        out.update(job_overrides(job))
    except Exception as e:  # a broken file is this job's problem, not the sweep's
        errors.append(f"unreadable .hydra/overrides.yaml: {e}")
    try:
        result = json.loads((job / RESULT).read_text())
        if not isinstance(result, dict):
            raise ValueError(f"holds a {type(result).__name__}, not an object")
    except FileNotFoundError:
        errors.append(f"no {RESULT}: the job crashed or has not finished (see its .log)")
        result = {}
    except ValueError as e:  # json.JSONDecodeError included
        errors.append(f"unreadable {RESULT}: {e}")
        result = {}
    recorded = result.get("overrides")
    if isinstance(recorded, list) and "unreadable" not in " ".join(errors):
        try:
            if parse_overrides(recorded) != job_overrides(job):
                errors.append(f"{RESULT} was written by a job with the overrides {recorded}, not this folder's")
        except Exception as e:  # noqa: BLE001
            errors.append(f"{RESULT} holds unreadable overrides: {e}")
    if errors:
        out["error"] = "; ".join(errors)
    for key, value in figures(result).items():
        out[key if key not in out else f"result{NESTED}{key}"] = value
    return out


def figures(result: dict) -> dict:
    """The result's numbers: top-level ones, and one level down as "stats:tokens_per_forward"."""
    out = {}
    for key, value in result.items():
        if key in SKIPPED:
            continue
        if isinstance(value, dict):
            out.update({f"{key}{NESTED}{k}": v for k, v in value.items() if is_number(v)})
        elif is_number(value):
            out[key] = value
    return out


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def columns_of(rows: list[dict]) -> list[str]:
    """Every key in the order first seen (job, overrides, figures), then `error` if any row has one."""
    keys = list(dict.fromkeys(k for r in rows for k in r))
    return [k for k in keys if k != "error"] + ["error"] * ("error" in keys)


def table(rows: list[dict], nested: bool = False) -> str:
    """Markdown; nested figures ("stats:...") only when asked (sweep.csv always has them)."""
    columns = [c for c in columns_of(rows) if nested or NESTED not in c]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def cell(value) -> str:
    if value is None:
        return ""
    return f"{value:.4g}" if isinstance(value, float) else str(value).replace("|", "\\|")


def write_csv(rows: list[dict], path: Path) -> Path:
    with files.replacing(path) as temporary, temporary.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns_of(rows), restval="")
        writer.writeheader()
        writer.writerows(rows)
    return path


@hydra.main(config_path="../conf", config_name="sweep_merge", version_base="1.3")
def main(args: DictConfig) -> None:
    try:
        print(report(Path(args.folder), nested=args.all))
    except ValueError as e:
        raise SystemExit(f"experiments.sweep_merge: {e}") from None


def report(folder: Path, nested: bool = False) -> str:
    """The table of a sweep's jobs, and a line on what failed; writes sweep.csv into the folder."""
    rows = collect(folder)
    unstarted = sum(r.get("error") == NOT_STARTED for r in rows)
    failed = sum("error" in r for r in rows) - unstarted
    return (f"{table(rows, nested=nested)}\n\n{len(rows)} jobs, {failed} with an error, {unstarted} never started; "
            f"wrote {write_csv(rows, folder / 'sweep.csv')}")


if __name__ == "__main__":
    main()
