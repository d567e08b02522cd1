#!/usr/bin/env bash
# A real single-node Slurm (Debian's slurm-wlm): starts munged, slurmctld and
# slurmd on this machine with a configuration of its own, then submits the
# documented batch script (examples/slurm/troupe.sbatch) and checks that its
# job trains and ends in order. Exits 77 (skipped, saying why) where Slurm is
# not installed or its daemons cannot start here.
#
#   slurm_test.sh TROUPE_BIN_DIR REPO_ROOT
set -uo pipefail
bin_dir=$1
repo=$2
skip() {
  echo "skipped: $*"
  exit 77
}
for tool in munged slurmctld slurmd sbatch sinfo scancel; do
  command -v "$tool" >/dev/null || skip "$tool is not installed (Debian: slurm-wlm, munge)"
done
[ "$(id -u)" = 0 ] || skip "the Slurm daemons need root here"

work=$(mktemp -d /tmp/troupe-slurm-test.XXXXXX)
chmod 755 "$work"
pids=()
cleanup() {
  scancel --quiet --full -u root 2>/dev/null || true
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  sleep 0.5
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work" /tmp/troupe-slurm-15001  # (job 1's head keeps its state there)
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
host=$(hostname -s)
cpus=$(nproc)
# Slurm names the node by its host name, and so does the launch environment.
getent hosts "$host" >/dev/null || skip "this machine's host name '$host' does not resolve"
[ -z "$(pgrep -x slurmctld)" ] || skip "a slurmctld already runs on this machine"

# munge, with a key and socket of its own.
mkdir -p "$work/munge"
chmod 700 "$work/munge"
dd if=/dev/urandom of="$work/munge/key" bs=1024 count=1 status=none
chmod 400 "$work/munge/key"
munged --force --key-file="$work/munge/key" --socket="$work/munge/socket" \
  --pid-file="$work/munge/pid" --log-file="$work/munge/log" --seed-file="$work/munge/seed" ||
  skip "munged cannot start: $(tail -n 3 "$work/munge/log" 2>/dev/null)"
pids+=("$(cat "$work/munge/pid")")

mkdir -p "$work/state" "$work/spool"
cat >"$work/slurm.conf" <<EOF
ClusterName=trouptest
SlurmctldHost=$host
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$work/munge/socket
CredType=cred/munge
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool/%n
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
NodeName=$host CPUs=$cpus State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
export SLURM_CONF=$work/slurm.conf

slurmctld -D -f "$SLURM_CONF" >"$work/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -f "$SLURM_CONF" >"$work/slurmd.out" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  state=$(sinfo -h -n "$host" -o %T 2>/dev/null || true)
  [ "$state" = idle ] && break
  sleep 0.2
done
if [ "${state:-}" != idle ]; then
  skip "slurmctld and slurmd did not come up (node state '${state:-none}'): $(tail -n 3 "$work/slurmctld.log" "$work/slurmd.log" 2>/dev/null | tr '\n' ' ')"
fi

# The documented batch script, on one node of two tasks' CPUs, training the
# addition task for a few steps.
export PATH=$bin_dir:$PATH
cd "$work"
sbatch --wait --nodes=1 --ntasks-per-node=1 --cpus-per-task="$cpus" --time=5 \
  --output="$work/job.out" "$repo/examples/slurm/troupe.sbatch" \
  "$repo/examples/configs/addition_ddp.json"
status=$?
cat "$work/job.out"
if [ "$status" != 0 ]; then
  echo "FAILED: the batch job exited $status"
  tail -n 20 "$work/slurmctld.log" "$work/slurmd.log"
  exit 1
fi
grep -q "starting the head" "$work/job.out" || { echo "FAILED: rank 0 did not start the head"; exit 1; }
grep -Eq "step +[0-9]+" "$work/job.out" || { echo "FAILED: no training steps in the output"; exit 1; }
echo "passed: Slurm ran the batch script and it trained"
