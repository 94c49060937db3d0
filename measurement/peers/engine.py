"""A production engine beside us, in a process and an environment of its own: Speculum's side of the peer protocol.

The peer's environment pins its own versions (vLLM's CPU build wants transformers < 5.20), so Speculum never
imports it: a worker script runs under the peer's Python and answers one JSON line per request
(measurement/peers/vllm_worker.py says the requests). `PeerEngine` holds one worker, i.e. one loaded model and
speculative setting, for as many generations as asked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from framework.metrics.engine_counters import EngineCounters

ROOT = Path(__file__).resolve().parents[2]
ENVIRONMENTS = ROOT / ".peers"  # one virtual environment per peer, built by experiments.peers.setup
WORKERS = {"vllm": Path(__file__).with_name("vllm_worker.py"), "arctic": Path(__file__).with_name("arctic_worker.py")}


class PeerMissing(RuntimeError):
    """The peer's environment is not built: the message says the command that builds it."""


def peer_python(peer: str, python: str | None = None) -> Path:
    """The interpreter of a peer's environment: `python` when given, else .peers/<peer>/bin/python."""
    if peer not in WORKERS:
        raise ValueError(f"unknown peer engine {peer!r} (have {sorted(WORKERS)})")
    path = Path(python) if python else ENVIRONMENTS / peer / "bin" / "python"
    if not path.is_file():
        raise PeerMissing(f"no {peer} environment at {path}: build it with `python -m experiments.peers.setup {peer}`")
    return path


@dataclass
class PeerOutput:
    tokens: list[list[int]]  # new tokens per prompt
    seconds: float  # the engine's own generate call, measured inside the worker
    counters: EngineCounters  # its speculative-decoding counters over the call


class PeerWorker:
    """A worker script under a peer environment's Python, asked one JSON line at a time (answer_of reads each)."""

    def __init__(self, peer: str, python: str | None = None, worker: Path | None = None, env: dict | None = None):
        interpreter = peer_python(peer, python)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false", **(env or {})}
        env.pop("PYTHONPATH", None)  # our environment's packages must not shadow the peer's
        self.peer = peer
        self.process = subprocess.Popen([str(interpreter), str(worker or WORKERS[peer])], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=sys.stderr, text=True, env=env, cwd=ROOT)

    def ask(self, request: dict) -> dict:
        if self.process.poll() is not None:
            raise RuntimeError(f"the {self.peer} worker has exited (code {self.process.returncode}); its log is above")
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            self.process.wait()
            raise RuntimeError(f"the {self.peer} worker ended without answering {request['op']!r} "
                               f"(code {self.process.returncode}); its log is above")
        return answer_of(line, self.peer)

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self.process.stdin.write(json.dumps({"op": "close"}) + "\n")
                self.process.stdin.close()
                self.process.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()


@dataclass
class PeerEngine:
    """One worker process holding one model under one speculative setting (None: plain decoding)."""

    peer: str
    model: Path
    max_model_len: int
    speculative_config: dict | None = None
    dtype: str = "float32"
    threads: int = 1
    seed: int = 0
    python: str | None = None
    kv_cache_gib: int = 1
    worker_env: dict = field(default_factory=dict)  # added to the worker's environment
    worker: Path | None = None  # the worker script (None: the peer's own, WORKERS)
    max_num_seqs: int | None = None  # the most requests decoding together (None: the engine's default)
    versions: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.process = PeerWorker(self.peer, self.python, self.worker, self.worker_env)
        loaded = self.ask({"op": "load", "model": str(self.model), "dtype": self.dtype, "seed": self.seed,
                           "max_model_len": self.max_model_len, "speculative_config": self.speculative_config,
                           "threads": self.threads, "kv_cache_gib": self.kv_cache_gib,
                           "max_num_seqs": self.max_num_seqs})
        self.versions = loaded["versions"]

    def ask(self, request: dict) -> dict:
        return self.process.ask(request)

    def generate(self, prompts: list[list[int]], max_tokens: int, sampling: dict,
                 seed: int | None = None) -> PeerOutput:
        out = self.ask({"op": "generate", "prompts": prompts, "max_tokens": max_tokens, "sampling": sampling,
                        "seed": seed})
        return PeerOutput(out["tokens"], out["seconds"], EngineCounters.of(out["counters"]))

    def close(self) -> None:
        self.process.close()

    def __enter__(self) -> PeerEngine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def answer_of(line: str, peer: str) -> dict:
    """One protocol answer: its fields when ok, else the worker's error raised here, named."""
    try:
        answer = json.loads(line)
    except json.JSONDecodeError as error:
        raise RuntimeError(f"the {peer} worker wrote a line that is not JSON ({error}): {line[:200]!r}") from None
    if not isinstance(answer, dict) or "ok" not in answer:
        raise RuntimeError(f"the {peer} worker's answer has no 'ok' field: {line[:200]!r}")
    if not answer["ok"]:
        raise RuntimeError(f"{peer}: {answer.get('error')}\n{answer.get('traceback', '')}")
    return {k: v for k, v in answer.items() if k != "ok"}
