"""The batch script every SLURM attempt runs, and the files that carry its variable parts (pure: no I/O).

The script is fixed text (no value is ever spliced into it). Its one argument is the attempt's job directory,
which holds, written by the target with mode 0600 in a 0700 directory:

* ``argv``: the training command, NUL-separated (the launch plan's argv, exactly as the other targets run it);
* ``env``:  ``NAME=value`` records, NUL-separated: the plan's environment, the secret environment and the
  script's switch ``VAD_SLURM_JOB_RAY`` (1: start Ray across the allocation). The script checks each name,
  exports it and deletes the file (secrets never reach sbatch's command line or the job's record in slurmctld).
  ``VAD_SLURM_RAY_PORT`` (6379) and ``VAD_SLURM_RAY_WAIT`` (300 s) may come from the submitting environment.

It follows verl's own recipe (examples/tutorial/slurm/ray_on_slurm.slurm): node names from
``scontrol show hostnames``; for several nodes the Ray head on the first node via ``srun``, a worker on each other
node via ``srun``, then the trainer via ``srun --overlap`` on the head node. Where the recipe sleeps a fixed
10 s / 5 s, this script waits until Ray reports every node alive (bounded by ``VAD_SLURM_RAY_WAIT``). On one node
no Ray is started here: verl's ``ray.init()`` starts its own, exactly as on the host target. The trainer's exit
code goes to ``rc`` (renamed into place, like the host launcher's), and ``started`` records the start time.
Everything the job prints goes to the attempt's log (sbatch ``--output``, appended).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

QUEUED_MARK = "[verl-async-dapo] queued:"  # written by the target before sbatch; logs/phases.py reads it
STARTED_MARK = "[verl-async-dapo] started:"  # printed by the script when the allocation begins

BATCH_SCRIPT = r"""#!/bin/bash
# verl-async-dapo: one training attempt as a SLURM batch job. Fixed text: every variable part is read from the
# job directory given as $1 (see targets/slurm/script.py).
set -uo pipefail
umask 077
job_dir=${1:-}
if [[ $job_dir != /* || ! -d $job_dir ]]; then
    echo "verl-async-dapo: the job directory argument is missing or not a directory" >&2
    exit 97
fi
mapfile -d '' -t argv <"$job_dir/argv" || exit 97
if ((${#argv[@]} == 0)); then
    echo "verl-async-dapo: $job_dir/argv holds no command" >&2
    exit 97
fi
while IFS= read -r -d '' entry; do
    if [[ ! $entry =~ ^[A-Za-z_][A-Za-z0-9_]*= ]]; then
        echo "verl-async-dapo: refusing an environment entry that is not NAME=value" >&2
        exit 97
    fi
    export "${entry?}"
done <"$job_dir/env" || exit 97
rm -f -- "$job_dir/env"
date +%s >"$job_dir/started"

# Step 1 of verl's ray_on_slurm recipe: the allocation's node names, the first one is the head.
mapfile -t nodes < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
node_count=${#nodes[@]}
if ((node_count == 0 || node_count != SLURM_JOB_NUM_NODES)); then
    echo "verl-async-dapo: scontrol returned $node_count node(s) for $SLURM_JOB_NODELIST, expected $SLURM_JOB_NUM_NODES" >&2
    exit 98
fi
head_node=${nodes[0]}
echo "[verl-async-dapo] started: SLURM job $SLURM_JOB_ID on $node_count node(s): ${nodes[*]}"

if [[ ${VAD_SLURM_JOB_RAY:-0} == 1 ]]; then
    # Step 2: the head node's address (the first IPv4 one when it prints several).
    head_ip=$(srun --overlap --nodes=1 --ntasks=1 -w "$head_node" hostname --ip-address)
    read -r -a addresses <<<"$head_ip"
    for address in "${addresses[@]}"; do
        if [[ $address =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
            head_ip=$address
            break
        fi
    done
    port=${VAD_SLURM_RAY_PORT:-6379}
    ip_head=$head_ip:$port
    cpus=${SLURM_CPUS_ON_NODE:-1}
    gpus=${SLURM_GPUS_PER_NODE:-0}
    gpus=${gpus##*:}
    # Step 3: the Ray head on the first node.
    echo "[verl-async-dapo] starting the Ray head on $head_node ($ip_head)"
    srun --overlap --nodes=1 --ntasks=1 -w "$head_node" \
        ray start --head --node-ip-address="$head_ip" --port="$port" \
        --num-cpus="$cpus" --num-gpus="$gpus" --block &
    # Step 4: a Ray worker on every other node.
    for ((i = 1; i < node_count; i++)); do
        echo "[verl-async-dapo] starting a Ray worker on ${nodes[i]}"
        srun --overlap --nodes=1 --ntasks=1 -w "${nodes[i]}" \
            ray start --address="$ip_head" --num-cpus="$cpus" --num-gpus="$gpus" --block &
    done
    # Step 5: wait until Ray counts every node alive (the recipe sleeps instead).
    deadline=$((SECONDS + ${VAD_SLURM_RAY_WAIT:-300}))
    until alive=$(python3 -c 'import sys, ray; ray.init(address=sys.argv[1], logging_level="ERROR"); print(sum(n["Alive"] for n in ray.nodes()))' "$ip_head" 2>/dev/null) &&
        [[ $alive == "$node_count" ]]; do
        if ((SECONDS > deadline)); then
            echo "verl-async-dapo: Ray has ${alive:-no} of $node_count node(s) alive after ${VAD_SLURM_RAY_WAIT:-300} s" >&2
            exit 99
        fi
        sleep 2
    done
    echo "[verl-async-dapo] Ray is up on $node_count node(s)"
    export RAY_ADDRESS=$ip_head
fi

# Step 6: the trainer on the head node, exactly the launch plan's argv.
srun --overlap --nodes=1 --ntasks=1 -w "$head_node" -- "${argv[@]}" </dev/null
rc=$?
echo "$rc" >"$job_dir/rc.tmp" && mv -f -- "$job_dir/rc.tmp" "$job_dir/rc"
exit "$rc"
"""

# The script's own switches, passed in the env file beside the plan's environment.
START_RAY_ENV = "VAD_SLURM_JOB_RAY"
RAY_PORT_ENV = "VAD_SLURM_RAY_PORT"
RAY_WAIT_ENV = "VAD_SLURM_RAY_WAIT"


def nul_records(items: Sequence[str]) -> bytes:
    """NUL-terminated records (``mapfile -d ''`` / ``read -d ''`` read them back); values were checked NUL-free."""
    return b"".join(item.encode("utf-8") + b"\0" for item in items)


def env_records(env: Mapping[str, str]) -> bytes:
    return nul_records([f"{name}={value}" for name, value in env.items()])


def queued_line(job_name: str, description: str) -> str:
    return f"{QUEUED_MARK} SLURM batch job {job_name} submitted ({description}); waiting for the scheduler to start it\n"
