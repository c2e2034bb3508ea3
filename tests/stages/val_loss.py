"""The validation loss a run logged at one step (its metrics.jsonl), for the tests that
compare validation across stages: tests/stages/validation_vs_01.sh, tests/four_d/validation.sh."""
import json
import sys


def val_loss(run_dir, step=0):
    """The one "kind": "val" line of run_dir/metrics.jsonl at `step`; exits with FAIL otherwise."""
    rows = [json.loads(line) for line in open(f"{run_dir}/metrics.jsonl") if line.strip()]
    vals = [r["val_loss"] for r in rows if r.get("kind") == "val" and r["step"] == step]
    if len(vals) != 1:
        sys.exit(f"FAIL: {run_dir} logged {len(vals)} validation losses at step {step}")
    return vals[0]
