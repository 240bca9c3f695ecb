#!/bin/bash
# 1 when the service holds the reversed greeting under "answer".
python3 - <<'PY'
import urllib.request

def get(key):
    try:
        return urllib.request.urlopen(f"http://kv:8000/{key}", timeout=5).read().decode()
    except Exception as exc:
        return f"<{exc}>"

greeting, answer = get("greeting"), get("answer")
print(f"greeting={greeting!r} answer={answer!r}")
with open("/logs/verifier/reward.txt", "w") as out:
    out.write("1" if answer == greeting[::-1] else "0")
PY
