#!/bin/bash
# The verifier: 1 when ~/hello.txt says exactly "Hello, world!", else 0.
if [ "$(cat /home/sandbox/hello.txt 2>/dev/null)" = "Hello, world!" ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo "hello.txt is missing or wrong"
    echo 0 > /logs/verifier/reward.txt
fi
