#!/bin/bash
# Two rewards: "reward" (all checks pass) and "checks" (the share that pass).
cd /app
python3 - <<'PY'
import json, sys
sys.path.insert(0, "calc")
try:
    from add import add
    results = [add(2, 3) == 5, add(-1, 1) == 0, add(10, 5) == 15]
except Exception:
    results = [False] * 3
json.dump({"reward": float(all(results)), "checks": sum(results) / len(results)},
          open("/logs/verifier/reward.json", "w"))
PY
