#!/usr/bin/env bash
# tests/bench/block.sh — block sessions against rsync and dd, on loopback.
#
# A sparse 1 GiB disk image (24 random 16 MiB extents at seeded offsets,
# 64 MiB of written zeros, holes elsewhere) is copied into a missing
# destination, then re-synced after 256 seeded scattered 4 KiB writes, by:
#   mover  receive --insecure / send --block (wire: bytes_on_wire)
#   rsync  --inplace --no-whole-file --stats to an rsync daemon (sent + received)
#   dd     bs=1M through a pipe into dd conv=sparse,notrunc (wire: every byte)
# Each destination is compared with the source (cmp) and its allocated bytes
# reported. Run by hand or for a report, never by the test suite.
#
#   tests/bench/block.sh [--mover PATH] [--size-mib N] [--repeat N] [--keep]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
MOVER="" SIZE_MIB=1024 REPEAT=1 KEEP=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        --mover) MOVER=$2; shift 2 ;;
        --size-mib) SIZE_MIB=$2; shift 2 ;;
        --repeat) REPEAT=$2; shift 2 ;;
        --keep) KEEP=1; shift ;;
        *) echo "usage: $0 [--mover PATH] [--size-mib N] [--repeat N] [--keep]" >&2; exit 2 ;;
    esac
done
if [[ -z $MOVER ]]; then
    (cd "$ROOT" && cargo build --release -q -p mover)
    MOVER="$ROOT/target/release/mover"
fi
WORK=$(mktemp -d /tmp/volmig-bench-block.XXXXXX)
LOGS="$WORK/logs"
mkdir -p "$LOGS" "$WORK/dst"
cleanup() {
    [[ -n ${DAEMON_PID:-} ]] && kill "$DAEMON_PID" 2>/dev/null || true
    [[ $KEEP == 1 ]] || rm -rf "$WORK"
}
trap cleanup EXIT
log() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
DROP_OK=0
[[ -w /proc/sys/vm/drop_caches ]] && DROP_OK=1
drop() { [[ $DROP_OK == 1 ]] && { sync; echo 3 >/proc/sys/vm/drop_caches; } || true; }

SRC="$WORK/src.img"
python3 - "$SRC" "$SIZE_MIB" <<'EOF'
import os, random, sys
path, mib = sys.argv[1], int(sys.argv[2])
size = mib << 20
rng = random.Random(0xb10c)
with open(path, "wb") as f:
    f.truncate(size)
    ext = min(16 << 20, size // 64)
    for _ in range(24):
        at = rng.randrange(0, size - ext) // 4096 * 4096
        f.seek(at)
        f.write(os.urandom(ext))
    zeros = min(64 << 20, size // 16)
    f.seek(rng.randrange(0, size - zeros) // 4096 * 4096)
    f.write(bytes(zeros))
EOF
log "source: $SIZE_MIB MiB image, $(du -k "$SRC" | cut -f1) KiB allocated; page cache $([[ $DROP_OK == 1 ]] && echo dropped || echo warm)"

# The rsync daemon.
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir -p "$WORK/dst/rsync"
{
    echo "pid file = $WORK/rsyncd.pid"
    echo "use chroot = no"
    echo "[bench]"
    echo "    path = $WORK/dst/rsync"
    echo "    read only = no"
    if [[ $EUID == 0 ]]; then echo "    uid = root"; echo "    gid = root"; fi
} >"$WORK/rsyncd.conf"
setsid rsync --daemon --no-detach --config="$WORK/rsyncd.conf" --port="$PORT" --address=127.0.0.1 \
    >"$LOGS/rsyncd.out" 2>&1 &
DAEMON_PID=$!
for ((i = 0; i < 100; i++)); do
    rsync "rsync://127.0.0.1:$PORT/" >/dev/null 2>&1 && break
    sleep 0.1
done

now() { date +%s.%N; }
# Prints "seconds wire_bytes peak_rss_kib" for one run of each tool.
run_mover() {
    local dst=$1 out="$LOGS/mover.$2"
    rm -f "$WORK/addr"
    /usr/bin/time -f %M -o "$out.rtime" "$MOVER" receive --listen 127.0.0.1:0 --addr-file "$WORK/addr" \
        --root "$dst" --insecure -q >"$out.recv" 2>&1 &
    local rpid=$!
    while [[ ! -s $WORK/addr ]]; do sleep 0.01; done
    local t0; t0=$(now)
    /usr/bin/time -f %M -o "$out.stime" "$MOVER" send --to "$(cat "$WORK/addr")" --root "$SRC" \
        --block --insecure -q >"$out.send" 2>&1
    wait "$rpid"
    local t1; t1=$(now)
    local wire; wire=$(grep -o '"bytes_on_wire":[0-9]*' "$out.send" | tail -n1 | cut -d: -f2)
    local rss; rss=$(sort -n "$out.rtime" "$out.stime" | tail -n1)
    echo "$(echo "$t1 - $t0" | bc) $wire $rss"
}
run_rsync() {
    local out="$LOGS/rsync.$1"
    local t0; t0=$(now)
    rsync --inplace --no-whole-file --stats "$SRC" "rsync://127.0.0.1:$PORT/bench/rsync.img" >"$out" 2>&1
    local t1; t1=$(now)
    local sent recv
    sent=$(grep -E '^Total bytes sent' "$out" | tr -dc 0-9)
    recv=$(grep -E '^Total bytes received' "$out" | tr -dc 0-9)
    echo "$(echo "$t1 - $t0" | bc) $((sent + recv)) -"
}
run_dd() {
    local dst=$1
    local t0; t0=$(now)
    dd if="$SRC" bs=1M status=none | dd of="$dst" bs=1M conv=sparse,notrunc iflag=fullblock status=none
    local t1; t1=$(now)
    echo "$(echo "$t1 - $t0" | bc) $(stat -c %s "$SRC") -"
}

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
FAIL=0
declare -A RESULT
measure() {
    local pass=$1 tool=$2 dst=$3
    local times=() line
    for ((r = 1; r <= REPEAT; r++)); do
        if [[ $pass == initial ]]; then
            rm -f "$dst"
            [[ $tool == dd ]] && truncate -s 0 "$dst"
        else
            cp --sparse=always "$WORK/base.$tool" "$dst"
        fi
        drop
        case $tool in
            mover) line=$(run_mover "$dst" "$pass.$r") ;;
            rsync) line=$(run_rsync "$pass.$r") ;;
            dd) line=$(run_dd "$dst") ;;
        esac
        times+=("$line")
    done
    if ! cmp -s "$SRC" "$dst"; then
        log "FAIL: $tool $pass: the destination differs from the source"
        FAIL=1
    fi
    local t; t=$(printf '%s\n' "${times[@]}" | cut -d' ' -f1 | median)
    local last=${times[-1]}
    RESULT[$pass.$tool]="$t $(echo "$last" | cut -d' ' -f2,3) $(du -k "$dst" | cut -f1)"
}

DMOVER="$WORK/dst/mover.img" DRSYNC="$WORK/dst/rsync/rsync.img" DDD="$WORK/dst/dd.img"
log "pass 1: initial copy"
measure initial mover "$DMOVER"
measure initial rsync "$DRSYNC"
measure initial dd "$DDD"
for t in mover rsync dd; do
    case $t in mover) d=$DMOVER ;; rsync) d=$DRSYNC ;; dd) d=$DDD ;; esac
    cp --sparse=always "$d" "$WORK/base.$t"
done
log "pass 2: re-sync after 256 scattered 4 KiB writes"
python3 - "$SRC" <<'EOF'
import os, random, sys
rng = random.Random(256)
with open(sys.argv[1], "r+b") as f:
    size = os.fstat(f.fileno()).st_size
    for _ in range(256):
        f.seek(rng.randrange(0, size - 4096) // 4096 * 4096)
        f.write(os.urandom(4096))
EOF
measure resync mover "$DMOVER"
measure resync rsync "$DRSYNC"
measure resync dd "$DDD"

printf '\n%-8s %-7s %10s %14s %12s %14s\n' pass tool seconds wire_bytes peak_rss_KiB allocated_KiB
for pass in initial resync; do
    for tool in mover rsync dd; do
        read -r t wire rss alloc <<<"${RESULT[$pass.$tool]}"
        printf '%-8s %-7s %10.2f %14s %12s %14s\n' "$pass" "$tool" "$t" "$wire" "$rss" "$alloc"
    done
done
printf 'source allocated: %s KiB\n' "$(du -k "$SRC" | cut -f1)"
if [[ $FAIL == 1 ]]; then
    echo "FAIL: a destination differs from its source" >&2
    exit 1
fi
