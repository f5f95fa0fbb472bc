#!/bin/sh
# Starts Outpost on embedded defaults, installing npm packages first when they are missing.
# Extra arguments go to `outpost serve` (npm start -- --api-port 0).
set -eu
cd "$(dirname "$0")/.."
if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "installing npm packages (npm ci)…" >&2
  npm ci --no-audit --no-fund >&2
fi
exec node bin/outpost.js serve "$@"
