#!/usr/bin/env bash
# Installs Debian's docker-registry (the pull tests start one on 127.0.0.1 themselves) and
# makes sure it does not run as a system service. Idempotent; needs root.
set -euo pipefail
if command -v docker-registry >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "error: docker-registry is missing; install Debian's docker-registry package" >&2
  exit 1
fi
apt-get update -qq
# policy-rc.d keeps the package's own service from starting: the tests start their own.
policy=/usr/sbin/policy-rc.d
created=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod 755 "$policy" && created=1
fi
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker-registry >/dev/null
if [ "$created" = 1 ]; then rm -f "$policy"; fi
