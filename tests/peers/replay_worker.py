"""A stand-in peer worker for the default tier: it speaks measurement/peers/vllm_worker.py's protocol and answers
each request with the answer recorded from the live worker (SPECULUM_REPLAY: a JSON-lines file of
{"request": ..., "answer": ...}), after checking that the request is the one recorded. SPECULUM_REPLAY_BREAK:
"exit" ends the process instead of answering a generate, "garbage" writes a line that is not JSON.
"""

import json
import os
import sys

FIELDS = ("op", "prompts", "max_tokens", "sampling", "seed", "threads", "dtype")  # not paths: a clone moves


def main() -> None:
    recorded = [json.loads(line) for line in open(os.environ["SPECULUM_REPLAY"])]
    broken = os.environ.get("SPECULUM_REPLAY_BREAK")
    protocol = sys.stdout
    for index, line in enumerate(sys.stdin):
        request = json.loads(line)
        if request["op"] == "close":
            break
        if broken and request["op"] == "generate":
            if broken == "exit":
                sys.exit(3)
            protocol.write("Loading weights: 100%\n")
            protocol.flush()
            continue
        expected = recorded[index]["request"]
        differs = {k: (request.get(k), expected.get(k))
                   for k in FIELDS if k in expected and request.get(k) != expected[k]}
        answer = (recorded[index]["answer"] if not differs
                  else {"ok": False, "error": f"not the recorded request: {differs}"})
        protocol.write(json.dumps(answer) + "\n")
        protocol.flush()


if __name__ == "__main__":
    main()
