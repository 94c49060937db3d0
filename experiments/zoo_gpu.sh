#!/usr/bin/env bash
# The zoo recipe on one GPU, as run for the committed zoo (README, "Model zoo"):
#   1. three target variants train side by side on the GPU; the one with the lowest loss on the
#      validation files (carved from the training split) wins; held-out files are never used to choose;
#   2. the 1-layer draft is distilled from the winner (training.models.draft) and, for comparison,
#      trained on the corpus's next tokens (draft_ce);
#   3. bf16 copies of the three go to EXPORT (default zoo_export), with every run's history in summary.json.
# Needs ROOT (default zoo_runs) to hold tokenizer/ and data/ (the token data) already (`python -m experiments.train
# training=zoo training.only=[]` makes them on a machine with the corpus), so the GPU machine needs
# neither the same Python's standard library nor `datasets`.
set -euo pipefail
ROOT=${ROOT:-zoo_runs}; EXPORT=${EXPORT:-zoo_export}; LOGS=${LOGS:-zoo_logs}
TARGET_LIMIT_S=${TARGET_LIMIT_S:-300}; DRAFT_LIMIT_S=${DRAFT_LIMIT_S:-150}
mkdir -p "$LOGS" "$EXPORT"
train() {  # name variant-root extra overrides...
  local name=$1 root=$2; shift 2
  # shellcheck disable=SC2086
  python -m experiments.train training=zoo training.root="$root" "training.only=[$name]" \
    hydra.run.dir="$root/hydra_$name" "$@" $EXTRA >"$LOGS/$(basename "$root")_$name.log" 2>&1
}
EXTRA=${EXTRA:-}  # overrides for every run (a quick CPU rehearsal: small steps and batches)
declare -A VARIANTS=(
  [a]=${VARIANT_A:-"training.train.steps=4000"}
  [b]=${VARIANT_B:-"training.train.steps=4000 +training.models.target.config.attention_dropout=0.1 training.train.weight_decay=0.2"}
  [c]=${VARIANT_C:-"training.train.steps=2500 training.train.lr=2e-3"}
)
pids=()
for v in ${RUN_VARIANTS:-a b c}; do
  mkdir -p "$ROOT-$v" && cp -r "$ROOT/tokenizer" "$ROOT/data" "$ROOT-$v/"
  # shellcheck disable=SC2086
  train target "$ROOT-$v" ${VARIANTS[$v]} training.train.time_limit_s="$TARGET_LIMIT_S" & pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || echo "a target variant failed (see $LOGS)"; done
for v in ${RUN_VARIANTS:-a b c}; do  # stopped by the time limit: its best model of the long phase stands in
  t="$ROOT-$v/target"; [ -d "$t/final" ] || [ ! -d "$t/best" ] || cp -r "$t/best" "$t/final"
done
WINNER=$(python - "$ROOT" <<'PY'
import sys, torch
from pathlib import Path
from framework.zoo.train import latest_checkpoint
best = {}
for root in Path(".").glob(sys.argv[1] + "-*"):
    ckpt = latest_checkpoint(root / "target")
    if ckpt is not None and (root / "target" / "final").is_dir():
        best[str(root)] = torch.load(ckpt / "trainer_state.pt", weights_only=False)["best_valid"]
print(min(best, key=best.get) if best else "", file=sys.stdout)
print(f"validation loss by variant: {best}", file=sys.stderr)
PY
)
[ -n "$WINNER" ] || { echo "no target variant finished"; exit 1; }
echo "winner: $WINNER"
pids=()
for d in ${DRAFTS:-draft draft_ce}; do train "$d" "$WINNER" training.train.time_limit_s="$DRAFT_LIMIT_S" & pids+=($!); done
for p in "${pids[@]}"; do wait "$p" || echo "a draft failed (see $LOGS)"; done
python - "$ROOT" "$WINNER" "$EXPORT" <<'PY'
import json, sys, torch
from pathlib import Path
from framework.zoo.checkpoints import export_checkpoint
from framework.zoo.train import latest_checkpoint
prefix, winner, export = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
summary = {"winner": str(winner), "runs": {}}
for root in sorted(Path(".").glob(prefix + "-*")):
    for name in ("target", "draft", "draft_ce"):
        ckpt = latest_checkpoint(root / name)
        if ckpt is not None:
            state = torch.load(ckpt / "trainer_state.pt", weights_only=False)
            summary["runs"][f"{root.name}/{name}"] = {k: v for k, v in state.items() if k != "optimizer"}
for name in ("target", "draft", "draft_ce"):
    if (winner / name / "final").is_dir():
        export_checkpoint(winner / name / "final", export / name)
(export / "summary.json").write_text(json.dumps(summary, indent=1))
for run, s in summary["runs"].items():
    evals = [h for h in s["history"] if "valid_loss" in h]
    print(run, "steps", s["step"], "best_valid", round(s["best_valid"], 4), "at", s["best_step"],
          "last", {k: round(v, 4) for k, v in evals[-1].items() if k.endswith("loss")} if evals else None)
PY
