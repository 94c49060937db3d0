"""vLLM's side of the peer protocol (measurement/peers/engine.py): run by the peer environment's Python
(`python -m experiments.peers.setup vllm` builds it), never imported by Speculum's. It reads one JSON request a
line on stdin and answers each with one JSON line on the protocol stream (the process's original stdout; vLLM's
own logging is sent to stderr so that it cannot corrupt the protocol).

    {"op": "load", "model": folder, "dtype": "float32", "max_model_len": n, "speculative_config": {...} | null,
     "threads": 1, "kv_cache_gib": 1, "in_process": true, "max_num_seqs": c | null}
    {"op": "generate", "prompts": [[ids]], "max_tokens": n, "sampling": {"temperature": 0.0, ...}, "seed": 0}
    {"op": "close"}

A generate answers the new tokens per prompt, the seconds of the engine's own generate call and the change of
vLLM's speculative-decoding counters over it. Standard library and vLLM only: this file runs outside Speculum.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

COUNTERS = {"vllm:spec_decode_num_drafts": "drafts", "vllm:spec_decode_num_draft_tokens": "draft_tokens",
            "vllm:spec_decode_num_accepted_tokens": "accepted"}
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"


def counters(llm) -> dict:
    """vLLM's cumulative speculative-decoding counters, summed over engines (labels)."""
    out = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "accepted_per_position": []}
    for metric in llm.get_metrics():
        if metric.name in COUNTERS:
            out[COUNTERS[metric.name]] += int(metric.value)
        elif metric.name == PER_POSITION:
            values = [int(v) for v in metric.values]
            have = out["accepted_per_position"]
            out["accepted_per_position"] = [a + b for a, b in zip(have + [0] * len(values), values + [0] * len(have))]
    return out


class Worker:
    def __init__(self):
        self.llm = None

    def load(self, request: dict) -> dict:
        threads = int(request.get("threads", 1))
        cores = sorted(os.sched_getaffinity(0))[:threads]
        # the whole worker on `threads` cores: vLLM's OpenMP threads are bound to them, and any thread of its own
        # (the engine loop, output handling) shares them, as every thread of ours shares our process's
        os.sched_setaffinity(0, cores)
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", ",".join(map(str, cores)))
        os.environ.setdefault("OMP_NUM_THREADS", str(threads))
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(request.get("kv_cache_gib", 1)))
        in_process = request.get("in_process", True)
        if in_process:  # the engine core and the model in this one process, as ours run: no IPC per step
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        import vllm  # noqa: PLC0415 - after the environment that configures it

        self.vllm = vllm
        # at most c requests decode together (continuous batching; null: vLLM's default)
        limits = {} if request.get("max_num_seqs") is None else {"max_num_seqs": int(request["max_num_seqs"])}
        self.llm = vllm.LLM(model=request["model"], dtype=request.get("dtype", "float32"), **limits,
                            max_model_len=request["max_model_len"], enforce_eager=True, seed=request.get("seed", 0),
                            speculative_config=request.get("speculative_config"), disable_log_stats=False,
                            distributed_executor_backend="uni" if in_process else None)
        import torch  # noqa: PLC0415
        import transformers  # noqa: PLC0415
        return {"versions": {"vllm": vllm.__version__, "torch": torch.__version__,
                             "transformers": transformers.__version__}, "threads": torch.get_num_threads()}

    def generate(self, request: dict) -> dict:
        if self.llm is None:
            raise RuntimeError("generate before load")
        sampling = request.get("sampling", {})
        params = self.vllm.SamplingParams(max_tokens=request["max_tokens"], min_tokens=request["max_tokens"],
                                          ignore_eos=True, seed=request.get("seed"), **sampling)
        prompts = [{"prompt_token_ids": ids} for ids in request["prompts"]]
        # an earlier call's prompts (a warm-up, another sampling's pass) must not be served from vLLM's prefix cache:
        # ours prefill every request; prefixes shared within this call's prompts still hit, as in serving
        self.llm.reset_prefix_cache()
        before = counters(self.llm)
        start = time.perf_counter()
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        seconds = time.perf_counter() - start
        after = counters(self.llm)
        width = max(len(before["accepted_per_position"]), len(after["accepted_per_position"]))
        pad = [0] * width
        delta = {k: after[k] - before[k] for k in COUNTERS.values()}
        delta["accepted_per_position"] = [a - b for a, b in zip((after["accepted_per_position"] + pad)[:width],
                                                                 (before["accepted_per_position"] + pad)[:width])]
        return {"tokens": [list(o.outputs[0].token_ids) for o in outputs], "seconds": seconds, "counters": delta}


def main() -> None:
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # whatever vLLM prints goes to stderr
    worker = Worker()
    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "close":
            break
        try:
            answer = {"ok": True, **getattr(worker, request["op"])(request)}
        except Exception as error:  # noqa: BLE001 - every failure goes back to the caller, named
            answer = {"ok": False, "error": f"{type(error).__name__}: {error}",
                      "traceback": traceback.format_exc(limit=5)}
        protocol.write(json.dumps(answer) + "\n")
    protocol.close()


if __name__ == "__main__":
    main()
