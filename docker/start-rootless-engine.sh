#!/usr/bin/env bash
# Starts a rootless Docker engine (Debian's dockerd-rootless.sh with rootlesskit, uidmap and
# slirp4netns) run by an unprivileged user of its own, beside the host's rootful engine, and
# loads the base image into it. The tests run the harness against it as that user: where
# users run without root (docs/deployments.md). Idempotent; needs root to set up.
#
#   HARNESS_ROOTLESS_USER  the engine's user (default harness-rootless)
# The socket: /run/<user>/docker.sock (DOCKER_HOST=unix:///run/<user>/docker.sock).
set -euo pipefail
user=${HARNESS_ROOTLESS_USER:-harness-rootless}
run_dir=/run/$user
socket=$run_dir/docker.sock
data=/var/lib/$user
base=${HARNESS_BASE_IMAGE:-harness/base:bookworm}

if [ "$(id -u)" != 0 ]; then
  echo "error: docker/start-rootless-engine.sh sets up a user and packages: run it as root" >&2
  exit 1
fi
answers() { DOCKER_HOST=unix://$socket timeout 10 docker info >/dev/null 2>&1; }

if ! answers; then
  need=()
  for tool in rootlesskit:rootlesskit newuidmap:uidmap slirp4netns:slirp4netns; do
    command -v "${tool%%:*}" >/dev/null 2>&1 || need+=("${tool##*:}")
  done
  if [ ${#need[@]} -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      "${need[@]}" >/dev/null
  fi
  script=$(command -v dockerd-rootless.sh || true)
  script=${script:-/usr/share/docker.io/contrib/dockerd-rootless.sh}
  if [ ! -x "$script" ]; then
    echo "error: dockerd-rootless.sh not found (Debian's docker.io ships it in contrib/)" >&2
    exit 1
  fi
  if ! id "$user" >/dev/null 2>&1; then
    useradd --system --create-home --home-dir "$data" --shell /usr/sbin/nologin "$user"
  fi
  # A subordinate id range for the engine's user namespace (useradd --system adds none).
  for file in /etc/subuid /etc/subgid; do
    grep -q "^$user:" "$file" 2>/dev/null || echo "$user:400000:65536" >> "$file"
  done
  install -d -m 0700 -o "$user" -g "$user" "$run_dir" "$data" "$data/docker"
  rm -f "$socket" "$run_dir/docker.pid"
  runuser -u "$user" -- env -i HOME="$data" XDG_RUNTIME_DIR="$run_dir" \
    PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    setsid "$script" --data-root "$data/docker" >"$data/dockerd.log" 2>&1 </dev/null &
  for _ in $(seq 1 120); do
    answers && break
    sleep 0.5
  done
  if ! answers; then
    echo "error: the rootless engine did not answer on $socket; its log:" >&2
    tail -20 "$data/dockerd.log" >&2
    exit 1
  fi
fi
# The base image as the rootful engine has it (images/bootstrap-base.sh makes it there).
want=$(docker image inspect --format '{{.Id}}' "$base" 2>/dev/null || true)
have=$(DOCKER_HOST=unix://$socket docker image inspect --format '{{.Id}}' "$base" 2>/dev/null || true)
if [ -n "$want" ] && [ "$want" != "$have" ]; then
  docker save "$base" | DOCKER_HOST=unix://$socket docker load >/dev/null
fi
echo "rootless engine: DOCKER_HOST=unix://$socket (user $user)"
