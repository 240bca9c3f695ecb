#!/bin/bash
# The verifier writes two rewards to reward.json: "reward" (1 when every case passes) and
# "cases_passed" (the fraction that passes).
cd /home/sandbox/app
PYTHONPATH=/home/sandbox/app python3 /tests/check_wordcount.py
