#!/usr/bin/env bash
# memproxy's container entry: `memproxy serve`, configured by the environment variables README documents.
#
# memproxy reads every one of them itself (proxy/config.py: OPENSEARCH_URL, MEMPROXY_AUTH,
# MEMPROXY_SECRET_KEY, ...), so they pass through untouched rather than as flags: a flag would show a secret
# (OPENSEARCH_PASSWORD, MEMPROXY_SECRET_KEY) in the process list. Only what a container needs differently is
# a flag: the listen address (loopback, memproxy's default, is unreachable from outside a container) and the
# port the healthcheck asks. Arguments given to the container are appended (`docker run memproxy --auth none`).
# `--dry-run` as the first argument prints the command instead of running it.
set -euo pipefail

dry_run=0
if [ "${1:-}" = "--dry-run" ]; then
  dry_run=1
  shift
fi

if [ -n "${MEMPROXY_SECRET_KEY_FILE:-}" ] && [ ! -r "$MEMPROXY_SECRET_KEY_FILE" ]; then
  echo "memproxy-entrypoint: MEMPROXY_SECRET_KEY_FILE=$MEMPROXY_SECRET_KEY_FILE is not readable" >&2
  exit 64
fi

cmd=(memproxy serve --host "${MEMPROXY_HOST:-0.0.0.0}" --port "${MEMPROXY_PORT:-9280}" "$@")

if [ "$dry_run" = 1 ]; then
  printf '%q ' "${cmd[@]}"
  echo
  exit 0
fi
exec "${cmd[@]}"
