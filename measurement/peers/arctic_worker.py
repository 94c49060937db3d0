"""arctic-inference's suffix cache (SuffixDecoding's own implementation) on the peer protocol: run by the Python
of `.peers/arctic` (`python -m experiments.peers.setup arctic` builds it), never imported by Speculum's. One JSON
request a line on stdin, one JSON answer a line on stdout:

    {"op": "open", "cache": "a", "max_tree_depth": 64, "max_cached_requests": -1} -> {"versions": {...}}
    {"op": "start", "req": "r0", "prompt": [ids]}                              (the request's prompt tree)
    {"op": "speculate", "req": "r0", "response": [new ids], "context": [ids], "max_spec_tokens": n,
     "max_spec_factor": f, "min_token_prob": p}                                -> {"token_ids", "parents", "probs"}
    {"op": "stop", "req": "r0"}
    {"op": "close"}

Every op but close names its `cache` (default ""): caches opened by name live side by side, each with its own
requests and global cache of responses (a measurement keeps one per cell). `response` is what the request committed
since its last speculate (added to its prompt tree and the global cache of responses first), `context` the tail its
match is sought for. Standard library and arctic-inference only.
"""

from __future__ import annotations

import json
import sys
import traceback
from importlib.metadata import version


class Worker:
    def __init__(self):
        self.caches = {}

    def cache(self, request: dict):
        name = request.get("cache", "")
        if name not in self.caches:
            raise KeyError(f"no cache named {name!r} is open")
        return self.caches[name]

    def open(self, request: dict) -> dict:
        from arctic_inference.suffix_decoding import SuffixDecodingCache  # noqa: PLC0415 - the peer's own package

        self.caches[request.get("cache", "")] = SuffixDecodingCache(int(request.get("max_tree_depth", 64)),
                                                                    int(request.get("max_cached_requests", -1)))
        return {"versions": {"arctic_inference": version("arctic_inference")}}

    def start(self, request: dict) -> dict:
        self.cache(request).start_request(request["req"], request["prompt"])
        return {}

    def speculate(self, request: dict) -> dict:
        cache = self.cache(request)
        if request.get("response"):
            cache.add_active_response(request["req"], request["response"])
        draft = cache.speculate(request["req"], request["context"], max_spec_tokens=request["max_spec_tokens"],
                                     max_spec_factor=request["max_spec_factor"],
                                     min_token_prob=request["min_token_prob"], use_tree_spec=True)
        return {"token_ids": list(draft.token_ids), "parents": list(draft.parents), "probs": list(draft.probs)}

    def stop(self, request: dict) -> dict:
        self.cache(request).stop_request(request["req"])
        return {}


def main() -> None:
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
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
