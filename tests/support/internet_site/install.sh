#!/bin/sh
# Installs tbrun, the test internet's test runner, as `curl -LsSf https://astral.sh/uv/install.sh | sh` installs
# uv: into $HOME/.local/bin (or $TBRUN_INSTALL_DIR), with an `env` file there that puts it on PATH
# (`. "$HOME/.local/bin/env"`). The server writes its own address into BASE_URL when it sends this file.
set -eu
BASE_URL="@BASE_URL@"
INSTALL_DIR="${TBRUN_INSTALL_DIR:-$HOME/.local/bin}"
mkdir -p "$INSTALL_DIR"
python3 - "$BASE_URL" "$INSTALL_DIR/tbrun" <<'PY'
import hashlib, sys, urllib.request

base, target = sys.argv[1], sys.argv[2]


def get(path):
    with urllib.request.urlopen(base + path, timeout=60) as response:
        return response.read()


body = get("/runner/tbrun")
expected = get("/runner/tbrun.sha256").decode().split()[0]
if hashlib.sha256(body).hexdigest() != expected:
    sys.exit("tbrun installer: the download does not match its checksum")
with open(target, "wb") as out:
    out.write(body)
PY
chmod 755 "$INSTALL_DIR/tbrun"
cat > "$INSTALL_DIR/env" <<ENV
case ":\${PATH}:" in
    *":$INSTALL_DIR:"*) ;;
    *) export PATH="$INSTALL_DIR:\$PATH" ;;
esac
ENV
echo "installed $("$INSTALL_DIR/tbrun" --version) to $INSTALL_DIR"
