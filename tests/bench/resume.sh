# tests/bench/resume.sh — the `resume` case, sourced by run.sh (uses its helpers and variables).
# shellcheck shell=bash

# resume_run VARIANT REP BASE_OUT BASE_SECS BASE_RC: VARIANT kill-receiver | kill-sender |
# kill-receiver-delete. Attempt 1 (paced) is SIGKILLed on the side VARIANT names once the
# receiver's progress shows bytes_done >= RESUME_FRACTION * bytes_total; attempt 2 (unpaced,
# timed) completes it. Both attempts send with --delete only in the *-delete variant.
resume_run() {
    local variant=$1 rep=$2 base_out=$3 base_secs=$4 base_rc=$5
    local out=$LOGS/resume.$variant.$rep dst=$DST/resume/$variant victim survivor
    local a1_send_rc a1_recv_rc vrc k1 s1 st=ok vst=failed line
    local -a args=(--operation-id "$RESUME_OP" --progress json) sargs
    sargs=("${args[@]}")
    [[ $variant == *-delete ]] && sargs+=(--delete)
    rm -rf "$dst"
    drop_caches
    if ! start_receiver "$out.a1.recv" "$dst" "${args[@]}" --attempt 1; then
        fail "resume $variant: receiver did not write its address (see $out.a1.recv.err)"
        return 0
    fi
    setsid "$MOVER" send --to "$(cat "$WORK/mover.addr")" --root "$SRC/large" "${CONN[@]}" \
        "${sargs[@]}" --attempt 1 --bwlimit "$RESUME_BWLIMIT" >"$out.a1.send.out" 2>"$out.a1.send.err" &
    SEND_PID=$!
    if [[ $variant == kill-receiver* ]]; then victim=$RECV_PID survivor=a1_send
    else victim=$SEND_PID survivor=a1_recv; fi
    # Not a job any more: bash would report "Killed" for it. `reap` still sees it exit (kill -0),
    # its status is the SIGKILL (or, if the kill missed, its summary line's exit_code).
    disown "$victim"
    python3 "$HELPER" watch-kill "$out.a1.recv.out" "$victim" "$RESUME_FRACTION" \
        $((RESUME_SECS * 6 + 60)) "$out.kill.json" || st=kill-missed
    reap "$SEND_PID" 120; a1_send_rc=$REAP_RC SEND_PID=""
    reap "$RECV_PID" 120; a1_recv_rc=$REAP_RC RECV_PID=""
    if [[ $st == ok ]]; then vrc=SIGKILL; else vrc="exited-before-kill"; fi
    if [[ $variant == kill-receiver* ]]; then a1_recv_rc=$vrc; else a1_send_rc=$vrc; fi
    [[ $st == ok ]] || fail "resume $variant #$rep: no kill ($(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("reason"))' "$out.kill.json"))"
    "$MOVER" inspect --root "$dst" >"$out.inspect.json" 2>"$out.inspect.err" ||
        fail "resume $variant #$rep: mover inspect exited $? (see $out.inspect.err)"
    python3 "$HELPER" disk-usage "$dst" "$out.disk.json"
    log "  resume $variant #$rep attempt 1: send exit $a1_send_rc, receive exit $a1_recv_rc; inspect: $(head -c 600 "$out.inspect.json")"

    run_pair "$out.a2" "$SRC/large" "$dst" "${args[*]} --attempt 2" "${sargs[*]} --attempt 2"
    if [[ $PAIR_SEND_RC != 0 || $PAIR_RECV_RC != 0 ]]; then
        [[ $st == ok ]] && st="attempt2-exit-$PAIR_SEND_RC/$PAIR_RECV_RC"
        fail "resume $variant #$rep: attempt 2 exited send=$PAIR_SEND_RC receive=$PAIR_RECV_RC (see $out.a2.*.err)"
    fi
    vst=$(verified "resume_$variant" mover "$SRC/large" "$dst")
    [[ $vst == ok || $st != ok ]] || st=verify-failed
    if [[ $variant == kill-receiver* ]]; then k1=$a1_recv_rc s1=$a1_send_rc
    else k1=$a1_send_rc s1=$a1_recv_rc; fi
    line=$(python3 "$HELPER" resume-record "$WORK/resume.jsonl" variant="$variant" rep="$rep" \
        status="$st" verify="$vst" tree_files="$TREE_FILES" tree_bytes="$TREE_BYTES" \
        bwlimit="${RESUME_BWLIMIT}K" kill="$out.kill.json" inspect="$out.inspect.json" \
        disk="$out.disk.json" a1_send="$out.a1.send.out" a1_recv="$out.a1.recv.out" \
        survivor="$survivor" a1_killed_rc="$k1" a1_survivor_rc="$s1" \
        a2_send="$out.a2.send.out" a2_recv="$out.a2.recv.out" a2_secs="$PAIR_SECS" \
        a2_send_rc="$PAIR_SEND_RC" a2_recv_rc="$PAIR_RECV_RC" \
        base_send="$base_out.send.out" base_secs="$base_secs" base_rc="$base_rc")
    log "  resume $variant #$rep: $line $st"
    rm -rf "$dst"
}

# resume_case: per repetition a restart from zero, then each kill variant resumed.
resume_case() {
    log "resume: $TREE_FILES files, $TREE_BYTES bytes; attempt 1 paced at ${RESUME_BWLIMIT} KiB/s, SIGKILL at >= ${RESUME_FRACTION} of bytes_total"
    for ((r = 1; r <= REPEAT; r++)); do
        # Restart from zero (what a tool without checkpoints does after a failure): a fresh,
        # empty destination and a full copy, without --operation-id.
        base=$LOGS/resume.restart.$r
        rm -rf "$DST/resume/restart"
        run_pair "$base" "$SRC/large" "$DST/resume/restart" "" "--delete"
        base_secs=$PAIR_SECS base_rc=$PAIR_SEND_RC/$PAIR_RECV_RC
        [[ $base_rc == 0/0 ]] || fail "resume: restart-from-zero copy exited $base_rc (see $base.*.err)"
        [[ $(verified resume_restart mover "$SRC/large" "$DST/resume/restart") == ok ]] ||
            base_rc="verify-failed"
        log "  restart from zero #$r: ${base_secs}s exit $base_rc wire=$(python3 "$HELPER" mover-wire "$base.send.out")"
        rm -rf "$DST/resume/restart"
        for variant in kill-receiver kill-sender kill-receiver-delete; do
            resume_run "$variant" "$r" "$base" "$base_secs" "$base_rc"
        done
    done
}
