#!/bin/bash
echo "Hello, world!" > /home/sandbox/hello.txt
