#!/bin/bash
python3 - <<'PY'
import os
import urllib.request

allowed = os.environ["TB_INTERNET_URL"].rstrip("/") + "/files/dataset-4m.bin"
with urllib.request.urlopen(allowed, timeout=60) as response, open("/app/dataset.bin", "wb") as out:
    out.write(response.read())

other = os.environ["TB_OTHER_URL"].rstrip("/") + "/files/dataset-4m.bin"
try:
    with urllib.request.urlopen(other, timeout=10) as response:
        response.read()
    verdict = "reachable"
except OSError as exc:
    print(f"{other}: {exc}")
    verdict = "blocked"
open("/app/other.txt", "w").write(verdict + "\n")
PY
