#!/bin/bash
# The verifier has no network either (it runs under the environment's no-network mode), so it fetches no test
# runner: it checks the agent's result, then tries the download itself. Reward 1 only when the download failed.
python3 /tests/check_offline.py
