#!/bin/bash
python3 - <<'PY'
import urllib.request

greeting = urllib.request.urlopen("http://kv:8000/greeting", timeout=5).read().decode()
request = urllib.request.Request("http://kv:8000/answer", data=greeting[::-1].encode(), method="PUT")
urllib.request.urlopen(request, timeout=5)
PY
