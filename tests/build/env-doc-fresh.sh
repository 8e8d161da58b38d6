#!/usr/bin/env bash
# docs/environment.md must be what `make docs-env` generates from common/ftc_params.def.
set -euo pipefail
cd "$(dirname "$0")/../.."
fresh=$(mktemp)
trap 'rm -f "$fresh"' EXIT
scripts/gen-env-doc.py common/ftc_params.def > "$fresh"
if ! diff -u docs/environment.md "$fresh"; then
  echo "docs/environment.md is stale: run 'make docs-env' and commit it" >&2
  exit 1
fi
echo "docs/environment.md matches common/ftc_params.def ($(grep -c '^| `FTCOMM_' "$fresh") variables)"
