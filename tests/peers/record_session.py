"""Records live vLLM worker sessions as the default tier's fixtures (tests/peers/vllm_<row>.jsonl): each request
sent and the answer it got. Needs vLLM's environment (python -m experiments.peers.setup vllm):

    python -m tests.peers.record_session
"""

import json
from pathlib import Path

from framework.zoo.checkpoints import resolve_checkpoint
from framework.zoo.tokenizer import load_tokenizer
from measurement.peers.engine import PeerEngine

HERE = Path(__file__).resolve().parent
TEXTS = ["def read_lines(path):\n    with open(path) as f:\n        return f.read().splitlines()\n\n\n"
         "def read_words(path):\n    with open(path) as f:\n",
         "for name in names:\n    print(name)\nfor name in names:\n"]
PROMPTS = [load_tokenizer(resolve_checkpoint("target"))(text, add_special_tokens=False)["input_ids"] for text in TEXTS]
SESSIONS = {
    "plain": None,
    "ngram": {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3, "prompt_lookup_min": 2},
    "eagle3": {"method": "eagle3", "model": str(resolve_checkpoint("eagle3/speculators")), "num_speculative_tokens": 3},
}


class Recording(PeerEngine):
    def ask(self, request: dict) -> dict:
        answer = super().ask(request)
        self.exchanges = getattr(self, "exchanges", []) + [{"request": request, "answer": {"ok": True, **answer}}]
        return answer


def main() -> None:
    for name, speculative in SESSIONS.items():
        with Recording("vllm", resolve_checkpoint("target"), 256, speculative) as engine:
            engine.generate(PROMPTS, 24, {"temperature": 0.0})
            engine.generate(PROMPTS[:1], 24, {"temperature": 1.0}, seed=7)
        lines = [json.dumps(e) for e in engine.exchanges]
        (HERE / f"vllm_{name}.jsonl").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
