#!/bin/bash
python3 - <<'PY'
import csv

with open("/app/inventory.csv", newline="") as f:
    total = sum(int(row["quantity"]) for row in csv.DictReader(f) if row["category"] == "tools")
with open("/app/total.txt", "w") as out:
    out.write(f"{total}\n")
PY
