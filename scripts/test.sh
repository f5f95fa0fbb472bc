#!/bin/sh
# The whole test suite, from a fresh clone: installs what the tests need (idempotently), then runs
# every test once on SQLite and once on PostgreSQL.
set -eu
cd "$(dirname "$0")/.."

log() { printf '\n== %s\n' "$*"; }

# --- npm packages --------------------------------------------------------------------------------
if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  log "installing npm packages (npm ci)"
  npm ci --no-audit --no-fund
fi

# --- Debian packages used as real peers by the tests ---------------------------------------------
# Each entry: <package>:<a file or directory it provides>. Installed only when that path is missing.
DEBS="coturn:/usr/bin/turnutils_uclient poppler-utils:/usr/bin/pdftotext bind9-dnsutils:/usr/bin/dig chromium:/usr/bin/chromium haproxy:/usr/sbin/haproxy python3-aiortc:/usr/lib/python3/dist-packages/aiortc curl:/usr/bin/curl openssl:/usr/bin/openssl pocketsphinx:/usr/bin/pocketsphinx_batch pocketsphinx-en-us:/usr/share/pocketsphinx/model/en-us/en-us.lm.bin espeak-ng:/usr/bin/espeak-ng ffmpeg:/usr/bin/ffmpeg iputils-ping:/usr/bin/ping iproute2:/usr/sbin/ip"
missing=""
for entry in $DEBS; do
  pkg=${entry%%:*}; bin=${entry#*:}
  [ -e "$bin" ] || missing="$missing $pkg"
done
if [ -n "$missing" ]; then
  if [ "$(id -u)" = 0 ]; then
    log "installing Debian packages:$missing"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing
  else
    echo "missing Debian packages:$missing — install them as root (apt-get install$missing)" >&2
    exit 1
  fi
fi

# --- PostgreSQL ----------------------------------------------------------------------------------
PG_URL=${OUTPOST_TEST_PG_URL:-postgres://postgres@127.0.0.1:5432/test}
pg_up() { node -e "const pg=require('pg');const c=new pg.Client({connectionString:process.argv[1]});c.connect().then(()=>c.end()).then(()=>process.exit(0),()=>process.exit(1))" "$PG_URL"; }
if ! pg_up; then
  if command -v pg_ctlcluster >/dev/null 2>&1 && [ -d /etc/postgresql ]; then
    log "starting PostgreSQL"
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
    sleep 2
  fi
fi

log "typecheck and lint"
npx tsc --noEmit
npx eslint src test bench

log "tests on SQLite"
npx vitest run

if pg_up; then
  log "tests on PostgreSQL ($PG_URL)"
  OUTPOST_TEST_DATABASE=$PG_URL npx vitest run
else
  echo "PostgreSQL is not reachable at $PG_URL: the suite must run on both backends" >&2
  exit 1
fi
