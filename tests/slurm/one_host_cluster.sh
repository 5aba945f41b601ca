#!/usr/bin/env bash
# A real Slurm cluster with accounting on one host, self-contained in one scratch folder.
#
#   one_host_cluster.sh start|stop|status|env|clean|munge|munge-stop
#
# The daemons keep their state, logs and pid files in the scratch folder: a private MariaDB (its
# own data folder and socket, TCP on 127.0.0.1 only), slurmdbd, slurmctld, and one slurmd per
# emulated node (NodeName entries whose NodeHostname is this host, each on its own port). munge is
# the one shared piece: Slurm's clients reach slurmdbd through munge's default socket whatever
# AuthInfo says, so the script uses the host's munged if one answers (and leaves it running), else
# starts one with the host's key (creating /etc/munge/munge.key if the package did not) and stops
# it again. Ports are configurable, so it runs beside a system Slurm; `stop` ends only what
# `start` started.
# Clients find the cluster through SLURM_CONF: `eval "$(one_host_cluster.sh env)"`.
#
# Needs root and Debian's packages: slurm-wlm slurmdbd mariadb-server munge. Slurm 22.05 runs
# jobs as the submitting user, so other users submit with `runuser -u USER -- sbatch ...`.
#
# Settings (environment):
#   TSCHED_SLURM_DIR      scratch folder (default /tmp/tsched-slurm): etc/ run/ log/ state/ spool/ db/
#   TSCHED_SLURM_NODES    emulated nodes n1..nN (default 4)
#   TSCHED_SLURM_CPUS     CPUs per node (default 4; more than the host has is fine for sleep jobs)
#   TSCHED_SLURM_PORT     base port: slurmctld; +1 slurmdbd; +2 MariaDB; +10.. the nodes (default 16817)
#   TSCHED_SLURM_CLUSTER  cluster name (default tsched)
#   TSCHED_SLURM_MEMORY   RealMemory per node in MB (default 1000)
#   TSCHED_SLURM_GPUS     GPUs per GPU node, as generic resources (default 0: none); each gets an empty
#                         placeholder file (Slurm 22.05 wants a File= per GPU) and gres/gpu is accounted
#   TSCHED_SLURM_GPU_NODES  which nodes have the GPUs, as node numbers (default all: "1 2 3 4")
#   TSCHED_SLURM_SELECT   SelectTypeParameters (default CR_Core; CR_CPU, CR_Core_Memory, CR_CPU_Memory)
#   TSCHED_SLURM_SCHEDULER  SchedulerParameters (default bf_interval=1,sched_min_interval=100000)
#   TSCHED_SLURM_PARTITIONS PartitionName lines, one per line (default: batch, the default partition, and
#                         short, both over every node)
#   TSCHED_SLURM_EXTRA    extra slurm.conf lines, appended verbatim (e.g. JobSubmitPlugins=lua)
#   TSCHED_SLURM_JOBCOMP  JobCompType and JobCompLoc (default: jobcomp/filetxt to log/jobcomp.txt), e.g.
#                         "jobcomp/script /path/to/script"
set -euo pipefail

DIR=${TSCHED_SLURM_DIR:-/tmp/tsched-slurm}
NODES=${TSCHED_SLURM_NODES:-4}
CPUS=${TSCHED_SLURM_CPUS:-4}
PORT=${TSCHED_SLURM_PORT:-16817}
CLUSTER=${TSCHED_SLURM_CLUSTER:-tsched}
MEMORY=${TSCHED_SLURM_MEMORY:-1000}
GPUS=${TSCHED_SLURM_GPUS:-0}
GPU_NODES=${TSCHED_SLURM_GPU_NODES:-$(seq -s ' ' "$NODES")}
SELECT=${TSCHED_SLURM_SELECT:-CR_Core}
SCHEDULER=${TSCHED_SLURM_SCHEDULER:-bf_interval=1,sched_min_interval=100000}
PARTITIONS=${TSCHED_SLURM_PARTITIONS:-"PartitionName=batch Nodes=n[1-$NODES] Default=YES MaxTime=INFINITE State=UP
PartitionName=short Nodes=n[1-$NODES] MaxTime=10 DefaultTime=2 State=UP"}
HOST=$(hostname -s)
export SLURM_CONF="$DIR/etc/slurm.conf"
MUNGE_SOCKET=/run/munge/munge.socket.2
DB_SOCKET="$DIR/run/mysqld/mysqld.sock"
DB_PASSWORD=tsched-slurm

log() { echo "one_host_cluster: $*" >&2; }
die() { log "$*"; exit 1; }

need_packages() {
    [ "$(id -u)" -eq 0 ] || die "needs root (daemons run as root, munge and mysql)"
    local missing=()
    for tool in munged mariadbd mariadb-install-db slurmdbd slurmctld slurmd sacctmgr sbatch; do
        command -v "$tool" >/dev/null || missing+=("$tool")
    done
    [ ${#missing[@]} -eq 0 ] || die "missing ${missing[*]}: apt-get install slurm-wlm slurmdbd mariadb-server munge"
}

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
    local seconds=$1 what=$2
    shift 2
    local deadline=$((SECONDS + seconds))
    while [ "$SECONDS" -lt "$deadline" ]; do
        timeout 10 "$@" >/dev/null 2>&1 && return 0
        sleep 0.5
    done
    die "$what did not come up within ${seconds}s (logs in $DIR/log)"
}

end_pid() {  # end_pid PID NAME: TERM, then wait up to 20 s, then KILL
    local pid=$1 name=$2
    kill "$pid" 2>/dev/null || return 0
    for _ in $(seq 100); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.2
    done
    log "$name (pid $pid) ignored TERM; killing it"
    kill -9 "$pid" 2>/dev/null || true
}

stop_pid() {  # stop_pid PIDFILE NAME: end the process the file names, and remove the file
    local file=$1 name=$2
    alive "$file" && end_pid "$(cat "$file")" "$name"
    rm -f "$file"
}

has_gpus() { [ "$GPUS" -gt 0 ] && [[ " $GPU_NODES " == *" $1 "* ]]; }

gres_of() { has_gpus "$1" && echo " Gres=gpu:$GPUS"; return 0; }

write_gres_conf() {  # one line per GPU node, each GPU an empty placeholder file (no devices here)
    : >"$DIR/etc/gres.conf"
    [ "$GPUS" -gt 0 ] || return 0
    for n in $(seq "$NODES"); do
        has_gpus "$n" || continue
        mkdir -p "$DIR/gpu/n$n"
        for g in $(seq 0 $((GPUS - 1))); do : >"$DIR/gpu/n$n/gpu$g"; done
        echo "NodeName=n$n Name=gpu File=$DIR/gpu/n$n/gpu[0-$((GPUS - 1))]" >>"$DIR/etc/gres.conf"
    done
}

write_configs() {
    mkdir -p "$DIR"/{etc,run/mysqld,log,state,spool,db}
    chmod 755 "$DIR" "$DIR/run"
    chown mysql:mysql "$DIR/run/mysqld" "$DIR/db"

    {
        echo "ClusterName=$CLUSTER"
        echo "SlurmctldHost=$HOST"
        echo "SlurmctldPort=$PORT"
        echo "SlurmUser=root"
        echo "SlurmdUser=root"
        echo "AuthType=auth/munge"
        echo "CredType=cred/munge"
        echo "StateSaveLocation=$DIR/state"
        echo "SlurmdSpoolDir=$DIR/spool/%n"
        echo "SlurmctldPidFile=$DIR/run/slurmctld.pid"
        echo "SlurmdPidFile=$DIR/run/slurmd-%n.pid"
        echo "SlurmctldLogFile=$DIR/log/slurmctld.log"
        echo "SlurmdLogFile=$DIR/log/slurmd-%n.log"
        echo "ProctrackType=proctrack/linuxproc"
        echo "TaskPlugin=task/none"
        echo "JobAcctGatherType=jobacct_gather/none"
        echo "SchedulerType=sched/backfill"
        echo "SchedulerParameters=$SCHEDULER"
        echo "SelectType=select/cons_tres"
        echo "SelectTypeParameters=$SELECT"
        echo "SlurmdParameters=config_overrides"
        echo "AccountingStorageType=accounting_storage/slurmdbd"
        echo "AccountingStorageHost=localhost"
        echo "AccountingStoragePort=$((PORT + 1))"
        if [ "$GPUS" -gt 0 ]; then
            echo "GresTypes=gpu"
            echo "AccountingStorageTRES=gres/gpu"
        fi
        local jobcomp=${TSCHED_SLURM_JOBCOMP:-jobcomp/filetxt $DIR/log/jobcomp.txt}
        echo "JobCompType=${jobcomp%% *}"
        echo "JobCompLoc=${jobcomp#* }"
        echo "ReturnToService=2"
        echo "MinJobAge=2"
        echo "KillWait=2"
        echo "InactiveLimit=0"
        echo "MpiDefault=none"
        echo "MaxArraySize=10001"
        for n in $(seq "$NODES"); do
            echo "NodeName=n$n NodeHostname=$HOST Port=$((PORT + 9 + n)) CPUs=$CPUS RealMemory=$MEMORY$(gres_of "$n") State=UNKNOWN"
        done
        echo "$PARTITIONS"
        echo "${TSCHED_SLURM_EXTRA:-}"
    } >"$SLURM_CONF"
    write_gres_conf
    {
        echo "AuthType=auth/munge"
        echo "DbdHost=localhost"
        echo "DbdPort=$((PORT + 1))"
        echo "SlurmUser=root"
        echo "StorageType=accounting_storage/mysql"
        echo "StorageHost=127.0.0.1"
        echo "StoragePort=$((PORT + 2))"
        echo "StorageUser=slurm"
        echo "StoragePass=$DB_PASSWORD"
        echo "StorageLoc=slurm_acct_db"
        echo "LogFile=$DIR/log/slurmdbd.log"
        echo "PidFile=$DIR/run/slurmdbd.pid"
    } >"$DIR/etc/slurmdbd.conf"
    chmod 600 "$DIR/etc/slurmdbd.conf"
}

munge_answers() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

start_munge() {
    munge_answers && return 0
    if [ ! -f /etc/munge/munge.key ]; then
        mungekey --create --keyfile=/etc/munge/munge.key
        chown munge:munge /etc/munge/munge.key
        chmod 400 /etc/munge/munge.key
    fi
    mkdir -p "$(dirname "$MUNGE_SOCKET")"
    chown munge:munge "$(dirname "$MUNGE_SOCKET")"
    runuser -u munge -- munged --force --socket="$MUNGE_SOCKET"
    wait_for 10 munged sh -c "munge -n | unmunge"
    pgrep -u munge -x munged -n >"$DIR/run/munged.pid"
}

install_mariadb() {  # one install at a time on the host: clusters started at once failed it on a loaded CI machine
    find "$DIR/db" -mindepth 1 -delete
    flock /tmp/tsched-mariadb-install.lock mariadb-install-db --no-defaults --user=mysql --datadir="$DIR/db" \
        --auth-root-authentication-method=socket --skip-test-db --innodb-buffer-pool-size=64M \
        >>"$DIR/log/mariadb-install.log" 2>&1
}

start_mariadb() {
    alive "$DIR/run/mariadbd.pid" && return 0
    local fresh=0
    if [ ! -d "$DIR/db/mysql" ]; then
        install_mariadb || install_mariadb || {
            tail -n 40 "$DIR/log/mariadb-install.log" >&2
            die "mariadb-install-db failed twice: $DIR/log/mariadb-install.log"
        }
        fresh=1
    fi
    mariadbd --no-defaults --user=mysql --datadir="$DIR/db" --socket="$DB_SOCKET" --port=$((PORT + 2)) \
        --bind-address=127.0.0.1 --pid-file="$DIR/run/mysqld/mariadbd.pid" --log-error="$DIR/log/mariadb.log" \
        --innodb-buffer-pool-size=64M --innodb-lock-wait-timeout=900 >/dev/null 2>&1 &
    echo $! >"$DIR/run/mariadbd.pid"
    wait_for 120 MariaDB mariadb-admin --no-defaults -S "$DB_SOCKET" -u root ping
    if [ "$fresh" -eq 1 ]; then
        mariadb --no-defaults -S "$DB_SOCKET" -u root <<SQL
CREATE DATABASE slurm_acct_db;
CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$DB_PASSWORD';
CREATE USER 'slurm'@'localhost' IDENTIFIED BY '$DB_PASSWORD';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
SQL
    fi
}

start_slurm() {
    if ! alive "$DIR/run/slurmdbd.pid"; then
        slurmdbd
        wait_for 120 slurmdbd sacctmgr -n list cluster
    fi
    sacctmgr -n -P list cluster format=cluster | grep -qx "$CLUSTER" || sacctmgr -i add cluster "$CLUSTER" >/dev/null
    alive "$DIR/run/slurmctld.pid" || slurmctld
    wait_for 60 slurmctld scontrol ping
    for n in $(seq "$NODES"); do
        mkdir -p "$DIR/spool/n$n"
        alive "$DIR/run/slurmd-n$n.pid" || slurmd -N "n$n"
    done
    wait_for 60 "$NODES idle nodes" sh -c "[ \"\$(sinfo -h -N -t idle -o %N | sort -u | wc -l)\" = $NODES ]"
}

cmd_start() {
    need_packages
    write_configs
    start_munge
    start_mariadb
    start_slurm
    log "up: $NODES nodes x $CPUS CPUs, $MEMORY MB$([ "$GPUS" -gt 0 ] && echo ", $GPUS GPUs on nodes $GPU_NODES"); SLURM_CONF=$SLURM_CONF"
}

cmd_stop() {
    # slurmd removes its pid file as soon as it is told to shut down, but waits for its job steps: keep the pids
    local slurmds=()
    for file in "$DIR"/run/slurmd-*.pid; do
        alive "$file" && slurmds+=("$(cat "$file")")
    done
    if alive "$DIR/run/slurmctld.pid"; then
        squeue -h -o %i 2>/dev/null | xargs -r scancel --full --quiet 2>/dev/null || true
        # let the cancelled steps report to slurmctld, or they retry for ever once it is gone
        for _ in $(seq 60); do
            [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break
            sleep 0.5
        done
        scontrol shutdown >/dev/null 2>&1 || true  # slurmctld and every slurmd
    fi
    stop_pid "$DIR/run/slurmctld.pid" slurmctld
    for pid in "${slurmds[@]}"; do
        end_pid "$pid" slurmd
    done
    rm -f "$DIR"/run/slurmd-*.pid
    stop_pid "$DIR/run/slurmdbd.pid" slurmdbd
    if alive "$DIR/run/mariadbd.pid"; then
        mariadb-admin --no-defaults -S "$DB_SOCKET" -u root shutdown >/dev/null 2>&1 || true
    fi
    stop_pid "$DIR/run/mariadbd.pid" MariaDB
    stop_pid "$DIR/run/munged.pid" munged
    log "stopped (scratch folder kept: $DIR; 'clean' removes it)"
}

cmd_status() {
    local down=0
    for file in munged mariadbd slurmdbd slurmctld; do
        if alive "$DIR/run/$file.pid"; then echo "$file running (pid $(cat "$DIR/run/$file.pid"))"; else echo "$file stopped"; down=1; fi
    done
    for file in "$DIR"/run/slurmd-*.pid; do
        [ -e "$file" ] || continue
        if alive "$file"; then echo "$(basename "$file" .pid) running (pid $(cat "$file"))"; else echo "$(basename "$file" .pid) stopped"; down=1; fi
    done
    [ "$down" -eq 0 ] && sinfo
    return "$down"
}

case "${1:-}" in
start) cmd_start ;;
stop) cmd_stop ;;
status) cmd_status ;;
env) echo "export SLURM_CONF=$SLURM_CONF" ;;
clean) cmd_stop; rm -rf "$DIR" ;;
# several clusters at once share one munged: start it first (a cluster then leaves it alone), stop it last
munge) need_packages; mkdir -p "$DIR/run"; start_munge ;;
munge-stop) stop_pid "$DIR/run/munged.pid" munged ;;
*) echo "usage: $0 start|stop|status|env|clean|munge|munge-stop" >&2; exit 2 ;;
esac
