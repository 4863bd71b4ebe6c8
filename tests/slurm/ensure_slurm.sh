#!/usr/bin/env bash
# A real single-machine SLURM cluster for tests/slurm: munged + slurmctld + slurmd on 127.0.0.1. Idempotent.
#
#   bash tests/slurm/ensure_slurm.sh        # prints the partition name on stdout when `sinfo` answers
#
# - Installs Debian's slurm-wlm and munge when missing (needs root).
# - Writes /etc/slurm/slurm.conf for this one node (only when it is not there or is ours: a machine with a real
#   SLURM configuration is left alone) with a partition of CPUs and no GPUs ($VAD_SLURM_PARTITION, default
#   "vadtest"). The sandbox has no usable cgroups: proctrack/linuxproc, task/none, jobacct_gather/none,
#   no accounting (sacct is then unavailable: the target falls back to squeue and its own rc file).
# - Starts munged, slurmctld and slurmd as root in the background (setsid: they outlive this script), only the
#   ones not already running, then waits up to $SLURM_WAIT_SECONDS for `sinfo` to show the node idle.
set -euo pipefail

PARTITION=${VAD_SLURM_PARTITION:-vadtest}
SLURM_WAIT_SECONDS=${SLURM_WAIT_SECONDS:-60}
CONF=/etc/slurm/slurm.conf
STATE=/var/lib/vad-slurm
LOGS=/var/log/vad-slurm
RUN=/run/vad-slurm
MARK="# written by verl-async-dapo tests/slurm/ensure_slurm.sh"

log() { printf 'ensure_slurm: %s\n' "$*" >&2; }
die() {
    log "ERROR: $*"
    exit 1
}

need_root() { [[ $(id -u) -eq 0 ]] || die "needs root to $*"; }

install_missing() {
    local missing=()
    command -v slurmctld >/dev/null 2>&1 || missing+=(slurmctld)
    command -v slurmd >/dev/null 2>&1 || missing+=(slurmd)
    command -v sbatch >/dev/null 2>&1 || missing+=(slurm-client)
    command -v munged >/dev/null 2>&1 || missing+=(munge)
    if [[ ${#missing[@]} -gt 0 ]]; then
        need_root "apt-get install ${missing[*]}"
        log "apt-get install slurm-wlm munge (missing: ${missing[*]})"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
    fi
}

write_conf() {
    local host cpus
    host=$(hostname -s)
    cpus=$(nproc)
    if [[ -f $CONF ]] && ! grep -qF "$MARK" "$CONF"; then
        log "$CONF exists and is not ours: using it as it is"
        return
    fi
    mkdir -p "$STATE/ctld" "$STATE/d" "$LOGS" "$RUN" /etc/slurm
    local tmp
    tmp=$(mktemp "$CONF.XXXXXX")
    cat >"$tmp" <<EOF
$MARK
ClusterName=vadtest
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
GresTypes=gpu
# Time limits act at once and kills are quick: the tests' time-limit kill takes about a minute, not three.
OverTimeLimit=0
KillWait=5
MinJobAge=600
InactiveLimit=0
SlurmdTimeout=60
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=1000 State=UNKNOWN
PartitionName=$PARTITION Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
    if [[ -f $CONF ]] && cmp -s "$tmp" "$CONF"; then
        rm -f "$tmp"
        return
    fi
    mv -f "$tmp" "$CONF"
    chmod 644 "$CONF"
    log "wrote $CONF (node $host, $cpus CPUs, partition $PARTITION)"
    CONF_CHANGED=1
}

running() { pgrep -x "$1" >/dev/null 2>&1; }

start_daemons() {
    if ! running munged; then
        need_root "start munged"
        mkdir -p /run/munge /var/log/munge /var/lib/munge
        [[ -f /etc/munge/munge.key ]] || { dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null && chmod 400 /etc/munge/munge.key; }
        log "starting munged"
        setsid munged --force >>"$LOGS/munged.out" 2>&1 </dev/null
    fi
    if [[ ${CONF_CHANGED:-0} -eq 1 ]] && running slurmctld; then
        log "configuration changed: scontrol reconfigure"
        scontrol reconfigure >&2 || true
    fi
    if ! running slurmctld; then
        need_root "start slurmctld"
        log "starting slurmctld (log: $LOGS/slurmctld.log)"
        setsid slurmctld >>"$LOGS/slurmctld.out" 2>&1 </dev/null
    fi
    if ! running slurmd; then
        need_root "start slurmd"
        log "starting slurmd (log: $LOGS/slurmd.log)"
        setsid slurmd >>"$LOGS/slurmd.out" 2>&1 </dev/null
    fi
}

node_ready() {
    local state
    state=$(sinfo -h -p "$PARTITION" -o '%t' 2>/dev/null | head -n 1) || return 1
    [[ $state == idle* || $state == mix* || $state == alloc* ]]
}

wait_ready() {
    local deadline=$((SECONDS + SLURM_WAIT_SECONDS)) resumed=0 state
    until node_ready; do
        state=$(sinfo -h -p "$PARTITION" -o '%t' 2>/dev/null | head -n 1) || state=
        if [[ $resumed -eq 0 && ($state == down* || $state == drain*) ]]; then
            # Left DOWN by an earlier slurmd that stopped (this script restarted it): put it back in service.
            log "node is $state: scontrol update State=RESUME"
            scontrol update NodeName="$(hostname -s)" State=RESUME >&2 || true
            resumed=1
        fi
        if ((SECONDS > deadline)); then
            log "sinfo says: $(sinfo 2>&1 | tr '\n' ' ')"
            tail -n 20 "$LOGS/slurmctld.log" "$LOGS/slurmd.log" >&2 2>/dev/null || true
            die "the node is not idle in partition $PARTITION after ${SLURM_WAIT_SECONDS}s"
        fi
        sleep 0.5
    done
}

if node_ready; then
    printf '%s\n' "$PARTITION"
    exit 0
fi
mkdir -p "$LOGS"
install_missing
write_conf
start_daemons
wait_ready
log "slurm is up: $(sinfo -h -o '%P %a %D %t' | tr '\n' ' ')"
printf '%s\n' "$PARTITION"
