#!/usr/bin/env bash
# tests/bench/run.sh — side-by-side benchmark of `mover` vs rsync (daemon mode) on loopback.
#
#   tests/bench/run.sh [--mover PATH] [--work DIR] [--quick] [--keep] [--repeat N] [--only CASES]
#
# Run by hand (or from a report), never as a timed test. See tests/bench/README.md.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
HELPER="$HERE/helper.py"

MOVER="" WORK="" QUICK=0 KEEP=0 REPEAT=1 REPEAT_SET=0
ONLY="compare,resume,resume-tail,checkpoint-overhead,tls,ssh"   # `many` only when asked for

usage() {
    cat <<'EOF'
usage: tests/bench/run.sh [--mover PATH] [--work DIR] [--quick] [--keep] [--repeat N] [--only CASES]
  --mover PATH  mover binary to test (default: cargo build --release -p mover, use target/release/mover)
  --work DIR    work directory for data, destinations, logs and results.json (default: fresh /tmp dir)
  --quick       scale the data sets down 8x for a fast smoke run
  --keep        keep data and destinations at exit (logs and results.json are always kept)
  --repeat N    run every measurement N times and report the median (default 1;
                checkpoint-overhead and tls default to 3)
  --only CASES  comma-separated subset of: compare (scenarios 1-4, mover vs rsync),
                resume (SIGKILL at 90% + resume vs restart from zero),
                resume-tail (receiver SIGKILLed at 90% of one file: attempt 2 vs a
                fresh copy of the rest),
                checkpoint-overhead (initial copies without/with --operation-id),
                tls (--tls-dir vs --insecure on the large set),
                ssh (mover over TLS vs rsync over ssh, and --insecure vs the rsync
                daemon, in one run; runs its own sshd on 127.0.0.1),
                many (1M files of 100-2000 bytes, initial copy and no-op re-sync vs the
                rsync daemon; ~4 GiB x 3 on disk, not in the default list);
                default: compare,resume,resume-tail,checkpoint-overhead,tls,ssh
EOF
}

while [[ $# -gt 0 ]]; do
    case $1 in
        --mover) MOVER=$2; shift 2 ;;
        --work) WORK=$2; shift 2 ;;
        --quick) QUICK=1; shift ;;
        --keep) KEEP=1; shift ;;
        --repeat) REPEAT=$2; REPEAT_SET=1; shift 2 ;;
        --only) ONLY=$2; shift 2 ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; exit 1 ;;
    esac
done
[[ $REPEAT =~ ^[1-9][0-9]*$ ]] || { echo "--repeat needs a positive integer" >&2; exit 1; }
CASES=" "
for c in ${ONLY//,/ }; do
    case $c in
        compare | resume | resume-tail | checkpoint-overhead | tls | ssh | many) CASES+="$c " ;;
        overhead) CASES+="checkpoint-overhead " ;;
        *) echo "--only: unknown case '$c' (compare, resume, resume-tail, checkpoint-overhead, tls, ssh, many)" >&2; exit 1 ;;
    esac
done
[[ $CASES != " " ]] || { echo "--only needs at least one case" >&2; exit 1; }
want() { [[ $CASES == *" $1 "* ]]; }

log() { printf '[bench %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ---------------------------------------------------------------- tools
command -v rsync >/dev/null || apt-get install -y rsync >/dev/null || die "rsync missing and apt-get failed"
if [[ ! -x /usr/bin/time ]]; then
    apt-get install -y time >/dev/null 2>&1 || log "warning: /usr/bin/time unavailable, no peak RSS"
fi
HAVE_TIME=0; [[ -x /usr/bin/time ]] && HAVE_TIME=1
command -v python3 >/dev/null || die "python3 is required"

if [[ -z $MOVER ]]; then
    log "building mover (cargo build --release -p mover)"
    (cd "$ROOT" && cargo build --release -p mover) || die "cargo build failed"
    MOVER="${CARGO_TARGET_DIR:-$ROOT/target}/release/mover"
fi
MOVER=$(realpath "$MOVER")
[[ -x $MOVER ]] || die "mover binary not found: $MOVER"
if ! "$MOVER" send --help 2>&1 | grep -q -- '--to'; then
    log "WARNING: '$MOVER send --help' does not look like the mover CLI; mover runs will likely FAIL"
elif ! "$MOVER" send --help 2>&1 | grep -q -- '--insecure'; then
    log "WARNING: '$MOVER send' has no --insecure (a mover from before TLS?); mover runs will FAIL"
fi
# How every `mover send` / `mover receive` connects: plain TCP unless a case says otherwise
# (the tls and ssh cases set it to --tls-dir DIR for their TLS runs).
CONN=(--insecure)
# The tool names runs.tsv records for run_rsync / run_mover (also in their log names): the ssh
# case sets them to rsync-ssh / mover-tls for its runs over ssh / TLS.
RSYNC_TOOL=rsync MOVER_TOOL=mover

# ---------------------------------------------------------------- work dir and cleanup
if [[ -z $WORK ]]; then
    WORK=$(mktemp -d /tmp/volmig-bench.XXXXXX)
else
    mkdir -p "$WORK"
    WORK=$(realpath "$WORK")
fi
SRC=$WORK/src DST=$WORK/dst SNAP=$WORK/snap LOGS=$WORK/logs
TLS_DIR=$WORK/tls-keys SSH_DIR=$WORK/ssh SSH_TLS_DIR=$WORK/ssh-tls-keys TRASH=$WORK/trash
rm -rf "$SRC" "$DST" "$SNAP" "$LOGS" "$TLS_DIR" "$SSH_DIR" "$SSH_TLS_DIR" "$TRASH" \
    "$WORK"/{runs.tsv,verify_failures.tsv,resume.jsonl,tail.jsonl,tls.tsv,results.json,meta.json,table.md}
mkdir -p "$SRC" "$DST/rsync" "$DST/mover" "$LOGS"
touch "$WORK/verify_failures.tsv" "$WORK/runs.tsv" "$WORK/tls.tsv"

DAEMON_PID="" SSHD_PID="" RECV_PID="" SEND_PID=""
cleanup() {
    # Every background process runs under setsid, so its id is also its process group's.
    if [[ -n $RECV_PID ]]; then kill -- "-$RECV_PID" 2>/dev/null || true; fi
    if [[ -n $SEND_PID ]]; then kill -- "-$SEND_PID" 2>/dev/null || true; fi
    if [[ -n $DAEMON_PID ]]; then kill -- "-$DAEMON_PID" 2>/dev/null || true; fi
    if [[ -n $SSHD_PID ]]; then kill -- "-$SSHD_PID" 2>/dev/null || true; fi
    rm -f "$WORK/mover.addr"
    if [[ $KEEP == 0 ]]; then
        rm -rf "$SRC" "$DST" "$SNAP" "$TLS_DIR" "$SSH_DIR" "$SSH_TLS_DIR" "$WORK/rest"
    fi
    rm -rf "$TRASH"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------- helpers
usec() { echo "${EPOCHREALTIME/./}"; }
secs_since() { local d=$(( $(usec) - $1 )); printf '%d.%06d' $((d / 1000000)) $((d % 1000000)); }
# The last line of a `/usr/bin/time -f %M,%U,%S -o FILE` output: peak RSS in KiB, user and
# system CPU seconds (of the process and its children: `timeout` waits for mover).
rss_of() { if [[ -s $1 ]]; then tail -n1 "$1" | cut -d, -f1 | tr -dc '0-9'; else echo -1; fi; }
# cpu_of FILE: "USER SYS" seconds, or "-1 -1".
cpu_of() {
    local l
    if [[ -s $1 ]] && l=$(tail -n1 "$1") && [[ $l =~ ^[0-9]+,([0-9.]+),([0-9.]+)$ ]]; then
        echo "${BASH_REMATCH[1]} ${BASH_REMATCH[2]}"
    else echo "-1 -1"; fi
}
time_prefix() { if [[ $HAVE_TIME == 1 ]]; then echo "/usr/bin/time -f %M,%U,%S -o $1"; fi; }

DROP_OK=0 WARM=0   # WARM=1: a run that wants the page cache as it is (resume-tail)
if { sync && echo 3 >/proc/sys/vm/drop_caches; } 2>/dev/null; then DROP_OK=1; fi
drop_caches() {
    if [[ $WARM == 1 ]]; then sync
    elif [[ $DROP_OK == 1 ]]; then sync; echo 3 >/proc/sys/vm/drop_caches; fi
}

FAILED=0
fail() { log "FAIL: $*"; FAILED=1; }

# discard DIR...: moves trees of many files out of the way instead of deleting them between
# runs; the trash goes when the bench ends. ext4 without a journal (the bench VM's root file
# system) skips inodes deleted in the last 60 s (360 s while their table block is dirty) on
# every allocation: 40,000 inodes deleted just before a run added about 1 s to each tool's
# initial copy of `small`, a cost of the bench's own clean-up that a fresh volume never has.
discard() {
    local d
    mkdir -p "$TRASH"
    for d in "$@"; do
        if [[ -e $d ]]; then mv "$d" "$(mktemp -d "$TRASH/t.XXXXXX")/"; fi
    done
}

# runs.tsv: scenario tool rep secs wire_bytes rss_send_kb rss_recv_kb status log
record() { printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$WORK/runs.tsv"; }

# run_rsync SCENARIO REP SRC_DIR DEST_SUBDIR [extra rsync args...]: push SRC_DIR/ into the daemon
# module (DEST_SUBDIR under $DST/rsync), or with RSYNC_TOOL=rsync-ssh over ssh to the bench's
# sshd (DEST_SUBDIR under $DST/rsync-ssh). The parent of DEST_SUBDIR must exist.
run_rsync() {
    local sc=$1 rep=$2 src=$3 sub=$4 out rc=0 t0 secs wire st=ok tool=$RSYNC_TOOL
    local -a to
    shift 4
    out=$LOGS/$sc.$tool.$rep
    if [[ $tool == rsync-ssh ]]; then to=(-e "$SSH_CMD" "$SSH_LOGIN:$DST/rsync-ssh/$sub/")
    else to=("rsync://127.0.0.1:$PORT/bench/$sub/"); fi
    drop_caches
    t0=$(usec)
    # shellcheck disable=SC2046 # time_prefix is intentionally word-split
    $(time_prefix "$out.rss") rsync -aHS --numeric-ids --delete --stats "$@" \
        "$src/" "${to[@]}" >"$out.log" 2>&1 || rc=$?
    secs=$(secs_since "$t0")
    wire=$(python3 "$HELPER" rsync-wire "$out.log")
    [[ $rc == 0 ]] || { st="rsync-exit-$rc"; fail "$sc $tool exited $rc (see $out.log)"; }
    record "$sc" "$tool" "$rep" "$secs" "$wire" "$(rss_of "$out.rss")" -1 "$st" "$out.log"
    log "  $tool $sc #$rep: ${secs}s wire=$wire $st"
}

# run_mover SCENARIO REP SRC_DIR DEST_DIR [extra send args...]: fresh receiver, then sender,
# both with "${CONN[@]}", recorded as tool $MOVER_TOOL. Also sets LAST_SECS, LAST_WIRE,
# LAST_STATUS and LAST_OUT (log prefix).
run_mover() {
    local sc=$1 rep=$2 src=$3 dst=$4 out addr rc=0 rrc=0 t0 secs wire st=ok i tool=$MOVER_TOOL
    shift 4
    out=$LOGS/$sc.$tool.$rep addr=$WORK/mover.addr
    LAST_SECS=-1 LAST_WIRE=-1 LAST_STATUS=receiver-no-addr LAST_OUT=$out
    rm -f "$addr"
    mkdir -p "$dst"
    drop_caches
    # shellcheck disable=SC2046
    setsid $(time_prefix "$out.recv.rss") timeout 3600 "$MOVER" receive --listen 127.0.0.1:0 \
        --addr-file "$addr" --root "$dst" "${CONN[@]}" >"$out.recv.out" 2>"$out.recv.err" &
    RECV_PID=$!
    for ((i = 0; i < 300; i++)); do   # wait up to 30 s for the bound address
        [[ -s $addr ]] && break
        kill -0 "$RECV_PID" 2>/dev/null || break
        sleep 0.1
    done
    if [[ ! -s $addr ]]; then
        kill -- "-$RECV_PID" 2>/dev/null || true
        wait "$RECV_PID" 2>/dev/null || true
        RECV_PID=""
        fail "$sc $tool receiver did not write $addr (see $out.recv.err)"
        record "$sc" "$tool" "$rep" -1 -1 -1 -1 receiver-no-addr "$out.send.out"
        return 0
    fi
    t0=$(usec)
    # shellcheck disable=SC2046
    $(time_prefix "$out.send.rss") timeout 3600 "$MOVER" send --to "$(cat "$addr")" --root "$src" \
        "${CONN[@]}" --delete "$@" >"$out.send.out" 2>"$out.send.err" || rc=$?
    # The run ends when both sides have exited; give the receiver 120 s after the sender.
    [[ $rc == 0 ]] || kill -- "-$RECV_PID" 2>/dev/null || true
    for ((i = 0; i < 24000; i++)); do
        kill -0 "$RECV_PID" 2>/dev/null || break
        sleep 0.005
    done
    secs=$(secs_since "$t0")
    kill -- "-$RECV_PID" 2>/dev/null || true
    wait "$RECV_PID" || rrc=$?
    RECV_PID=""
    wire=$(python3 "$HELPER" mover-wire "$out.send.out")
    if [[ $rc != 0 ]]; then
        st="sender-exit-$rc"; fail "$sc $tool send exited $rc (see $out.send.err)"
    elif [[ $rrc != 0 ]]; then
        st="receiver-exit-$rrc"; fail "$sc $tool receive exited $rrc (see $out.recv.err)"
    elif [[ $wire == -1 ]]; then
        st="no-summary"; fail "$sc $tool send printed no summary with bytes_on_wire (see $out.send.out)"
    fi
    record "$sc" "$tool" "$rep" "$secs" "$wire" "$(rss_of "$out.send.rss")" "$(rss_of "$out.recv.rss")" \
        "$st" "$out.send.out"
    LAST_SECS=$secs LAST_WIRE=$wire LAST_STATUS=$st
    log "  $tool $sc #$rep: ${secs}s wire=$wire $st"
}

# run_cp SCENARIO REP SRC_DIR DEST_DIR [BASIS_DIR]: the scenario's local reference, recorded as
# tool `cp`: `cp -a` into DEST_DIR (which must not exist), then `sync -f` (syncfs of the
# destination: durable, as a mover run ends), the page cache dropped first. With BASIS_DIR its
# files are read (`cat`) meanwhile, as a re-sync reads its basis. One process, no network, no
# hashing, no compression: what the disk allows a plain copy, not a bound on a copy that reads
# many files at once.
run_cp() {
    local sc=$1 rep=$2 src=$3 dst=$4 basis=${5:-} out t0 secs rc=0 brc=0 st=ok reader=""
    out=$LOGS/$sc.cp.$rep
    mkdir -p "$(dirname "$dst")"
    drop_caches
    t0=$(usec)
    if [[ -n $basis ]]; then
        find "$basis" -type f -exec cat {} + >/dev/null 2>"$out.basis.err" &
        reader=$!
    fi
    { cp -a "$src" "$dst" && sync -f "$dst"; } >"$out.log" 2>&1 || rc=$?
    [[ -z $reader ]] || wait "$reader" || brc=$?
    secs=$(secs_since "$t0")
    if [[ $rc != 0 ]]; then st="cp-exit-$rc"; fail "$sc cp exited $rc (see $out.log)"
    elif [[ $brc != 0 ]]; then st="basis-read-exit-$brc"; fail "$sc: reading $basis failed (see $out.basis.err)"; fi
    record "$sc" cp "$rep" "$secs" -1 -1 -1 "$st" "$out.log"
    log "  cp $sc #$rep: ${secs}s $st"
}

# keygen CASE DIR OP: one set of key material for a case's runs (keygen never
# overwrites: the dir is fresh); false, with a FAIL, when mover keygen fails.
keygen() {
    local rc=0
    "$MOVER" keygen --out "$2" --operation-id "$3" --valid-for 1d \
        >"$LOGS/$1.keygen.out" 2>"$LOGS/$1.keygen.err" || rc=$?
    [[ $rc == 0 ]] && return 0
    fail "$1: mover keygen exited $rc (see $LOGS/$1.keygen.err)"
    return 1
}

# Sorted metadata listing: type, mode, owner, size (non-dirs), mtime (ns), path, link target.
listing() {
    (cd "$1" && find . \( -type d -printf 'd %m %U:%G - %T@ %p\n' \) -o \
        \( ! -type d -printf '%y %m %U:%G %s %T@ %p %l\n' \) | LC_ALL=C sort)
}

# verify SCENARIO TOOL SRC DST: metadata listings and contents must be identical.
verify() {
    local sc=$1 tool=$2 a=$3 b=$4 out=$LOGS/$1.$2.verify
    if diff <(listing "$a") <(listing "$b") >"$out" 2>&1 &&
        diff -rq --no-dereference "$a" "$b" >>"$out" 2>&1; then
        log "  verify $sc $tool: ok"
    else
        fail "$sc: $tool destination differs from source (see $out):"
        head -n 12 "$out" >&2
        printf '%s\t%s\n' "$sc" "$tool" >>"$WORK/verify_failures.tsv"
    fi
}

# ---------------------------------------------------------------- data sets
SCALE=1; [[ $QUICK == 1 ]] && SCALE=8
MIB=$((1024 * 1024))
LARGE_FILES=4 LARGE_SIZE=$((256 * MIB / SCALE))
SMALL_FILES=$((20000 / SCALE)) SMALL_DIRS=$((300 / SCALE))
LOG_BYTES=$((512 * MIB / SCALE)) LOG_FILES=8
EDITS=64
# `many`: 1M files of 100-2000 bytes in 4096 leaf dirs under 64 top dirs (1/8 with --quick).
# Each file takes one 4 KiB block: ~4 GiB per tree, source + two destinations.
MANY_FILES=$((1000000 / SCALE)) MANY_DIRS=$((4096 / SCALE))

log "work dir: $WORK (mover: $MOVER)"
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
log "load average at start: $LOAD_START (other work on the machine skews the numbers)"
log "generating data sets (scale 1/$SCALE)"
t_gen=$(usec)
log "cases:$CASES"
SETS=()
# Disk the data sets and the destinations need at once, roughly (GiB at full scale): 4 for the
# data sets and three copies of one (rsync's, mover's, cp's; 6 with ssh: four copies), and ~13
# more for `many` (source and two destinations of ~4.2 GiB each: every file takes a 4 KiB block).
need_gib=4
if want ssh; then need_gib=6; fi
if want many; then need_gib=$((need_gib + 13 + (REPEAT - 1) * 8)); fi   # + the trash of each repetition
avail_gib=$(df -P -BG "$WORK" | awk 'NR == 2 { sub("G", "", $4); print $4 }')
log "disk: ${avail_gib} GiB available in $(df -P "$WORK" | awk 'NR == 2 { print $6 }'), this run needs about $(( (need_gib + SCALE - 1) / SCALE )) GiB"
(( avail_gib >= (need_gib + SCALE - 1) / SCALE + 1 )) || die "not enough free disk for these cases"
if want compare || want resume || want checkpoint-overhead || want tls || want ssh; then
    mkdir -p "$SRC/large"
    for ((i = 0; i < LARGE_FILES; i++)); do
        head -c "$LARGE_SIZE" /dev/urandom >"$SRC/large/blob$i.bin"
    done
    SETS+=("$SRC/large")
fi
if want resume-tail; then   # `one`: one file as large as the whole of `large`
    mkdir -p "$SRC/one"
    head -c "$((LARGE_FILES * LARGE_SIZE))" /dev/urandom >"$SRC/one/big.bin"
    SETS+=("$SRC/one")
fi
if want compare || want checkpoint-overhead || want ssh; then
    python3 "$HELPER" small "$SRC/small" "$SMALL_FILES" "$SMALL_DIRS" 1
    SETS+=("$SRC/small")
fi
if want many; then
    t_many=$(usec)
    python3 "$HELPER" many "$SRC/many" "$MANY_FILES" "$MANY_DIRS" 6
    log "many: $MANY_FILES files in $MANY_DIRS dirs written in $(secs_since "$t_many")s"
    SETS+=("$SRC/many")
fi
if want compare || want ssh; then
    python3 "$HELPER" logs "$SRC/logs" "$LOG_BYTES" "$LOG_FILES" 2
    SETS+=("$SRC/logs")
fi
log "data generated in $(secs_since "$t_gen")s: $(du -sh "${SETS[@]}" | awk '{printf "%s=%s ", $2, $1}')"
if [[ $DROP_OK == 1 ]]; then log "page cache: dropped before every run"
else log "page cache: cannot drop (/proc/sys/vm/drop_caches not writable) — runs are warm-cache"; fi

# ---------------------------------------------------------------- rsync daemon
if want compare || want ssh || want many; then
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
{
    echo "pid file = $WORK/rsyncd.pid"
    echo "log file = $LOGS/rsyncd.log"
    echo "use chroot = no"
    echo "[bench]"
    echo "    path = $DST/rsync"
    echo "    read only = no"
    echo "    munge symlinks = no"
    if [[ $EUID == 0 ]]; then echo "    uid = root"; echo "    gid = root"; fi
} >"$WORK/rsyncd.conf"
rm -f "$WORK/rsyncd.pid"
setsid rsync --daemon --no-detach --config="$WORK/rsyncd.conf" --port="$PORT" --address=127.0.0.1 \
    >"$LOGS/rsyncd.out" 2>&1 &
DAEMON_PID=$!
for ((i = 0; i < 100; i++)); do
    rsync "rsync://127.0.0.1:$PORT/" >/dev/null 2>&1 && break
    kill -0 "$DAEMON_PID" 2>/dev/null || die "rsync daemon died (see $LOGS/rsyncd.out)"
    sleep 0.1
done
log "rsync daemon on 127.0.0.1:$PORT ($(rsync --version | head -n1))"
fi

# ---------------------------------------------------------------- sshd (the ssh case)
# shellcheck source=tests/bench/ssh.sh
source "$HERE/ssh.sh"
SSH_CMD="" SSH_LOGIN="" SSH_VERSION=""
if want ssh; then ssh_start; fi

# ---------------------------------------------------------------- scenarios
if want compare; then
log "scenario 1: initial copy of large random files"
for ((r = 1; r <= REPEAT; r++)); do
    rm -rf "$DST/rsync/large" "$DST/mover/large"
    run_rsync initial_large "$r" "$SRC/large" large
    run_mover initial_large "$r" "$SRC/large" "$DST/mover/large"
    rm -rf "$DST/cp/large"
    run_cp initial_large "$r" "$SRC/large" "$DST/cp/large"
done
verify initial_large rsync "$SRC/large" "$DST/rsync/large"
verify initial_large mover "$SRC/large" "$DST/mover/large"

log "scenario 2: delta re-sync after $EDITS scattered 4 KiB edits per file"
# With --repeat, every repetition must start from the pre-edit destination: keep a copy.
[[ $REPEAT -gt 1 ]] && cp -a "$SRC/large" "$SNAP"
python3 "$HELPER" edit "$SRC/large" "$EDITS" 3
for ((r = 1; r <= REPEAT; r++)); do
    if [[ $r -gt 1 ]]; then
        rm -rf "$DST/rsync/large" "$DST/mover/large"
        cp -a "$SNAP" "$DST/rsync/large"
        cp -a "$SNAP" "$DST/mover/large"
    fi
    run_rsync delta_large "$r" "$SRC/large" large --no-whole-file
    run_mover delta_large "$r" "$SRC/large" "$DST/mover/large" --no-whole-file
    rm -rf "$DST/cp/large"
    run_cp delta_large "$r" "$SRC/large" "$DST/cp/large" "$DST/mover/large"
done
verify delta_large rsync "$SRC/large" "$DST/rsync/large"
verify delta_large mover "$SRC/large" "$DST/mover/large"
rm -rf "$SNAP" "$DST/rsync/large" "$DST/mover/large" "$DST/cp/large"

log "scenario 3: $SMALL_FILES small files, initial copy then no-op re-sync"
for ((r = 1; r <= REPEAT; r++)); do
    discard "$DST/rsync/small" "$DST/mover/small" "$DST/cp/small"
    run_rsync initial_small "$r" "$SRC/small" small
    run_mover initial_small "$r" "$SRC/small" "$DST/mover/small"
    run_cp initial_small "$r" "$SRC/small" "$DST/cp/small"
done
verify initial_small rsync "$SRC/small" "$DST/rsync/small"
verify initial_small mover "$SRC/small" "$DST/mover/small"
for ((r = 1; r <= REPEAT; r++)); do
    run_rsync noop_small "$r" "$SRC/small" small
    run_mover noop_small "$r" "$SRC/small" "$DST/mover/small"
done
verify noop_small rsync "$SRC/small" "$DST/rsync/small"
verify noop_small mover "$SRC/small" "$DST/mover/small"
discard "$DST/rsync/small" "$DST/mover/small" "$DST/cp/small"

log "scenario 4: compressed initial copy of log text"
for ((r = 1; r <= REPEAT; r++)); do
    rm -rf "$DST/rsync/logs" "$DST/mover/logs"
    run_rsync compressed_logs "$r" "$SRC/logs" logs --compress --compress-choice=zstd
    run_mover compressed_logs "$r" "$SRC/logs" "$DST/mover/logs" --compress
    rm -rf "$DST/cp/logs"
    run_cp compressed_logs "$r" "$SRC/logs" "$DST/cp/logs"
done
verify compressed_logs rsync "$SRC/logs" "$DST/rsync/logs"
verify compressed_logs mover "$SRC/logs" "$DST/mover/logs"
rm -rf "$DST/rsync/logs" "$DST/mover/logs" "$DST/cp/logs"
fi

# ---------------------------------------------------------------- checkpoint / resume cases
# start_receiver OUT DST [receive args...]: a receiver under setsid (RECV_PID), stdout and
# stderr in OUT.out / OUT.err; returns once it has written its address to $WORK/mover.addr.
start_receiver() {
    local out=$1 dst=$2 addr=$WORK/mover.addr i
    shift 2
    rm -f "$addr"
    mkdir -p "$dst"
    setsid "$MOVER" receive --listen 127.0.0.1:0 --addr-file "$addr" --root "$dst" "${CONN[@]}" "$@" \
        >"$out.out" 2>"$out.err" &
    RECV_PID=$!
    for ((i = 0; i < 300; i++)); do   # wait up to 30 s for the bound address
        [[ -s $addr ]] && return 0
        kill -0 "$RECV_PID" 2>/dev/null || break
        sleep 0.1
    done
    kill -- "-$RECV_PID" 2>/dev/null || true
    wait "$RECV_PID" 2>/dev/null || true
    RECV_PID=""
    return 1
}

# reap PID SECS: wait up to SECS for background PID to exit; REAP_RC = its exit status, or
# "timeout" (after a SIGKILL to its process group).
reap() {
    local pid=$1 n=$(($2 * 200)) i
    REAP_RC=0
    for ((i = 0; i < n; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.005
    done
    if kill -0 "$pid" 2>/dev/null; then
        kill -KILL -- "-$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
        REAP_RC=timeout
        return 0
    fi
    wait "$pid" 2>/dev/null || REAP_RC=$?
}

# run_pair OUT SRC DST "RECV ARGS" "SEND ARGS": a receiver, then a timed sender;
# timed like run_mover, from the start of `send` until both sides have exited.
# Sets PAIR_SECS, PAIR_SEND_RC, PAIR_RECV_RC.
run_pair() {
    local out=$1 src=$2 dst=$3 rargs=$4 sargs=$5 t0
    PAIR_SECS=-1 PAIR_SEND_RC=none PAIR_RECV_RC=none
    drop_caches
    # shellcheck disable=SC2086 # argument strings are intentionally word-split
    start_receiver "$out.recv" "$dst" $rargs || return 0
    t0=$(usec)
    PAIR_SEND_RC=0
    # shellcheck disable=SC2086
    timeout 3600 "$MOVER" send --to "$(cat "$WORK/mover.addr")" --root "$src" "${CONN[@]}" $sargs \
        >"$out.send.out" 2>"$out.send.err" || PAIR_SEND_RC=$?
    [[ $PAIR_SEND_RC == 0 ]] || kill -- "-$RECV_PID" 2>/dev/null || true
    reap "$RECV_PID" 120
    PAIR_SECS=$(secs_since "$t0")
    PAIR_RECV_RC=$REAP_RC RECV_PID=""
}

# verified SCENARIO TOOL SRC DST: verify, then say "ok" or "failed" on stdout.
verified() {
    local before after
    before=$(wc -l <"$WORK/verify_failures.tsv")
    verify "$@" >&2
    after=$(wc -l <"$WORK/verify_failures.tsv")
    if [[ $before == "$after" ]]; then echo ok; else echo failed; fi
}

# Resume: attempt 1 is paced with --bwlimit so that it would take ~RESUME_SECS: progress
# events come every ~0.5 s, so the kill lands within ~5% (full) / ~8% (quick) of the threshold
# (unpaced, 1 GiB crosses 90% between two events and often finishes before the kill).
RESUME_FRACTION=0.9 RESUME_SECS=10 RESUME_OP=bench-resume
[[ $QUICK == 1 ]] && RESUME_SECS=6
TREE_FILES=0 TREE_BYTES=0
if want resume; then read -r TREE_FILES TREE_BYTES < <(python3 "$HELPER" tree-bytes "$SRC/large"); fi
RESUME_BWLIMIT=$((TREE_BYTES / 1024 / RESUME_SECS))   # KiB/s

# The resume case (resume.sh).
# shellcheck source=tests/bench/resume.sh
source "$HERE/resume.sh"
if want resume; then resume_case; fi

# The resume-tail case.
# shellcheck source=tests/bench/tail.sh
source "$HERE/tail.sh"

if want checkpoint-overhead; then
    OVH_REPEAT=$REPEAT; [[ $REPEAT_SET == 1 ]] || OVH_REPEAT=3
    for set in large small; do
        log "checkpoint overhead: initial copy of $set without and with --operation-id, $OVH_REPEAT runs each"
        for ((r = 1; r <= OVH_REPEAT; r++)); do
            # alternate the order (ABBA...) so a drifting machine does not favour one side
            if ((r % 2)); then order="off on"; else order="on off"; fi
            for mode in $order; do
                discard "$DST/ovh/$set-$mode"
                if [[ $mode == on ]]; then
                    run_mover "ckpt_${set}_on" "$r" "$SRC/$set" "$DST/ovh/$set-on" \
                        --operation-id "bench-ovh-$set-$r"
                else
                    run_mover "ckpt_${set}_off" "$r" "$SRC/$set" "$DST/ovh/$set-off"
                fi
            done
        done
        verify "ckpt_${set}_off" mover "$SRC/$set" "$DST/ovh/$set-off"
        verify "ckpt_${set}_on" mover "$SRC/$set" "$DST/ovh/$set-on"
        discard "$DST/ovh/$set-off" "$DST/ovh/$set-on"
    done
fi

# ---------------------------------------------------------------- tls
# tls_case (tls.sh): --tls-dir against --insecure on the large set.
# shellcheck source=tests/bench/tls.sh
source "$HERE/tls.sh"
if want tls; then tls_case; fi

# ---------------------------------------------------------------- ssh
# What people really run: mover over TLS against rsync over ssh (ssh.sh).
if want ssh; then ssh_case; fi

# ---------------------------------------------------------------- many
# 1M small files (1/8 with --quick): initial copy, then a no-op re-sync, mover --insecure
# against the rsync daemon, as scenario 3 of compare at 50x the files.
if want many; then
    log "many: $MANY_FILES files of 100-2000 bytes, initial copy then no-op re-sync"
    for ((r = 1; r <= REPEAT; r++)); do
        discard "$DST/rsync/many" "$DST/mover/many"
        run_rsync initial_many "$r" "$SRC/many" many
        run_mover initial_many "$r" "$SRC/many" "$DST/mover/many"
    done
    verify initial_many rsync "$SRC/many" "$DST/rsync/many"
    verify initial_many mover "$SRC/many" "$DST/mover/many"
    for ((r = 1; r <= REPEAT; r++)); do
        run_rsync noop_many "$r" "$SRC/many" many
        run_mover noop_many "$r" "$SRC/many" "$DST/mover/many"
    done
    verify noop_many rsync "$SRC/many" "$DST/rsync/many"
    verify noop_many mover "$SRC/many" "$DST/mover/many"
    rm -rf "$DST/rsync/many" "$DST/mover/many"
fi

# ---------------------------------------------------------------- report
META_RSYNC=$(rsync --version | head -n1) META_MOVER_VERSION=$("$MOVER" --version 2>/dev/null | head -n1 || true) \
META_LOAD=$LOAD_START META_MOVER=$MOVER META_QUICK=$QUICK META_SCALE=$SCALE META_REPEAT=$REPEAT META_DROP=$DROP_OK \
META_LARGE="$LARGE_FILES $LARGE_SIZE $EDITS" META_SMALL="$SMALL_FILES $SMALL_DIRS" META_LOGS="$LOG_FILES $LOG_BYTES" \
META_CASES="$CASES" META_RESUME="$RESUME_FRACTION $RESUME_BWLIMIT $RESUME_SECS" META_OVH_REPEAT="${OVH_REPEAT:-0}" \
META_TLS_REPEAT="${TLS_REPEAT:-0}" META_MANY="$MANY_FILES $MANY_DIRS" META_SSH="$SSH_VERSION" \
META_SSH_CMD="$SSH_CMD" \
    python3 - "$WORK/meta.json" <<'EOF'
import json, os, sys, time
e = os.environ
large, small, logs = (list(map(int, e[k].split())) for k in ("META_LARGE", "META_SMALL", "META_LOGS"))
json.dump({
    "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "host": os.uname().nodename,
    "cpus": os.cpu_count(), "kernel": os.uname().release, "rsync": e["META_RSYNC"],
    "mover": e["META_MOVER"], "mover_version": e["META_MOVER_VERSION"],
    "quick": e["META_QUICK"] == "1", "scale": int(e["META_SCALE"]), "repeat": int(e["META_REPEAT"]),
    "page_cache_dropped": e["META_DROP"] == "1", "loadavg_start": e["META_LOAD"],
    "loadavg_end": " ".join("%.2f" % x for x in os.getloadavg()),
    "large": {"files": large[0], "file_bytes": large[1], "edits_per_file": large[2]},
    "small": {"files": small[0], "dirs": small[1]},
    "logs": {"files": logs[0], "bytes": logs[1]},
    "cases": e["META_CASES"].split(),
    "resume": dict(zip(("kill_fraction", "attempt1_bwlimit_kib_s", "attempt1_target_secs"),
                       map(float, e["META_RESUME"].split()))),
    "checkpoint_overhead_repeat": int(e["META_OVH_REPEAT"]),
    "tls_repeat": int(e["META_TLS_REPEAT"]),
    "many": dict(zip(("files", "dirs"), map(int, e["META_MANY"].split()))),
    "ssh": {"version": e["META_SSH"], "rsync_e": e["META_SSH_CMD"]} if e["META_SSH"] else None,
}, open(sys.argv[1], "w"), indent=2)
EOF
echo
SCALE_TXT=$([[ $QUICK == 1 ]] && echo "QUICK 1/$SCALE scale" || echo "full scale")
CACHE_TXT="page cache $([[ $DROP_OK == 1 ]] && echo dropped || echo warm)"
if want compare; then
    echo "mover vs rsync (daemon, loopback), $SCALE_TXT, median of $REPEAT, $CACHE_TXT"
else
    echo "mover cases:$CASES($SCALE_TXT, $CACHE_TXT, $(nproc) cores)"
fi
python3 "$HELPER" report "$WORK/runs.tsv" "$WORK/verify_failures.tsv" "$WORK/results.json" "$WORK/meta.json" \
    "$WORK/resume.jsonl" "$WORK/tls.tsv" "$WORK/tail.jsonl" | tee "$WORK/table.md"
echo
echo "results: $WORK/results.json   logs: $LOGS"
if [[ $FAILED != 0 ]]; then
    echo "************************************************************"
    echo "*  FAIL: some runs failed or a destination differs (above)  *"
    echo "************************************************************"
    exit 1
fi
echo "all runs completed and all destinations verified"
