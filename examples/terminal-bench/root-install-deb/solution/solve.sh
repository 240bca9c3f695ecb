#!/bin/bash
set -euo pipefail
python3 -c 'import sys, urllib.request; sys.stdout.buffer.write(urllib.request.urlopen(sys.argv[1], timeout=60).read())' \
    "$TB_INTERNET_URL/debs/tbtool_1.0.0_all.deb" > /tmp/tbtool.deb
dpkg -i /tmp/tbtool.deb
mkdir -p /app/handoff
tbtool > /app/handoff/tool.txt
chown -R alice:alice /app/handoff
cp /home/alice/secret.txt /app/secret-copy.txt
