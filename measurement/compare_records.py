"""experiments.compare's records.jsonl: one line per finished run or check, keyed by what a run must share with
a stored record to reuse it (a rerun of the same command skips what is there), and the record ids of a timed
unit."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from framework.core import files
from measurement.compare_grid import OWN
from measurement.compare_report import FIXED
from measurement.peers.rows import ROWS as PEER_ROWS

ZOO_SUITE = "framework.workloads.zoo.ZooPrompts"


def fingerprint(cfg: DictConfig, batch: int = 1) -> str:
    """What a stored record of this batch size must share with this run to be reused."""
    exp = cfg.experiment
    fields = {"target": OmegaConf.to_container(cfg.target, resolve=True), "seed": cfg.seed,
              "max_new_tokens": exp.max_new_tokens, "threads": exp.num_threads, "baseline": exp.baseline,
              "prompts": OmegaConf.to_container(exp.prompts) if exp.prompts is not None else None,
              "verifier": OmegaConf.to_container(cfg.verifier, resolve=True) if cfg.get("verifier") else None,
              # the run's own proposer group is one row name whatever its settings: its records are its settings'
              "own": OmegaConf.to_container(cfg.proposer, resolve=True) if OWN in (exp.methods or []) else None}
    # vLLM's settings name its rows' records (runs without keep theirs)
    if any(m in PEER_ROWS for m in exp.methods or []):
        fields["vllm"] = OmegaConf.to_container(exp.vllm, resolve=True)
    if batch != 1:  # B = 1 keeps the key of the records made before the batch axis
        fields["batch"] = batch
    # the zoo's keeps the keys made before workloads
    if exp.prompts is None and cfg.workload.suite._target_ != ZOO_SUITE:
        fields["workload"] = OmegaConf.to_container(cfg.workload, resolve=True)
    return json.dumps(fields, sort_keys=True)  # a token-id workload is not named by its category and index


def record_key(cfg: DictConfig) -> Callable[[dict], str]:
    """A record's key: the fingerprint at its batch size (a record without one is of batch size 1)."""
    at = cache(lambda batch: fingerprint(cfg, batch))
    return lambda record: at(record.get("batch", 1))


class Records:
    """records.jsonl: one line per finished run or check, appended at once (nothing computed is lost; a line
    cut off by a kill is dropped on the next read, and its run made again)."""

    def __init__(self, path: Path, key: Callable[[dict], str]):
        self.path, self.key = path, key
        self.done = {record["id"]: record for record in files.read_json_lines(path) if record.get("key") == key(record)}

    def add(self, record: dict) -> None:
        record = {**record, "key": self.key(record)}
        self.done[record["id"]] = record
        files.append_line(self.path, json.dumps(record))


@dataclass(frozen=True)
class Unit:
    """One timed workload: `batch` prompts of a category from its prompt `index` on, under one sampling."""

    category: str
    sampling: str
    batch: int
    index: int
    turn: int = 1  # of a multi-turn prompt: later turns follow the target's own answer to the one before

    def axes(self, policy: str) -> str:
        """The id's tail: empty for the fixed policy at B = 1 and turn 1, so the records made before these axes
        stay valid."""
        return ((f"/policy={policy}" if policy != FIXED else "") + (f"/batch={self.batch}" if self.batch != 1 else "")
                + (f"/turn={self.turn}" if self.turn != 1 else ""))

    def run_id(self, method: str, policy: str = FIXED) -> str:
        return f"run/{method}/{self.sampling}/{self.category}/{self.index}{self.axes(policy)}"

    def plain_id(self, turn: int) -> str:
        return f"plain/{self.sampling}/{self.category}/{self.index}/{turn}{self.axes(FIXED)}"

    def fields(self) -> dict:
        return {"sampling": self.sampling, "category": self.category, "prompt": self.index, "batch": self.batch,
                "turn": self.turn}
