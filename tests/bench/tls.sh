# tests/bench/tls.sh — the `tls` case, sourced by run.sh (uses its helpers and variables).
# shellcheck shell=bash

# tls_run CASE MODE REP DEST [extra send args...]: run_mover with MODE's connection
# (insecure: --insecure; insecure-op: --insecure plus send --operation-id $TLS_OP, the checkpoint
# a --tls-dir run keeps, without the encryption; tls: --tls-dir $TLS_DIR on both sides, whose
# material implies --operation-id $TLS_OP), then one line in tls.tsv with both sides' CPU time.
tls_run() {
    local case=$1 mode=$2 rep=$3 dst=$4 us ss ur sr
    shift 4
    local -a extra=()
    case $mode in
        insecure) CONN=(--insecure) ;;
        insecure-op) CONN=(--insecure) extra=(--operation-id "$TLS_OP") ;;
        tls) CONN=(--tls-dir "$TLS_DIR") ;;
    esac
    run_mover "tls_${case}_$mode" "$rep" "$SRC/large" "$dst" "${extra[@]}" "$@"
    # shellcheck disable=SC2034 # run.sh's run_mover reads it
    CONN=(--insecure)
    read -r us ss < <(cpu_of "$LAST_OUT.send.rss")
    read -r ur sr < <(cpu_of "$LAST_OUT.recv.rss")
    # tls.tsv: case mode rep secs wire rss_send_kb rss_recv_kb user_send sys_send user_recv
    # sys_recv status log
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$case" "$mode" "$rep" \
        "$LAST_SECS" "$LAST_WIRE" "$(rss_of "$LAST_OUT.send.rss")" "$(rss_of "$LAST_OUT.recv.rss")" \
        "$us" "$ss" "$ur" "$sr" "$LAST_STATUS" "$LAST_OUT.send.out" >>"$WORK/tls.tsv"
    log "    $mode cpu: send ${us}u+${ss}s, receive ${ur}u+${sr}s"
}

# tls_case: each mode's initial copy, no-op and delta re-sync of the large set, TLS_REPEAT times.
tls_case() {
    TLS_REPEAT=$REPEAT; [[ $REPEAT_SET == 1 ]] || TLS_REPEAT=3
    TLS_OP=bench-tls TLS_MODES=(insecure insecure-op tls)
    # One set of key material per bench run (keygen never overwrites: the dir is fresh).
    if keygen tls "$TLS_DIR" "$TLS_OP"; then
        read -r TLS_FILES TLS_BYTES < <(python3 "$HELPER" tree-bytes "$SRC/large")
        log "tls: $TLS_FILES files, $TLS_BYTES bytes; modes ${TLS_MODES[*]}; $TLS_REPEAT runs each; key material in $TLS_DIR"
        for ((r = 1; r <= TLS_REPEAT; r++)); do
            # alternate the order (ABC, CBA, ...) so a drifting machine does not favour one mode
            if ((r % 2)); then order=("${TLS_MODES[@]}")
            else order=(); for ((i = ${#TLS_MODES[@]} - 1; i >= 0; i--)); do order+=("${TLS_MODES[i]}"); done; fi
            # whole-file initial copy into a fresh, empty destination
            for mode in "${order[@]}"; do
                rm -rf "$DST/tls/$mode"
                tls_run initial "$mode" "$r" "$DST/tls/$mode" --whole-file
            done
            if ((r == TLS_REPEAT)); then
                for mode in "${TLS_MODES[@]}"; do verify "tls_initial_$mode" mover "$SRC/large" "$DST/tls/$mode"; done
            fi
            # no-op re-sync: nothing changed, the quick check skips every file (the time is
            # connection set-up, handshake and file list)
            for mode in "${order[@]}"; do
                tls_run noop "$mode" "$r" "$DST/tls/$mode" --no-whole-file
            done
            # delta re-sync of unchanged contents: new mtimes on the source make every file go
            # through the delta algorithm (signatures, rolling match, rebuild from the basis)
            touch -d "@$(( $(date +%s) - 86400 + r ))" "$SRC/large"/*
            for mode in "${order[@]}"; do
                tls_run resync "$mode" "$r" "$DST/tls/$mode" --no-whole-file
            done
        done
        for mode in "${TLS_MODES[@]}"; do
            verify "tls_resync_$mode" mover "$SRC/large" "$DST/tls/$mode"
            [[ ! -e $DST/tls/$mode/.volmig ]] || fail "tls: $DST/tls/$mode/.volmig left after a clean run"
        done
        rm -rf "$DST/tls"
    fi
}
