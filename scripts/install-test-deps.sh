#!/usr/bin/env bash
# What the tests need beyond the Rust toolchain, installed only when missing: the status
# page's test drives Debian's chromium through chromedriver, the API's test checks the
# OpenAPI document with the reference validator, the MCP tests run real MCP servers (the
# Python SDK's and npm's server-everything), the spend test runs LiteLLM's proxy, and the
# PostgreSQL store's tests start throwaway servers.
set -euo pipefail

# procps: `pkill`, with which a failed browser test ends the chromium it started.
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1 \
    || ! command -v pkill >/dev/null 2>&1; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "installing chromium, chromium-driver and procps (Debian packages) for the status page's test"
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq chromium chromium-driver procps >/dev/null
fi

if ! python3 -c "import openapi_spec_validator" >/dev/null 2>&1; then
    echo "installing openapi-spec-validator (PyPI) for the API's test"
    python3 -m pip install --quiet --disable-pip-version-check openapi-spec-validator
fi

if ! python3 -c "import standardwebhooks" >/dev/null 2>&1; then
    echo "installing standardwebhooks (PyPI) to verify signed webhooks independently"
    python3 -m pip install --quiet --disable-pip-version-check standardwebhooks
fi

# The trace test's OTLP receiver parses what it gets with the OpenTelemetry project's own
# protobuf definitions (tests/peers/otlp_receiver.py).
if ! python3 -c "import opentelemetry.proto.collector.trace.v1.trace_service_pb2" >/dev/null 2>&1; then
    echo "installing opentelemetry-proto (PyPI) for the OTLP receiver of the trace test"
    python3 -m pip install --quiet --disable-pip-version-check "opentelemetry-proto>=1.30,<2"
fi

# The spend test counts usage through LiteLLM's real proxy. It pins its own dependencies,
# so it lives in a virtualenv of its own rather than beside the MCP SDK.
litellm_venv="${SYSTOLE_TEST_LITELLM_VENV:-$HOME/.cache/systole-test-litellm}"
if [ ! -x "$litellm_venv/bin/litellm" ]; then
    echo "installing litellm[proxy] (PyPI) into $litellm_venv for the spend test"
    if ! python3 -c "import ensurepip" >/dev/null 2>&1; then
        sudo=""
        [ "$(id -u)" -eq 0 ] || sudo="sudo"
        export DEBIAN_FRONTEND=noninteractive
        $sudo apt-get update -qq
        $sudo apt-get install -y -qq python3-venv >/dev/null
    fi
    python3 -m venv "$litellm_venv"
    "$litellm_venv/bin/pip" install --quiet --disable-pip-version-check "litellm[proxy]==1.108.7"
fi

# The MCP tests run real servers: one written with the official Python SDK
# (tests/peers/mcp_server.py) and the reference server-everything from npm, through npx.
if ! python3 -c "import mcp.server.mcpserver" >/dev/null 2>&1; then
    echo "installing mcp (PyPI, the official MCP SDK) for the MCP test servers"
    python3 -m pip install --quiet --disable-pip-version-check "mcp>=2.3,<3"
fi
npm_prefix="${SYSTOLE_TEST_NPM_PREFIX:-$HOME/.cache/systole-test-npm}"
if [ ! -x "$npm_prefix/node_modules/.bin/mcp-server-everything" ]; then
    echo "installing @modelcontextprotocol/server-everything (npm) into $npm_prefix for the MCP tests"
    mkdir -p "$npm_prefix"
    npm install --prefix "$npm_prefix" --silent --no-audit --no-fund @modelcontextprotocol/server-everything@2026.8.31 >/dev/null
fi

# The PostgreSQL store's tests start throwaway servers (tests/common/postgres_server.rs);
# they need initdb and pg_ctl, on PATH or where Debian puts them.
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "installing postgresql (Debian package) for the PostgreSQL store's tests"
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq postgresql >/dev/null
fi
