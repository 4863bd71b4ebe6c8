#!/usr/bin/env bash
# Make a Docker Engine and the test-image tools available on a Debian machine; safe to run again and again.
#
#   bash tests/harness/ensure_docker.sh
#
# - Installs Debian's mmdebstrap and shellcheck when missing, and docker.io when dockerd is missing
#   (one `apt-get update` per run, non-interactive; needs root).
# - When `docker info` fails, starts `dockerd --bridge=none --iptables=false --ip6tables=false` in the background
#   (no bridge network: test containers use network_mode "none" or "host") with its log in $DOCKERD_LOG, then waits
#   up to $DOCKER_WAIT_SECONDS for `docker info` to answer.
set -euo pipefail

DOCKERD_LOG=${DOCKERD_LOG:-/var/log/verl-async-dapo-dockerd.log}
DOCKER_WAIT_SECONDS=${DOCKER_WAIT_SECONDS:-60}
APT_UPDATED=0

log() { printf 'ensure_docker: %s\n' "$*" >&2; }
die() {
    log "ERROR: $*"
    exit 1
}

apt_install() {
    if [[ $(id -u) -ne 0 ]]; then
        die "need to install $* but not running as root; install them (apt-get install $*) and retry"
    fi
    if [[ $APT_UPDATED -eq 0 ]]; then
        log "apt-get update"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        APT_UPDATED=1
    fi
    log "apt-get install $*"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

docker_answers() { docker info >/dev/null 2>&1; }

install_missing_tools() {
    local missing=()
    command -v mmdebstrap >/dev/null 2>&1 || missing+=(mmdebstrap)
    command -v shellcheck >/dev/null 2>&1 || missing+=(shellcheck)
    if ! docker_answers; then
        command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
    fi
    if [[ ${#missing[@]} -gt 0 ]]; then
        apt_install "${missing[@]}"
    fi
}

start_dockerd() {
    # A dockerd that is still starting (or whose socket is stale) gets the wait below, not a second daemon.
    if pgrep -x dockerd >/dev/null 2>&1; then
        log "dockerd is running but not answering yet; waiting for it"
        return
    fi
    mkdir -p "$(dirname "$DOCKERD_LOG")"
    log "starting dockerd (log: $DOCKERD_LOG)"
    # setsid: the daemon outlives this script and the caller's process group (Ctrl-C of a test run).
    setsid dockerd --bridge=none --iptables=false --ip6tables=false >>"$DOCKERD_LOG" 2>&1 </dev/null &
}

wait_for_docker() {
    local deadline=$((SECONDS + DOCKER_WAIT_SECONDS))
    until docker_answers; do
        if ((SECONDS >= deadline)); then
            log "last lines of $DOCKERD_LOG:"
            tail -n 30 "$DOCKERD_LOG" >&2 2>/dev/null || true
            die "the Docker Engine did not answer 'docker info' within ${DOCKER_WAIT_SECONDS}s"
        fi
        sleep 1
    done
}

main() {
    install_missing_tools
    if docker_answers; then
        log "Docker Engine is up"
        return 0
    fi
    command -v dockerd >/dev/null 2>&1 || die "dockerd is still missing after installing docker.io"
    start_dockerd
    wait_for_docker
    log "Docker Engine is up"
}

main "$@"
