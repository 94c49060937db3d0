"""Run in the speculators package's own environment (.peers/speculators) by test_speculators_round_trip.py: load
the folder our writer made as its Eagle3DraftModel and answer, as JSON, what it loaded and what it drafts.

    python tests/peers/speculators_load.py HEAD_FOLDER INPUTS.pt
"""

import json
import sys

import torch
from safetensors.torch import load_file
from speculators.models.eagle3 import Eagle3DraftModel

folder, inputs = sys.argv[1], torch.load(sys.argv[2])
model = Eagle3DraftModel.from_pretrained(folder, torch_dtype=torch.float32)  # its loader takes no loading info
ours = load_file(f"{folder}/model.safetensors")
theirs = model.state_dict()
info = {"missing_keys": [k for k in theirs if k not in ours], "unexpected_keys": [k for k in ours if k not in theirs]}
differ = [k for k, v in ours.items() if k in theirs and not torch.equal(theirs[k].float(), v.float())]
with torch.no_grad():
    drafted = model(inputs["hidden_states"], inputs["input_ids"], torch.zeros_like(inputs["input_ids"]),
                    position_ids=inputs["position_ids"], ttt_steps=1)[0]  # [1, n] draft ids, its step 0
print(json.dumps({"missing": sorted(info["missing_keys"]), "unexpected": sorted(info["unexpected_keys"]),
                  "written": sorted(ours), "differ": differ, "drafted": drafted[0].tolist(),
                  "attention": model.config.transformer_layer_config._attn_implementation}))
