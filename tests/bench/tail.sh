# tests/bench/tail.sh — the `resume-tail` case, sourced by run.sh (uses its helpers and variables).
# shellcheck shell=bash
#
# One file ($SRC/one/big.bin, 1 GiB random; 128 MiB with --quick). For each page-cache state
# (dropped, then warm), attempt 1 is paced like the resume case and the receiver SIGKILLed at the
# first progress event past RESUME_FRACTION; then:
#   * attempt 2 (timed like run_pair: from the start of `send` until both sides exited);
#   * a fresh copy of the rest — the source's bytes from the checkpoint's verified length on, as a
#     file of their own, into an empty destination, without --operation-id — timed the same way.
# Each state gets a kill of its own: the partial file the killed receiver left must be the one
# attempt 2 finds (a copy of it, rebuilt or restored, is a file changed since the checkpoint
# recorded it, which attempt 2 rightly reads in full). Warm: the source and the partial file are
# read once into the page cache after the kill.

# tail_run REP
tail_run() {
    local rep=$1 cache
    for cache in cold warm; do
        tail_state "$rep" "$cache"
    done
}

# tail_state REP CACHE
tail_state() {
    local rep=$1 cache=$2 dst=$DST/tail/resume fresh=$DST/tail/fresh rest=$WORK/rest
    local out=$LOGS/tail.$1.$2
    local -a args=(--operation-id bench-tail --progress json)
    local st=ok temp vlen tlen same=0 a2 a2_rc vst line
    rm -rf "$dst" "$fresh" "$rest"
    drop_caches
    if ! start_receiver "$out.a1.recv" "$dst" "${args[@]}" --attempt 1; then
        fail "resume-tail: receiver did not write its address (see $out.a1.recv.err)"
        return 0
    fi
    setsid "$MOVER" send --to "$(cat "$WORK/mover.addr")" --root "$SRC/one" "${CONN[@]}" "${args[@]}" \
        --attempt 1 --bwlimit "$TAIL_BWLIMIT" >"$out.a1.send.out" 2>"$out.a1.send.err" &
    SEND_PID=$!
    disown "$RECV_PID"
    python3 "$HELPER" watch-kill "$out.a1.recv.out" "$RECV_PID" "$RESUME_FRACTION" \
        $((RESUME_SECS * 6 + 60)) "$out.kill.json" || st=kill-missed
    reap "$SEND_PID" 120; SEND_PID=""
    reap "$RECV_PID" 120; RECV_PID=""
    [[ $st == ok ]] || fail "resume-tail #$rep $cache: no kill (see $out.kill.json)"
    "$MOVER" inspect --root "$dst" >"$out.inspect.json" 2>"$out.inspect.err" ||
        fail "resume-tail #$rep $cache: mover inspect exited $? (see $out.inspect.err)"
    read -r temp vlen < <(python3 "$HELPER" tail-state "$out.inspect.json")
    if [[ $vlen -lt 0 || ! -f $dst/$temp ]]; then
        fail "resume-tail #$rep $cache: the checkpoint does not name one partial file (see $out.inspect.json)"
        rm -rf "$dst"
        return 0
    fi
    tlen=$(stat -c %s "$dst/$temp")
    cmp -s -n "$tlen" "$dst/$temp" "$SRC/one/big.bin" && same=1
    cp "$dst/.volmig/checkpoint" "$out.checkpoint"
    mkdir -p "$rest"
    tail -c +$((vlen + 1)) "$SRC/one/big.bin" >"$rest/big.bin"
    log "  resume-tail #$rep $cache: attempt 1 killed: checkpoint at $vlen, partial file $tlen bytes (the source's prefix: $same)"
    if [[ $cache == warm ]]; then
        WARM=1
        sync
        cat "$SRC/one/big.bin" "$dst/$temp" >/dev/null
    fi
    run_pair "$out.a2" "$SRC/one" "$dst" "${args[*]} --attempt 2" "${args[*]} --attempt 2"
    a2=$PAIR_SECS a2_rc=$PAIR_SEND_RC/$PAIR_RECV_RC
    [[ $a2_rc == 0/0 ]] || { st="attempt2-exit-$a2_rc"; fail "resume-tail #$rep $cache: attempt 2 exited $a2_rc (see $out.a2.*.err)"; }
    vst=$(verified "tail_resume_$cache" mover "$SRC/one" "$dst")
    [[ -z $(ls -A "$dst/.volmig" 2>/dev/null) ]] || fail "resume-tail #$rep $cache: .volmig left"
    rm -rf "$fresh"
    [[ $cache == warm ]] && cat "$rest/big.bin" >/dev/null
    run_pair "$out.rest" "$rest" "$fresh" "" ""
    [[ $PAIR_SEND_RC/$PAIR_RECV_RC == 0/0 ]] || fail "resume-tail #$rep $cache: fresh copy exited $PAIR_SEND_RC/$PAIR_RECV_RC"
    [[ $(verified "tail_fresh_$cache" mover "$rest" "$fresh") == ok ]] || vst=failed
    [[ $vst == ok || $st != ok ]] || st=verify-failed
    line=$(python3 "$HELPER" tail-record "$WORK/tail.jsonl" rep="$rep" cache="$cache" \
        status="$st" tree_bytes="$ONE_BYTES" temp_len="$tlen" temp_is_prefix="$same" \
        rest_bytes="$(stat -c %s "$rest/big.bin")" a2_secs="$a2" a2_rc="$a2_rc" \
        rest_secs="$PAIR_SECS" rest_rc="$PAIR_SEND_RC/$PAIR_RECV_RC" verify="$vst" \
        kill="$out.kill.json" inspect="$out.inspect.json" a2_send="$out.a2.send.out" \
        a2_recv="$out.a2.recv.out" rest_send="$out.rest.send.out")
    log "  resume-tail #$rep $line $st"
    # shellcheck disable=SC2034 # run.sh's drop_caches reads it
    WARM=0
    rm -rf "$dst" "$fresh" "$rest"
}

if want resume-tail; then
    read -r _ ONE_BYTES < <(python3 "$HELPER" tree-bytes "$SRC/one")
    TAIL_BWLIMIT=$((ONE_BYTES / 1024 / RESUME_SECS))   # KiB/s
    log "resume-tail: one file of $ONE_BYTES bytes; attempt 1 paced at ${TAIL_BWLIMIT} KiB/s, receiver SIGKILLed at >= ${RESUME_FRACTION} of it"
    for ((r = 1; r <= REPEAT; r++)); do
        tail_run "$r"
    done
fi
