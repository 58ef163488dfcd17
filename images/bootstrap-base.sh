#!/usr/bin/env bash
# Build the harness base image (harness/base:bookworm) without any registry:
# debootstrap a minimal Debian rootfs from the apt mirror this machine already
# uses, then `docker import` it. Idempotent: does nothing if the image exists,
# unless --force is given. Takes about a minute.
#
# Usage: images/bootstrap-base.sh [--force]
# Env:   HARNESS_BASE_IMAGE (default harness/base:bookworm)
#        HARNESS_MIRROR     (default: detected from apt sources)
set -euo pipefail

IMAGE=${HARNESS_BASE_IMAGE:-harness/base:bookworm}
SUITE=bookworm
# python3 runs the agent-side code; util-linux gives setpriv; passwd gives
# useradd/groupadd for sandbox.Dockerfile (both are minbase already, listed so
# that a change in debootstrap's selection cannot silently drop them); iptables
# writes a trial's rules inside its own network namespace (the namespace holder,
# sandbox/docker/netns_holder.py).
INCLUDE=python3,util-linux,passwd,iptables
# Bumped when INCLUDE changes: an image of an older revision is rebuilt.
REVISION=2
FALLBACK_MIRROR=http://deb.debian.org/debian
export DEBIAN_FRONTEND=noninteractive
export PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:${PATH:-}"

log() { printf '[bootstrap-base] %s\n' "$*" >&2; }
die() {
    log "ERROR: $*"
    exit 1
}

force=0
for arg in "$@"; do
    case $arg in
    --force) force=1 ;;
    -h | --help)
        sed -n '2,9p' "$0"
        exit 0
        ;;
    *) die "unknown argument: $arg" ;;
    esac
done

[[ $(id -u) -eq 0 ]] || die "must run as root (debootstrap needs it)"
command -v docker >/dev/null 2>&1 || die "docker CLI not found; run docker/start-engine.sh first"
docker info >/dev/null 2>&1 || die "docker engine not answering; run docker/start-engine.sh first"

old_id=$(docker image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)
old_rev=$(docker image inspect --format '{{index .Config.Labels "org.harness.base.revision"}}' \
    "$IMAGE" 2>/dev/null || true)
if [[ $force -eq 0 && -n $old_id && $old_rev == "$REVISION" ]]; then
    log "$IMAGE already present (use --force to rebuild)"
    exit 0
fi
[[ -n $old_id && $old_rev != "$REVISION" ]] && log "$IMAGE is of an older revision: rebuilding"

# Print the first Debian archive URI apt uses for $SUITE (one-line
# sources.list format and deb822 *.sources), skipping -security/-updates.
detect_mirror() {
    local f
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [[ -r $f ]] || continue
        awk -v suite="$SUITE" '
            $1 == "deb" {
                i = 2
                if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
                if ($(i + 1) == suite) { print $i; exit }
            }' "$f"
    done
    for f in /etc/apt/sources.list.d/*.sources; do
        [[ -r $f ]] || continue
        # deb822: blank-line separated stanzas of "Key: value" fields.
        awk -v suite="$SUITE" '
            function flush() {
                if (types ~ /(^| )deb( |$)/ && (" " suites " ") ~ (" " suite " ") && uris != "" && enabled != "no") {
                    split(uris, u, " "); print u[1]; found = 1
                }
                types = suites = uris = ""; enabled = "yes"
            }
            BEGIN { enabled = "yes" }
            /^[ \t]*#/ { next }
            /^[ \t]*$/ { flush(); if (found) exit; next }
            { key = tolower($1); sub(/^[^:]*:[ \t]*/, "") }
            key == "types:"   { types = $0 }
            key == "suites:"  { suites = $0 }
            key == "uris:"    { uris = $0 }
            key == "enabled:" { enabled = tolower($0) }
            END { if (!found) flush() }' "$f"
    done
}

mirror=${HARNESS_MIRROR:-$(detect_mirror | head -n1)}
mirror=${mirror:-$FALLBACK_MIRROR}
log "mirror: $mirror"

if ! command -v debootstrap >/dev/null 2>&1; then
    log "installing debootstrap"
    apt-get update -qq </dev/null >/dev/null
    apt-get install -y -qq --no-install-recommends debootstrap </dev/null >/dev/null
fi

# /var/tmp rather than /tmp: /tmp may be a nodev/noexec tmpfs, which breaks
# the chroot stage of debootstrap.
work=$(mktemp -d "${TMPDIR:-/var/tmp}/harness-base.XXXXXX")
rootfs=$work/rootfs
cleanup() {
    # debootstrap may leave proc/sys/dev mounted on failure: unmount first so
    # the rm below can never reach into host filesystems.
    local m
    if [[ -d $rootfs ]]; then
        awk -v r="$rootfs" 'index($2, r) == 1 {print $2}' /proc/mounts | sort -r |
            while read -r m; do umount -l "$m" 2>/dev/null || true; done
    fi
    rm -rf --one-file-system "$work"
}
trap cleanup EXIT

start=$SECONDS
log "debootstrap --variant=minbase --include=$INCLUDE $SUITE (log: $work/debootstrap.log)"
if ! debootstrap --variant=minbase --include="$INCLUDE" "$SUITE" "$rootfs" "$mirror" \
    </dev/null >"$work/debootstrap.log" 2>&1; then
    tail -n 30 "$work/debootstrap.log" >&2
    [[ -f $rootfs/debootstrap/debootstrap.log ]] && tail -n 30 "$rootfs/debootstrap/debootstrap.log" >&2
    die "debootstrap failed"
fi

# Keep the image small and free of host-specific state.
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin \
    "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/cache/apt/archives/partial/* \
    "$rootfs"/var/log/* "$rootfs"/tmp/* "$rootfs"/root/.cache
# Like Debian's -slim images: drop docs/man/translations (~45 MiB), keep the
# copyright files, and tell dpkg to skip them in derived images too.
find "$rootfs/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
find "$rootfs/usr/share/doc" -mindepth 1 -type d -empty -delete
rm -rf "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/usr/share/locale/*
cat >"$rootfs/etc/dpkg/dpkg.cfg.d/harness-slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
EOF
: >"$rootfs/etc/machine-id" 2>/dev/null || true
mkdir -p "$rootfs/var/lib/apt/lists/partial"
for b in python3 bash setpriv useradd groupadd iptables-restore ip6tables-restore; do
    chroot "$rootfs" /bin/sh -c "command -v $b" >/dev/null || die "$b missing from rootfs"
done

changes=(
    --change 'CMD ["/bin/bash"]'
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
    --change 'ENV LANG=C.UTF-8'
    --change "LABEL org.harness.base=$SUITE"
    --change "LABEL org.harness.base.revision=$REVISION"
)
log "importing as $IMAGE"
# --numeric-owner: keep uids/gids of the rootfs, not the host's name mapping.
tar -C "$rootfs" --numeric-owner -c . |
    docker import "${changes[@]}" --message "debootstrap minbase $SUITE from $mirror" - "$IMAGE" >/dev/null

docker run --rm --network none "$IMAGE" python3 -c 'import sys; assert sys.version_info[:2] >= (3, 11)' ||
    die "$IMAGE does not run python3"
# After --force, drop the previous image unless containers still use it.
new_id=$(docker image inspect --format '{{.Id}}' "$IMAGE")
if [[ -n $old_id && $old_id != "$new_id" ]]; then
    docker image rm "$old_id" >/dev/null 2>&1 || true
fi
size=$(docker image inspect --format '{{.Size}}' "$IMAGE")
log "built $IMAGE in $((SECONDS - start))s ($((size / 1024 / 1024)) MiB)"
