#!/usr/bin/env bash
#: Usage: bash scripts/serve.sh [serve options]
#:
#: The MCP server on stdio, found where scripts/install.py put it even when ~/.local/bin is not on PATH
#: (the Claude Code plugin's .mcp.json starts this). Any argument goes to `verl-async-dapo serve`.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
for arg in "$@"; do
    case "${arg}" in -h | --help) sed -n 's/^#: \{0,1\}//p' "${BASH_SOURCE[0]}"; exit 0 ;; esac
done
cli="$(find_cli)"
exec "${cli}" serve "$@"
