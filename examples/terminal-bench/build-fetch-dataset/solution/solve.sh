#!/bin/bash
python3 - <<'PY'
import hashlib
import json

data = open("/app/data/dataset.bin", "rb").read()
stats = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "zero_bytes": data.count(0)}
with open("/app/stats.json", "w") as out:
    json.dump(stats, out)
PY
