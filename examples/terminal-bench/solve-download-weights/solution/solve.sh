#!/bin/bash
set -euo pipefail
python3 - <<'PY'
import hashlib
import os
import shutil
import sys
import urllib.request

base = os.environ["TB_INTERNET_URL"].rstrip("/")
with urllib.request.urlopen(f"{base}/SHA256SUMS", timeout=60) as response:
    sums = dict(reversed(line.split()) for line in response.read().decode().splitlines())
digest = hashlib.sha256()
with urllib.request.urlopen(f"{base}/files/weights-50m.bin", timeout=60) as response, \
        open("/app/model/weights.bin", "wb") as out:
    while chunk := response.read(1 << 20):
        digest.update(chunk)
        out.write(chunk)
if digest.hexdigest() != sums["files/weights-50m.bin"]:
    sys.exit("the weights do not match the published checksum")
open("/app/model/weights.sha256", "w").write(digest.hexdigest() + "\n")
PY
host="${TB_INTERNET_URL#http://}"; host="${host%%/*}"
pip install --no-cache-dir --index-url "$TB_INTERNET_URL/simple" --trusted-host "$host" tbhello==1.0.0
python3 -c 'import tbhello; print(tbhello.greet("weights"))' > /app/model/greeting.txt
