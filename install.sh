#!/usr/bin/env bash
# Installs what boxmaker needs on a Debian-like machine: bubblewrap (the sandbox), then a
# virtual environment in .venv with boxmaker and its test tools. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")"

packages=()
command -v bwrap >/dev/null 2>&1 || packages+=(bubblewrap)
if [ "${BX_BROWSER_TESTS:-1}" = 1 ] && [ -f tests/browser/conftest.py ]; then
    command -v chromium >/dev/null 2>&1 || packages+=(chromium)
fi
# node and npm: `bxctl mcp add` installs npm MCP servers with them (docs/mcp.md), and the tests
# run one (tests/service/test_mcp_npm.py).
command -v npm >/dev/null 2>&1 || packages+=(nodejs npm)
if [ ${#packages[@]} -gt 0 ]; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "install.sh: installing ${packages[*]} with apt-get"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${packages[@]}" >/dev/null
fi

python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    echo "install.sh: creating .venv with $($python --version)"
    "$python" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'
# An editable install is not byte-compiled, and where PYTHONDONTWRITEBYTECODE is set nothing
# ever caches it: every daemon, sandboxed tool and test would compile boxmaker's modules at
# each start. Compile them once here, as pip does for what it installs (a changed source is
# compiled afresh in memory, so this is never stale).
.venv/bin/python -m compileall -q -j 0 bxcore bxctl services >/dev/null
# The npm server the tests add, fetched once into npm's cache, from which `bxctl mcp add`
# installs it (`--prefer-offline`); without the registry now, the tests fetch it themselves.
warm=$(mktemp -d)
npm install --prefix "$warm" --ignore-scripts --omit=dev --no-audit --no-fund --loglevel=error \
    @modelcontextprotocol/server-filesystem >/dev/null \
    || echo "install.sh: npm could not fetch @modelcontextprotocol/server-filesystem now"
rm -rf "$warm"
echo "install.sh: ready; the commands are in .venv/bin (bxctl, brokerd, …)"
