#!/bin/bash
# Terminal-Bench 2's verifier shape: install the test runner from the internet while grading, run the tests with
# it, and write the reward. (There: `curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh`, then
# `uvx ... pytest --ctrf /logs/verifier/ctrf.json /tests/test_outputs.py`. Here the installer and the runner,
# tbrun, come from the test internet at $TB_INTERNET_URL; python3 stands in for curl.)

python3 -c 'import sys, urllib.request; sys.stdout.buffer.write(urllib.request.urlopen(sys.argv[1], timeout=60).read())' \
    "$TB_INTERNET_URL/install.sh" | sh

source "$HOME/.local/bin/env"

tbrun --ctrf /logs/verifier/ctrf.json /tests/test_outputs.py

if [ $? -eq 0 ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
