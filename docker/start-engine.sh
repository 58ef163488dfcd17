#!/usr/bin/env bash
# Start (or verify) a local Docker engine for the harness isolation runtime.
#
# Idempotent: if an engine already answers, only the gVisor (runsc) runtime
# registration is ensured. Otherwise docker.io (and runsc, when apt has it) is
# installed from Debian, gVisor is registered in /etc/docker/daemon.json and
# dockerd is started detached so it outlives this script (CI has no stdin).
#
# Env knobs:
#   DOCKERD_LOG          log file (default /var/log/dockerd.log)
#   DOCKERD_WAIT         seconds to wait for the engine per attempt (default 60)
#   HARNESS_NO_RUNSC=1   do not install/register gVisor
set -euo pipefail

LOG=${DOCKERD_LOG:-/var/log/dockerd.log}
WAIT=${DOCKERD_WAIT:-60}
SOCK=/var/run/docker.sock
PIDFILE=/var/run/docker.pid
DAEMON_JSON=/etc/docker/daemon.json
NO_RUNSC=${HARNESS_NO_RUNSC:-0}
export DEBIAN_FRONTEND=noninteractive
# CI may run with a minimal PATH; dockerd, containerd and runc live in
# /usr/sbin or /usr/bin, the CLI in /usr/local/bin or /usr/bin (docker.io).
export PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:${PATH:-}"

log() { printf '[start-engine] %s\n' "$*" >&2; }
die() {
    log "ERROR: $*"
    exit 1
}

[[ $(id -u) -eq 0 ]] || die "must run as root"

engine_up() {
    command -v docker >/dev/null 2>&1 || return 1
    timeout 10 docker info >/dev/null 2>&1
}

apt_updated=0
apt_update_once() {
    if [[ $apt_updated -eq 0 ]]; then
        log "apt-get update"
        apt-get update -qq </dev/null >/dev/null
        apt_updated=1
    fi
}

# True when apt knows an installable candidate for package $1.
apt_has() {
    local cand
    cand=$(apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ {print $2}')
    [[ -n $cand && $cand != "(none)" ]]
}

apt_install() {
    apt-get install -y -qq --no-install-recommends "$@" </dev/null >/dev/null
}

# gVisor is optional: never fail because it is missing. With $1 == no-update
# the apt lists are not refreshed (cheap path when the engine is already up).
ensure_runsc_pkg() {
    [[ $NO_RUNSC == 1 ]] && return 0
    command -v runsc >/dev/null 2>&1 && return 0
    if ! apt_has runsc && [[ ${1:-} != no-update ]]; then
        apt_update_once
    fi
    if apt_has runsc && apt_install runsc; then
        log "installed runsc: $(runsc --version 2>/dev/null | head -n1)"
    else
        log "gVisor (runsc) is not available from apt; continuing without it"
    fi
}

# Merge the runsc runtimes into daemon.json without clobbering other keys.
# runsc: gVisor's own netstack, --network=none (that netstack cannot join docker's
# bridge on this kind of host): trials without the internet. runsc-net: gVisor on
# the container's own network namespace (--network=host: the sandbox's namespace,
# never the host's), behind the harness's egress filter: the harness picks it for
# the containers of internet phases (sandbox/docker/egress.py, docs/security.md).
# --host-uds=open lets a sandbox connect to a host unix socket bind-mounted into it
# (the trial's model-gateway socket, in a root-only dir); it cannot create any.
RUNSC_CHANGED=0
register_runsc() {
    [[ $NO_RUNSC == 1 ]] && return 0
    local runsc_bin py
    runsc_bin=$(command -v runsc 2>/dev/null) || return 0
    py=/usr/bin/python3
    [[ -x $py ]] || py=$(command -v python3) || die "python3 is needed to edit $DAEMON_JSON"
    mkdir -p "$(dirname "$DAEMON_JSON")"
    local changed
    changed=$("$py" - "$DAEMON_JSON" "$runsc_bin" <<'PY'
import json, os, sys
path, runsc = sys.argv[1], sys.argv[2]
cfg = {}
if os.path.exists(path) and os.path.getsize(path) > 0:
    with open(path) as f:
        cfg = json.load(f)
wants = {
    "runsc": {"path": runsc, "runtimeArgs": ["--network=none", "--host-uds=open"]},
    "runsc-net": {"path": runsc, "runtimeArgs": ["--network=host", "--host-uds=open"]},
}
runtimes = cfg.setdefault("runtimes", {})
if any(runtimes.get(name) != want for name, want in wants.items()):
    runtimes.update(wants)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)
    print("changed")
PY
)
    [[ $changed == changed ]] && RUNSC_CHANGED=1
    return 0
}

runtimes() {
    docker info --format '{{range $k, $v := .Runtimes}}{{$k}} {{end}}' 2>/dev/null | xargs echo
}

summary() {
    local ver cg
    ver=$(docker version --format 'server {{.Server.Version}} (API {{.Server.APIVersion}})' 2>/dev/null || echo "server ?")
    cg=$(docker info --format 'cgroup {{.CgroupDriver}}/v{{.CgroupVersion}}, storage {{.Driver}}' 2>/dev/null || true)
    echo "docker engine ready: ${ver}; runtimes: $(runtimes); ${cg}"
}

# Engine already answers: only make sure gVisor is registered and loaded.
finish_running_engine() {
    ensure_runsc_pkg no-update
    register_runsc
    if [[ $NO_RUNSC != 1 ]] && command -v runsc >/dev/null 2>&1 &&
        { [[ $RUNSC_CHANGED == 1 ]] || ! grep -qw runsc <<<"$(runtimes)"; }; then
        local pids
        # Runtimes are hot-reloadable: SIGHUP makes dockerd re-read daemon.json.
        if pids=$(pidof dockerd 2>/dev/null); then
            log "reloading dockerd (pid ${pids}) to pick up the runsc runtime"
            # shellcheck disable=SC2086  # pidof may print several pids
            kill -HUP $pids
            for _ in 1 2 3 4 5 6 7 8 9 10; do
                grep -qw runsc <<<"$(runtimes)" && break
                sleep 0.5
            done
        else
            log "runsc is in $DAEMON_JSON but the engine is not local; restart it to load runsc"
        fi
    fi
    summary
    exit 0
}

# Start dockerd with extra flags "$@". Returns 0 once `docker info` answers,
# 1 if dockerd died or timed out (it is then killed).
try_start() {
    local pid deadline
    log "starting dockerd $* (log: $LOG)"
    echo "=== $(date -Is) start-engine: dockerd $*" >>"$LOG"
    # setsid + nohup: own session, immune to SIGHUP, so dockerd outlives this
    # script and the caller's process-group cleanup; stdin from /dev/null.
    setsid nohup dockerd "$@" >>"$LOG" 2>&1 </dev/null &
    pid=$!
    deadline=$((SECONDS + WAIT))
    while ((SECONDS < deadline)); do
        if [[ -S $SOCK ]] && engine_up; then
            return 0
        fi
        if ! kill -0 "$pid" 2>/dev/null; then
            log "dockerd exited early"
            return 1
        fi
        sleep 0.5
    done
    log "dockerd did not answer within ${WAIT}s"
    kill "$pid" 2>/dev/null || true
    sleep 3
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$PIDFILE"
    return 1
}

# ---------------------------------------------------------------- engine up
if engine_up; then
    finish_running_engine
fi

# ---------------------------------------------------------------- install
if ! command -v dockerd >/dev/null 2>&1; then
    apt_update_once
    log "installing docker.io from apt"
    apt_install docker.io iptables ca-certificates
    # On hosts with a working init the package may have started the daemon.
    if engine_up; then
        finish_running_engine
    fi
fi
command -v dockerd >/dev/null 2>&1 || die "dockerd still missing after installing docker.io"
command -v docker >/dev/null 2>&1 || die "no docker CLI found (expected /usr/bin/docker from docker.io)"
ensure_runsc_pkg
register_runsc

# ---------------------------------------------------------------- start
# A pid file left by a killed dockerd makes a new one refuse to start.
if [[ -f $PIDFILE ]]; then
    old=$(cat "$PIDFILE" 2>/dev/null || true)
    # A zombie (state Z) dockerd is dead too; PID 1 here may reap late.
    if [[ -n $old && $(cat "/proc/$old/comm" 2>/dev/null || true) == dockerd ]] &&
        ! awk '{exit ($3 == "Z") ? 0 : 1}' "/proc/$old/stat" 2>/dev/null; then
        die "dockerd (pid $old) is running but does not answer on $SOCK; see $LOG"
    fi
    log "removing stale $PIDFILE"
    rm -f "$PIDFILE"
fi
# Same for dockerd's managed containerd, unless one is actually running.
if ! pidof containerd >/dev/null 2>&1; then
    rm -f /var/run/docker/containerd/containerd.pid
fi
# A stale socket file would make the readiness check meaningless.
rm -f "$SOCK"
mkdir -p "$(dirname "$LOG")"

# Prefer the default bridge with iptables NAT (allow_internet containers need
# a bridged network). If the kernel's netfilter does not cooperate, degrade
# step by step instead of giving up.
started=""
if try_start; then
    started=default
elif tail -n 40 "$LOG" | grep -qiE 'iptables|nf_tables|bridge|netfilter'; then
    if command -v iptables-legacy >/dev/null 2>&1 &&
        update-alternatives --query iptables 2>/dev/null | grep -q '^Value: .*nft'; then
        log "switching iptables to the legacy backend and retrying"
        update-alternatives --set iptables /usr/sbin/iptables-legacy >/dev/null
        update-alternatives --set ip6tables /usr/sbin/ip6tables-legacy >/dev/null 2>&1 || true
        if try_start; then
            started="default (iptables-legacy)"
        fi
    fi
    if [[ -z $started ]] && try_start --iptables=false --ip6tables=false; then
        started="--iptables=false (bridge without NAT)"
    fi
    if [[ -z $started ]] && try_start --iptables=false --ip6tables=false --bridge=none; then
        started="--bridge=none (no default bridge: only --network none works)"
    fi
fi

if [[ -z $started ]]; then
    log "dockerd failed to start; last lines of $LOG:"
    tail -n 30 "$LOG" >&2 || true
    exit 1
fi
[[ $started == default ]] || log "WARNING: dockerd running in degraded mode: $started"
summary
