#!/bin/bash
python3 - <<'PY'
import tbcalc

numbers = [line for line in open("/app/numbers.txt").read().split()]
open("/app/mean.txt", "w").write(f"{tbcalc.mean(numbers)}\n")
open("/app/banner.txt", "w").write(tbcalc.banner("terminal bench") + "\n")
PY
