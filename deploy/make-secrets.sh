#!/usr/bin/env bash
# Write .env (repo root, mode 600) with a fresh fleet secret and Redis password, unless it has them.
#
#   deploy/make-secrets.sh            # once per deployment; docker-compose reads .env
#
# Rotation: deploy/README.md ("Secrets and rotation").
set -euo pipefail
cd "$(dirname "$0")/.."
touch .env && chmod 600 .env
gen() { python3 -c 'import secrets; print(secrets.token_hex(32))'; }
grep -q '^TOOLFLEET_SECRET=' .env || echo "TOOLFLEET_SECRET=$(gen)" >> .env
grep -q '^REDIS_PASSWORD=' .env || echo "REDIS_PASSWORD=$(gen)" >> .env
echo "secrets in $(pwd)/.env"
