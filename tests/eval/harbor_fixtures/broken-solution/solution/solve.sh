#!/bin/bash
# Wrong on purpose: the oracle run must report this task.
echo 41 > /home/sandbox/answer.txt
