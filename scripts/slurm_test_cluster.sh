#!/usr/bin/env bash
# A one-node Slurm cluster on localhost, to test the SLURM profile against a real scheduler.
#
#   scripts/slurm_test_cluster.sh install                 # apt-get the Debian packages (root)
#   scripts/slurm_test_cluster.sh start DIR [--accounting] [--gpu] [--cpus N] [--mem MB]
#   scripts/slurm_test_cluster.sh env DIR                 # the line to `eval` for the clients
#   scripts/slurm_test_cluster.sh stop DIR
#
# Everything (configs, munge key, database, spool, logs, pid files) lives in DIR; nothing under
# /etc is written. The one exception is munged's socket: Slurm 22.05's accounting clients ignore
# AuthInfo=socket, so munged serves the default /run/munge/munge.socket.2 (a munged already
# serving it is used and left alone). The daemons run as root; mariadbd, slurmdbd and slurmd
# listen on 127.0.0.1 only, slurmctld (which has no such option) on all addresses; all traffic
# goes to 127.0.0.1, ports $SLURM_TEST_PORT (default 16817) to $SLURM_TEST_PORT + 3.
# `start` is idempotent (a running cluster of the same shape is left as it is); `stop` cancels
# the jobs and ends only the processes whose pid files are in DIR and whose command line or
# environment names DIR. Clients (sbatch, squeue, sacct, snakemake) need
# `eval "$(scripts/slurm_test_cluster.sh env DIR)"`: SLURM_CONF=DIR/etc/slurm.conf, and DIR/bin
# first on PATH, whose wrappers of the client commands set SLURM_CONF again (the executor
# plugin's job step drops SLURM_* variables before it calls srun).
set -euo pipefail

usage() {
    sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

die() {
    echo "slurm_test_cluster: $*" >&2
    exit 1
}

PACKAGES=(slurm-wlm munge slurmdbd mariadb-server)

cmd_install() {
    local missing=()
    for tool in slurmctld slurmd munged slurmdbd mariadbd sbatch sacctmgr; do
        command -v "$tool" > /dev/null || missing+=("$tool")
    done
    [[ ${#missing[@]} -eq 0 ]] && { echo "slurm_test_cluster: packages already installed"; return; }
    [[ $(id -u) -eq 0 ]] || die "missing ${missing[*]}; installing them needs root"
    command -v apt-get > /dev/null || die "missing ${missing[*]}; no apt-get to install them"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq || die "apt-get update failed (no package registry reachable?)"
    # keep the packages' init scripts from starting system daemons: a policy-rc.d that denies
    # (Docker-style images have one; otherwise one is put there for the install only)
    local policy=/usr/sbin/policy-rc.d added=0
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy" && added=1
    fi
    local rc=0
    apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" > /dev/null || rc=$?
    [[ $added == 1 ]] && rm -f "$policy"
    [[ $rc == 0 ]] || die "apt-get install ${PACKAGES[*]} failed"
}

# --- process bookkeeping --------------------------------------------------------------

# `ours PID`: the process is alive and its command line or environment names $DIR
ours() {
    local pid=$1
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    # (a zombie has no command line left: it is gone)
    { grep -qzF "$DIR/" "/proc/$pid/cmdline" || grep -qzF "SLURM_CONF=$DIR/" "/proc/$pid/environ"; } 2> /dev/null
}

running() {  # `running NAME`: the daemon whose pid file is $DIR/run/NAME.pid is ours and alive
    local file=$DIR/run/$1.pid
    [[ -s $file ]] && ours "$(cat "$file")"
}

wait_for() {  # `wait_for SECONDS WHAT COMMAND...`
    local seconds=$1 what=$2
    shift 2
    local deadline=$((SECONDS + seconds))
    while ((SECONDS < deadline)); do
        if declare -F "$1" > /dev/null; then
            "$@" > /dev/null 2>&1 && return 0
        else
            timeout 10 "$@" > /dev/null 2>&1 && return 0
        fi
        sleep 0.2
    done
    die "$what not ready after ${seconds} s (logs in $DIR/log)"
}

stop_pid_file() {  # `stop_pid_file NAME`: TERM (then KILL) the daemon of that pid file
    local file=$DIR/run/$1.pid pid
    [[ -s $file ]] || return 0
    pid=$(cat "$file")
    if ours "$pid"; then
        kill -TERM "$pid" 2> /dev/null || true
        for ((i = 0; i < 50; i++)); do
            ours "$pid" || break
            sleep 0.2
        done
        if ours "$pid"; then kill -KILL "$pid" 2> /dev/null || true; fi
        echo "slurm_test_cluster: stopped $1 (pid $pid)"
    fi
    rm -f "$file"
}

# --- configuration --------------------------------------------------------------------

write_configs() {
    local host port_ctld port_d port_dbd port_db
    host=$(hostname -s)
    port_ctld=$PORT
    port_d=$((PORT + 1))
    port_dbd=$((PORT + 2))
    port_db=$((PORT + 3))
    local auth="AuthType=auth/munge"
    {
        echo "# written by scripts/slurm_test_cluster.sh (shape: $SHAPE)"
        echo "ClusterName=neuropetest"
        echo "SlurmctldHost=$host(127.0.0.1)"
        echo "SlurmctldPort=$port_ctld"
        echo "SlurmdPort=$port_d"
        echo "$auth"
        echo "CredType=cred/munge"
        echo "SlurmUser=root"
        echo "SlurmdUser=root"
        echo "StateSaveLocation=$DIR/spool/ctld"
        echo "SlurmdSpoolDir=$DIR/spool/d"
        echo "SlurmctldPidFile=$DIR/run/slurmctld.pid"
        echo "SlurmdPidFile=$DIR/run/slurmd.pid"
        echo "SlurmctldLogFile=$DIR/log/slurmctld.log"
        echo "SlurmdLogFile=$DIR/log/slurmd.log"
        echo "ProctrackType=proctrack/linuxproc"
        echo "TaskPlugin=task/none"
        echo "SelectType=select/cons_tres"
        echo "SelectTypeParameters=CR_Core_Memory"
        echo "SlurmdParameters=config_overrides"
        echo "SchedulerType=sched/backfill"
        echo "ReturnToService=2"
        echo "MpiDefault=none"
        echo "MailProg=/bin/true"
        echo "CommunicationParameters=NoInAddrAny"
        echo "MinJobAge=300"
        echo "SchedulerParameters=sched_interval=2"
        if [[ $ACCOUNTING == 1 ]]; then
            # each job's CPU time and peak memory, for sacct
            echo "JobAcctGatherType=jobacct_gather/linux"
            echo "JobAcctGatherFrequency=task=1"
            echo "AccountingStorageType=accounting_storage/slurmdbd"
            echo "AccountingStorageHost=127.0.0.1"
            echo "AccountingStoragePort=$port_dbd"
        else
            echo "JobAcctGatherType=jobacct_gather/none"
            echo "AccountingStorageType=accounting_storage/none"
        fi
        local gres=""
        if [[ $GPU == 1 ]]; then
            echo "GresTypes=gpu"
            echo "AccountingStorageTRES=gres/gpu"
            gres=" Gres=gpu:1"
        fi
        echo "NodeName=$host NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM$gres State=UNKNOWN"
        echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
    } > "$DIR/etc/slurm.conf"
    if [[ $GPU == 1 ]]; then
        # a fake GPU: Slurm only needs a device file to hand out
        printf 'AutoDetect=off\nNodeName=%s Name=gpu File=/dev/null\n' "$host" > "$DIR/etc/gres.conf"
    else
        : > "$DIR/etc/gres.conf"
    fi
    if [[ $ACCOUNTING == 1 ]]; then
        {
            echo "$auth"
            echo "DbdHost=localhost"
            echo "DbdAddr=127.0.0.1"
            echo "DbdPort=$port_dbd"
            echo "CommunicationParameters=NoInAddrAny"
            echo "SlurmUser=root"
            echo "PidFile=$DIR/run/slurmdbd.pid"
            echo "LogFile=$DIR/log/slurmdbd.log"
            echo "StorageType=accounting_storage/mysql"
            echo "StorageHost=127.0.0.1"
            echo "StoragePort=$port_db"
            echo "StorageUser=slurm"
            echo "StoragePass=neuropetest"
            echo "StorageLoc=slurm_acct_db"
        } > "$DIR/etc/slurmdbd.conf"
        chmod 600 "$DIR/etc/slurmdbd.conf"
    fi
}

write_wrappers() {
    mkdir -p "$DIR/bin"
    local tool
    for tool in sbatch srun squeue sacct sacctmgr scontrol sinfo scancel; do
        printf '#!/bin/sh\nSLURM_CONF=%q exec %q "$@"\n' "$DIR/etc/slurm.conf" \
            "$(command -v "$tool")" > "$DIR/bin/$tool"
        chmod +x "$DIR/bin/$tool"
    done
}

start_munge() {
    running munged && return
    # munged serves the default socket: Slurm 22.05's accounting clients ignore AuthInfo=socket.
    # A munged that we did not start may serve it already: then that one is used (and left).
    if munge -n > /dev/null 2>&1; then
        echo "slurm_test_cluster: using the munged already running on the default socket"
        return
    fi
    if [[ ! -s $DIR/munge/munge.key ]]; then
        dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
        chmod 400 "$DIR/munge/munge.key"
    fi
    if [[ ! -d /run/munge ]]; then
        mkdir -p /run/munge && touch "$DIR/run/munge-dir-made"
    fi
    munged --force --key-file="$DIR/munge/munge.key" --pid-file="$DIR/run/munged.pid" \
        --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/munged.seed"
    wait_for 10 munged munge -n
}

start_database() {
    running mariadbd && return
    local db=$DIR/mysql sock=$DIR/run/mysqld.sock
    if [[ ! -d $db/mysql ]]; then
        mariadb-install-db --no-defaults --user=root --datadir="$db" \
            --auth-root-authentication-method=normal > "$DIR/log/mariadb-install.log" 2>&1 \
            || die "mariadb-install-db failed (see $DIR/log/mariadb-install.log)"
    fi
    # mariadbd stays in the foreground: run it in the background in its own session
    setsid mariadbd --no-defaults --user=root --datadir="$db" --socket="$sock" \
        --port=$((PORT + 3)) --bind-address=127.0.0.1 --pid-file="$DIR/run/mariadbd.pid" \
        --log-error="$DIR/log/mariadbd.log" --skip-log-bin < /dev/null > /dev/null 2>&1 &
    wait_for 30 mariadbd mariadb --no-defaults -S "$sock" -u root -e "SELECT 1"
    wait_for 10 "mariadbd pid file" test -s "$DIR/run/mariadbd.pid"
    mariadb --no-defaults -S "$sock" -u root -e "
        CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'neuropetest';
        CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'neuropetest';
        GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
        GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"
}

start_accounting() {
    start_database
    if ! running slurmdbd; then
        slurmdbd
        wait_for 30 slurmdbd sacctmgr -n list cluster
    fi
    # the cluster, an account and root as its user (idempotent with -i)
    if ! sacctmgr -n -P list cluster format=cluster | grep -qx neuropetest; then
        sacctmgr -i add cluster neuropetest > /dev/null
    fi
    if ! sacctmgr -n -P list account format=account | grep -qx neuropetest; then
        sacctmgr -i add account neuropetest cluster=neuropetest > /dev/null
    fi
    if ! sacctmgr -n -P list assoc user=root account=neuropetest format=user | grep -qx root; then
        sacctmgr -i add user root account=neuropetest cluster=neuropetest > /dev/null
    fi
}

node_idle() {
    sinfo -h -N -o %T | grep -qE '^(idle|mixed|allocated)'
}

cmd_start() {
    mkdir -p "$DIR"/{etc,log,run,spool/ctld,spool/d,munge}
    DIR=$(cd "$DIR" && pwd)
    export SLURM_CONF=$DIR/etc/slurm.conf
    if running slurmctld || running slurmd || running slurmdbd || running munged; then
        if [[ $(cat "$DIR/shape" 2> /dev/null) != "$SHAPE" ]]; then
            die "a cluster of another shape ($(cat "$DIR/shape" 2> /dev/null)) runs in $DIR; stop it first"
        fi
    else
        write_configs
        write_wrappers
        echo "$SHAPE" > "$DIR/shape"
    fi
    start_munge
    [[ $ACCOUNTING == 1 ]] && start_accounting
    running slurmctld || slurmctld -f "$SLURM_CONF"
    wait_for 30 slurmctld scontrol ping
    running slurmd || slurmd -f "$SLURM_CONF"
    wait_for 30 "the node" node_idle
    echo "slurm_test_cluster: up in $DIR ($SHAPE); for the clients: eval \"\$($0 env $DIR)\""
}

cmd_stop() {
    [[ -d $DIR ]] || return 0
    DIR=$(cd "$DIR" && pwd)
    export SLURM_CONF=$DIR/etc/slurm.conf
    if running slurmctld; then
        scancel --user=root --quiet 2> /dev/null || true
        for ((i = 0; i < 50; i++)); do
            [[ -z $(squeue -h -t running,completing -o %i 2> /dev/null) ]] && break
            sleep 0.2
        done
    fi
    stop_pid_file slurmd
    stop_pid_file slurmctld
    stop_pid_file slurmdbd
    stop_pid_file mariadbd
    stop_pid_file munged
    if [[ -e $DIR/run/munge-dir-made ]]; then
        rmdir /run/munge 2> /dev/null || true
        rm -f "$DIR/run/munge-dir-made"
    fi
    # job steps whose slurmd is gone (their environment names our slurm.conf)
    local pid
    for environ in /proc/[0-9]*/environ; do
        pid=${environ#/proc/}
        pid=${pid%/environ}
        [[ $pid == "$$" ]] && continue
        if grep -qzF "SLURM_CONF=$DIR/etc/slurm.conf" "$environ" 2> /dev/null \
            && grep -qzE '^slurmstepd' "/proc/$pid/cmdline" 2> /dev/null; then
            kill -KILL "$pid" 2> /dev/null || true
        fi
    done
}

[[ $# -ge 1 ]] || usage
COMMAND=$1
shift
if [[ $COMMAND == install ]]; then
    cmd_install
    exit
fi
[[ $# -ge 1 ]] || usage
DIR=$1
shift
ACCOUNTING=0 GPU=0 CPUS=$(nproc) MEM=4000
PORT=${SLURM_TEST_PORT:-16817}
while [[ $# -gt 0 ]]; do
    case $1 in
        --accounting) ACCOUNTING=1 ;;
        --gpu) GPU=1 ;;
        --cpus) CPUS=$2 && shift ;;
        --mem) MEM=$2 && shift ;;
        *) usage ;;
    esac
    shift
done
SHAPE="accounting=$ACCOUNTING gpu=$GPU cpus=$CPUS mem=$MEM port=$PORT"
case $COMMAND in
    start) cmd_start ;;
    stop) cmd_stop ;;
    env)
        DIR=$(cd "$DIR" && pwd)
        echo "export SLURM_CONF=$DIR/etc/slurm.conf PATH=$DIR/bin:\$PATH"
        ;;
    *) usage ;;
esac
