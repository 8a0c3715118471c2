# tests/bench/ssh.sh — the `ssh` case, sourced by run.sh (uses its helpers and variables).
# shellcheck shell=bash

# ssh_start: a private sshd on 127.0.0.1 for rsync over ssh, with its own host key, client key,
# config and authorized_keys under $SSH_DIR; the system's ssh config and service are left alone.
# Sets SSH_CMD, SSH_LOGIN, SSH_VERSION and SSHD_PID. Installs openssh-server with apt-get when
# sshd is missing (Debian's policy-rc.d, where present, keeps the package's own service from
# starting).
ssh_start() {
    SSHD=$(command -v sshd || true)
    if [[ -z $SSHD && -x /usr/sbin/sshd ]]; then SSHD=/usr/sbin/sshd; fi
    if [[ -z $SSHD ]] || ! command -v ssh >/dev/null || ! command -v ssh-keygen >/dev/null; then
        log "ssh: installing openssh-server (apt-get)"
        apt-get install -y openssh-server openssh-client >"$LOGS/apt-openssh.log" 2>&1 ||
            die "ssh: sshd missing and apt-get install openssh-server failed (see $LOGS/apt-openssh.log)"
        SSHD=/usr/sbin/sshd
    fi
    [[ -x $SSHD ]] || die "ssh: no sshd after installing openssh-server"
    SSHD=$(realpath "$SSHD")   # sshd re-executes itself: it needs an absolute path
    mkdir -m 700 "$SSH_DIR"
    ssh-keygen -q -t ed25519 -N '' -C bench-host -f "$SSH_DIR/host_ed25519" ||
        die "ssh: ssh-keygen (host key) failed"
    ssh-keygen -q -t ed25519 -N '' -C bench-client -f "$SSH_DIR/client_ed25519" ||
        die "ssh: ssh-keygen (client key) failed"
    cp "$SSH_DIR/client_ed25519.pub" "$SSH_DIR/authorized_keys"
    # sshd's privilege separation directory (compiled in; the package's service would create it)
    if [[ $EUID == 0 && ! -d /run/sshd ]]; then mkdir -m 755 /run/sshd; fi
    SSH_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    printf '%s\n' "ListenAddress 127.0.0.1" "HostKey $SSH_DIR/host_ed25519" \
        "PidFile $SSH_DIR/sshd.pid" "AuthorizedKeysFile $SSH_DIR/authorized_keys" \
        "StrictModes no" "UsePAM no" "PermitRootLogin prohibit-password" \
        "PubkeyAuthentication yes" "PasswordAuthentication no" "KbdInteractiveAuthentication no" \
        "X11Forwarding no" "PrintMotd no" "UseDNS no" >"$SSH_DIR/sshd_config"
    "$SSHD" -t -f "$SSH_DIR/sshd_config" >"$LOGS/sshd.check" 2>&1 ||
        die "ssh: sshd -t rejected $SSH_DIR/sshd_config (see $LOGS/sshd.check)"
    setsid "$SSHD" -D -e -f "$SSH_DIR/sshd_config" -p "$SSH_PORT" >"$LOGS/sshd.log" 2>&1 &
    SSHD_PID=$!
    SSH_LOGIN="$(id -un)@127.0.0.1"
    SSH_CMD="ssh -p $SSH_PORT -i $SSH_DIR/client_ed25519 -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o LogLevel=ERROR"
    for ((i = 0; i < 100; i++)); do
        # shellcheck disable=SC2086 # SSH_CMD is a command line, as rsync -e takes it
        $SSH_CMD "$SSH_LOGIN" true >"$LOGS/ssh.probe" 2>&1 && break
        kill -0 "$SSHD_PID" 2>/dev/null || die "ssh: sshd died (see $LOGS/sshd.log)"
        sleep 0.1
    done
    # shellcheck disable=SC2086
    $SSH_CMD "$SSH_LOGIN" rsync --version >/dev/null 2>>"$LOGS/ssh.probe" ||
        die "ssh: cannot log in as $SSH_LOGIN with the bench key, or no rsync there (see $LOGS/ssh.probe, $LOGS/sshd.log)"
    SSH_VERSION=$(ssh -V 2>&1)
    log "sshd on 127.0.0.1:$SSH_PORT ($SSH_VERSION); rsync -e \"$SSH_CMD\""
}

# What people really run: mover over TLS (--tls-dir) against rsync over ssh, and from the same
# run mover --insecure against the rsync daemon. Four tools, each with its own destination:
#   rsync          daemon module, $DST/rsync/ssh/SET
#   mover          --insecure,    $DST/mover/ssh/SET
#   rsync-ssh      -e "$SSH_CMD", $DST/rsync-ssh/SET
#   mover-tls      --tls-dir,     $DST/mover-tls/SET
SSH_TOOLS=(rsync mover rsync-ssh mover-tls)
ssh_dest() {   # ssh_dest TOOL SET: the destination directory of TOOL's copy of SET
    case $1 in
        rsync) echo "$DST/rsync/ssh/$2" ;;
        mover) echo "$DST/mover/ssh/$2" ;;
        *) echo "$DST/$1/$2" ;;
    esac
}
# ssh_runs SCENARIO REP SET "RSYNC ARGS" "MOVER ARGS": one run of each of the four tools.
ssh_runs() {
    local sc=$1 rep=$2 set=$3 rargs=$4 margs=$5
    # shellcheck disable=SC2086 # argument strings are intentionally word-split
    {
        RSYNC_TOOL=rsync; run_rsync "$sc" "$rep" "$SRC/$set" "ssh/$set" $rargs
        MOVER_TOOL=mover CONN=(--insecure)
        run_mover "$sc" "$rep" "$SRC/$set" "$(ssh_dest mover "$set")" $margs
        RSYNC_TOOL=rsync-ssh; run_rsync "$sc" "$rep" "$SRC/$set" "$set" $rargs
        MOVER_TOOL=mover-tls CONN=(--tls-dir "$SSH_TLS_DIR")
        run_mover "$sc" "$rep" "$SRC/$set" "$(ssh_dest mover-tls "$set")" $margs
    }
    # shellcheck disable=SC2034 # run.sh's run_rsync and run_mover read them
    RSYNC_TOOL=rsync MOVER_TOOL=mover CONN=(--insecure)
}
ssh_rm() { local t; for t in "${SSH_TOOLS[@]}"; do discard "$(ssh_dest "$t" "$1")"; done; }
ssh_verify() {   # ssh_verify SCENARIO SET: every tool's destination against the source
    local t d
    for t in "${SSH_TOOLS[@]}"; do
        d=$(ssh_dest "$t" "$2")
        verify "$1" "$t" "$SRC/$2" "$d"
        if [[ -e $d/.volmig ]]; then
            fail "$1: $d/.volmig left after a clean run"
            printf '%s\t%s\n' "$1" "$t" >>"$WORK/verify_failures.tsv"
        fi
    done
}
# ssh_scenario SCENARIO SET "RSYNC ARGS" "MOVER ARGS" [fresh]: REPEAT rounds of the four tools;
# "fresh": every round starts from empty destinations. Then every destination is verified.
ssh_scenario() {
    local sc=$1 set=$2 rargs=$3 margs=$4 fresh=${5:-} r
    for ((r = 1; r <= REPEAT; r++)); do
        [[ $fresh != fresh ]] || ssh_rm "$set"
        ssh_runs "$sc" "$r" "$set" "$rargs" "$margs"
    done
    ssh_verify "$sc" "$set"
}

# ssh_case: the four compare scenarios, each by the four tools.
ssh_case() {
    mkdir -p "$DST/rsync/ssh" "$DST/mover/ssh" "$DST/rsync-ssh" "$DST/mover-tls"
    SSH_OP=bench-ssh
    if keygen ssh "$SSH_TLS_DIR" "$SSH_OP"; then
        log "ssh 1: initial copy of large random files (rsync daemon, mover --insecure, rsync over ssh, mover --tls-dir)"
        ssh_scenario ssh_initial_large large "" "" fresh

        log "ssh 2: delta re-sync of large after $EDITS scattered 4 KiB edits per file"
        if [[ $REPEAT -gt 1 ]]; then rm -rf "$SNAP"; cp -a "$SRC/large" "$SNAP"; fi
        python3 "$HELPER" edit "$SRC/large" "$EDITS" 5
        for ((r = 1; r <= REPEAT; r++)); do
            if [[ $r -gt 1 ]]; then
                for t in "${SSH_TOOLS[@]}"; do
                    rm -rf "$(ssh_dest "$t" large)"
                    cp -a "$SNAP" "$(ssh_dest "$t" large)"
                done
            fi
            ssh_runs ssh_delta_large "$r" large --no-whole-file --no-whole-file
        done
        ssh_verify ssh_delta_large large
        rm -rf "$SNAP"; ssh_rm large

        log "ssh 3: $SMALL_FILES small files, initial copy then no-op re-sync"
        ssh_scenario ssh_initial_small small "" "" fresh
        ssh_scenario ssh_noop_small small "" ""
        ssh_rm small

        log "ssh 4: compressed initial copy of log text"
        ssh_scenario ssh_compressed_logs logs "--compress --compress-choice=zstd" --compress fresh
        ssh_rm logs
    fi
}
