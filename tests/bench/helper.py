#!/usr/bin/env python3
"""Helpers for tests/bench/run.sh: data generation, edits, output parsing; the report is
report.py's.

Subcommands:
  small DIR NFILES NDIRS SEED        NFILES random files of 1-8 KiB spread over NDIRS dirs
  logs DIR TOTAL_BYTES NFILES SEED   log-like text (compresses ~5-10x with zstd)
  many DIR NFILES NDIRS SEED         NFILES random files of 100-2000 bytes in NDIRS leaf dirs
                                     under 64 top dirs (one writer process per core)
  edit DIR EDITS_PER_FILE SEED       overwrite EDITS_PER_FILE random 4 KiB ranges in each file
  rsync-wire FILE                    sent+received bytes from `rsync --stats` output
  mover-wire FILE                    bytes_on_wire of the last {"event":"summary"} line
  watch-kill PROGRESS PID FRACTION TIMEOUT OUT_JSON
                                     follow a `--progress json` stdout file; SIGKILL PID at the
                                     first event with bytes_done >= FRACTION * bytes_total
  disk-usage DIR OUT_JSON            regular files under DIR (not DIR/.volmig): count, bytes,
                                     and how many of them are mover temp files (.volmig-*.tmp)
  tree-bytes DIR                     "FILES BYTES" of the regular files under DIR
  resume-record OUT_JSONL KEY=VALUE...  one resume run as a JSON line (see resume_record)
  report TSV VFAIL_TSV JSON META_JSON [RESUME_JSONL [TLS_TSV [TAIL_JSONL]]]
                                     median/ratio tables on stdout, results to JSON
  tail-state, tail-record            the resume-tail case (see tail.py)
"""
import json
import os
import random
import re
import signal
import sys
import time

import report
import tail

KIB = 1024


def gen_small(root, nfiles, ndirs, seed):
    rng = random.Random(seed)
    dirs = []
    for i in range(ndirs):
        # two levels: top/NN/dNNN so the tree is not completely flat
        d = os.path.join(root, "top%02d" % (i % 16), "d%04d" % i)
        os.makedirs(d, exist_ok=True)
        dirs.append(d)
    sizes = [rng.randint(1 * KIB, 8 * KIB) for _ in range(nfiles)]
    pool = os.urandom(sum(sizes))  # one syscall-ish blob, sliced per file
    off = 0
    for i, size in enumerate(sizes):
        path = os.path.join(dirs[i % ndirs], "f%05d.bin" % i)
        with open(path, "wb") as f:
            f.write(pool[off:off + size])
        off += size


MANY_TOP = 64   # `many`: leaf directories spread over this many top-level ones


def gen_many(root, nfiles, ndirs, seed):
    """The `many` set: NFILES files of 100-2000 random bytes (sizes uniform, seeded), file i in
    leaf dir i % NDIRS, leaf j under top dir j % 64 (two levels). Written with os.open/os.write,
    no fsync, by one process per core, each taking every k-th leaf dir: 1M files take ~1 min on
    2 cores (most of it the kernel creating inodes and directory entries)."""
    import multiprocessing
    leaves = [os.path.join(root, "t%02d" % (j % MANY_TOP), "d%04d" % j) for j in range(ndirs)]
    for d in leaves:
        os.makedirs(d, exist_ok=True)
    procs = max(1, min(os.cpu_count() or 1, ndirs))
    with multiprocessing.Pool(procs) as pool:
        pool.starmap(_gen_many_part, [(leaves, nfiles, k, procs, seed) for k in range(procs)])


def _gen_many_part(leaves, nfiles, part, parts, seed):
    ndirs = len(leaves)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
    for j in range(part, ndirs, parts):
        rng = random.Random(seed * 1_000_003 + j)   # per leaf: the same tree whatever the split
        d = leaves[j]
        for i in range(j, nfiles, ndirs):
            fd = os.open(os.path.join(d, "f%07d" % i), flags, 0o644)
            try:
                os.write(fd, os.urandom(rng.randint(100, 2000)))
            finally:
                os.close(fd)


LEVELS = ["INFO"] * 70 + ["DEBUG"] * 18 + ["WARN"] * 8 + ["ERROR"] * 4
SERVICES = ["api-gateway", "auth", "billing", "catalog", "checkout", "inventory",
            "notifier", "search", "session", "shipping", "storage", "user-profile"]
PATHS = ["/v1/orders", "/v1/orders/{id}", "/v1/users/{id}", "/v1/cart", "/v1/search",
         "/v2/items/{id}", "/healthz", "/v1/login", "/v1/payments", "/metrics"]
METHODS = ["GET"] * 6 + ["POST"] * 3 + ["PUT", "DELETE"]
MESSAGES = [
    'request completed method={m} path={p} status={s} duration_ms={d} bytes={b}',
    'request completed method={m} path={p} status={s} duration_ms={d} bytes={b}',
    'request completed method={m} path={p} status={s} duration_ms={d} bytes={b}',
    'cache miss key=item:{n} ttl=300 backend=redis-{r}',
    'db query table=orders rows={r} elapsed_ms={d} conn_pool_in_use={c}/64',
    'retrying upstream call attempt={a} backoff_ms={d} upstream=10.0.{r}.{c}:8080',
    'user session refreshed user_id={n} expires_in=3600',
    'queue depth topic=events.{svc} partition={r} lag={b}',
    'slow request threshold_ms=500 method={m} path={p} duration_ms={d}',
    'gc pause heap_mb={b} pause_us={d}',
]
STATUSES = [200] * 20 + [201, 204, 301, 304, 400, 401, 403, 404, 429, 500, 502, 503]


def gen_logs(root, total, nfiles, seed):
    """Writes NFILES log files in parallel (one process per core)."""
    import multiprocessing
    os.makedirs(root, exist_ok=True)
    jobs = [(root, total // nfiles, fi, seed) for fi in range(nfiles)]
    with multiprocessing.Pool(min(nfiles, os.cpu_count() or 1)) as pool:
        pool.starmap(_gen_log_file, jobs)


def _gen_log_file(root, size, fi, seed):
    """Realistic-looking log lines: increasing millisecond timestamps, weighted
    levels, random request/trace ids (the main source of entropy) and message
    bodies drawn from a large pool of randomly filled templates."""
    rng = random.Random(seed * 1000 + fi)

    def body():
        r = rng.randint(0, 255)
        return rng.choice(MESSAGES).format(
            m=rng.choice(METHODS),
            p=rng.choice(PATHS).replace("{id}", str(rng.randint(1, 99999))),
            s=rng.choice(STATUSES), d=rng.randint(1, 900), b=rng.randint(100, 65536),
            n=rng.randint(1, 10**6), r=r, c=rng.randint(1, 64), a=rng.randint(1, 5),
            svc=SERVICES[r % len(SERVICES)])

    bodies = [body() for _ in range(100_000)]
    t_ms = 1_700_000_000_000 + fi * 3_600_000
    batch = 8192
    svc = SERVICES[fi % len(SERVICES)]
    prefix = " [%s] pid=%d req=" % (svc, 1000 + fi)
    written = 0
    with open(os.path.join(root, "%s-%02d.log" % (svc, fi)), "w", buffering=1 << 20) as f:
        while written < size:
            ids = os.urandom(8 * batch).hex()
            steps = rng.choices(range(8), k=batch)
            levels = rng.choices(LEVELS, k=batch)
            msgs = rng.choices(bodies, k=batch)
            lines = []
            for j in range(batch):
                t_ms += steps[j]
                secs, ms = divmod(t_ms, 1000)
                k = j * 16
                lines.append("%s.%03dZ %-5s%s%s trace=%s %s\n" % (
                    _ts(secs), ms, levels[j], prefix, ids[k:k + 8], ids[k + 8:k + 16],
                    msgs[j]))
            chunk = "".join(lines)
            f.write(chunk)
            written += len(chunk)


_ts_cache = {}


def _ts(secs):
    s = _ts_cache.get(secs)
    if s is None:
        import time
        s = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs))
        if len(_ts_cache) > 100000:
            _ts_cache.clear()
        _ts_cache[secs] = s
    return s


def edit(root, per_file, seed):
    rng = random.Random(seed)
    for dirpath, _, names in sorted(os.walk(root)):
        for name in sorted(names):
            path = os.path.join(dirpath, name)
            size = os.path.getsize(path)
            if size < 4 * KIB:
                continue
            with open(path, "r+b") as f:
                for _ in range(per_file):
                    f.seek(rng.randrange(0, size - 4 * KIB + 1))
                    f.write(os.urandom(4 * KIB))


def rsync_wire(path):
    text = open(path, errors="replace").read()
    m1 = re.search(r"Total bytes sent:\s*([\d,]+)", text)
    m2 = re.search(r"Total bytes received:\s*([\d,]+)", text)
    if not (m1 and m2):
        m = re.search(r"sent ([\d,]+) bytes\s+received ([\d,]+) bytes", text)
        if not m:
            return -1
        m1, m2 = m, m
        return int(m.group(1).replace(",", "")) + int(m.group(2).replace(",", ""))
    return int(m1.group(1).replace(",", "")) + int(m2.group(1).replace(",", ""))


# One reader of a mover's summary line for every case.
mover_summary = tail.summary


def mover_wire(path):
    s = mover_summary(path)
    if s is None or not isinstance(s.get("bytes_on_wire"), int):
        return -1
    return s["bytes_on_wire"]


def mover_events(path, kind):
    """Every {"event": KIND, ...} line of a mover stdout file, in order."""
    out = []
    try:
        with open(path, errors="replace") as f:
            for line in f:
                try:
                    obj = json.loads(line)
                except ValueError:
                    continue
                if isinstance(obj, dict) and obj.get("event") == kind:
                    out.append(obj)
    except OSError:
        pass
    return out


def _alive(pid):
    """False once PID has exited (gone, or a zombie its parent has not reaped yet)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:][:1] not in ("Z", "X")


def watch_kill(progress_path, pid, fraction, timeout, out_json):
    """Follows PROGRESS_PATH (a `--progress json` stdout file, being written) and sends
    SIGKILL to PID at the first progress event with bytes_done >= FRACTION * bytes_total.
    Writes what happened to OUT_JSON; exit status 0 when it killed, 1 otherwise."""
    t0 = time.monotonic()
    pos, buf, last, events = 0, "", None, 0
    res = {"killed": False, "fraction": fraction, "pid": pid}

    def finish(**kw):
        res.update(kw)
        res["events_seen"] = events
        res["watch_secs"] = round(time.monotonic() - t0, 3)
        with open(out_json, "w") as f:
            json.dump(res, f, indent=2)
            f.write("\n")
        return 0 if res["killed"] else 1

    while True:
        try:
            with open(progress_path, "rb") as f:
                f.seek(pos)
                chunk = f.read()
        except OSError:
            chunk = b""
        if chunk:
            pos += len(chunk)
            buf += chunk.decode("utf-8", "replace")
            *lines, buf = buf.split("\n")
            for line in lines:
                try:
                    obj = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(obj, dict):
                    continue
                if obj.get("event") == "summary":
                    return finish(reason="the run finished before the threshold", summary=obj,
                                  last_event=last)
                if obj.get("event") != "progress":
                    continue
                events += 1
                done, total = obj.get("bytes_done"), obj.get("bytes_total")
                if isinstance(done, int) and isinstance(total, int) and total > 0 \
                        and done >= fraction * total:
                    t_seen = time.monotonic()
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        return finish(reason="process gone at the threshold", event=obj,
                                      previous_event=last)
                    return finish(killed=True, reason="threshold reached", event=obj,
                                  previous_event=last,
                                  kill_latency_ms=round((time.monotonic() - t_seen) * 1000, 3))
                last = obj
        if not _alive(pid):
            return finish(reason="process exited before the threshold", last_event=last)
        if time.monotonic() - t0 > timeout:
            return finish(reason="timeout after %ss" % timeout, last_event=last)
        time.sleep(0.005)


def disk_usage(root, out_json=None):
    """Regular files under ROOT (skipping ROOT/.volmig): apparent bytes, allocated bytes,
    and the share held by mover temp files (.volmig-NAME.TOKEN-SEQ.tmp)."""
    res = {"files": 0, "bytes": 0, "alloc_bytes": 0, "temp_files": 0, "temp_bytes": 0, "temps": []}
    for dirpath, dirnames, names in os.walk(root):
        if dirpath == root and ".volmig" in dirnames:
            dirnames.remove(".volmig")
        for name in names:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            if not os.path.isfile(path) or os.path.islink(path):
                continue
            res["files"] += 1
            res["bytes"] += st.st_size
            res["alloc_bytes"] += st.st_blocks * 512
            if name.startswith(".volmig-") and name.endswith(".tmp"):
                res["temp_files"] += 1
                res["temp_bytes"] += st.st_size
                res["temps"].append({"path": os.path.relpath(path, root), "size": st.st_size})
    if out_json:
        with open(out_json, "w") as f:
            json.dump(res, f, indent=2)
            f.write("\n")
    return res


def resume_record(out_jsonl, kv):
    """Collects one resume run into a JSON line. KEY=VALUE arguments: plain values
    (variant, rep, status, secs, exit codes, tree sizes) and files:
      kill=  watch-kill output            inspect= `mover inspect` stdout after attempt 1
      disk=  disk-usage after attempt 1   a1_send= a1_recv= attempt 1 stdout of each side
      a2_send= a2_recv= attempt 2 stdout  base_send= the restart-from-zero sender's stdout
    """
    a, num = tail.fields(kv)
    kill = tail.load(a.get("kill", "")) or {}
    insp = tail.load(a.get("inspect", "")) or {}
    disk = tail.load(a.get("disk", "")) or {}
    cp = insp.get("checkpoint") if isinstance(insp, dict) else None
    a2s, a2r = mover_summary(a.get("a2_send", "")), mover_summary(a.get("a2_recv", ""))
    a2_prog = mover_events(a.get("a2_recv", ""), "progress")
    base = mover_summary(a.get("base_send", ""))
    tree = num("tree_bytes", int)
    ev = kill.get("event") or {}
    at_kill = ev.get("bytes_done")
    on_disk = disk.get("bytes")
    lit2 = (a2s or {}).get("bytes_literal")
    base_lit = (base or {}).get("bytes_literal")
    rec = {
        "variant": a.get("variant"), "rep": num("rep", int), "status": a.get("status"),
        "tree_files": num("tree_files", int), "tree_bytes": tree,
        "attempt1": {
            "bwlimit": a.get("bwlimit"),
            "killed": kill.get("killed"), "kill_reason": kill.get("reason"),
            "bytes_done_at_kill": at_kill, "files_done_at_kill": ev.get("files_done"),
            "kill_event": ev or None, "previous_event": kill.get("previous_event"),
            "progress_events_seen": kill.get("events_seen"),
            "killed_exit": a.get("a1_killed_rc"), "survivor_exit": num("a1_survivor_rc", int),
            "survivor_summary": mover_summary(a.get(a.get("survivor", ""), "")),
            "checkpoint": cp, "inspect": insp,
            "checkpoint_bytes_done": (cp or {}).get("bytes_done"),
            "checkpoint_partials": len((cp or {}).get("partials") or []),
            "on_disk": disk,
            # What the receiver wrote before the kill (committed + temp files): the work of
            # attempt 1. The last progress event can be up to ~0.5 s stale.
            "bytes_received": on_disk,
        },
        "attempt2": {
            "secs": num("a2_secs"), "send_exit": num("a2_send_rc", int),
            "recv_exit": num("a2_recv_rc", int), "summary": a2s, "recv_summary": a2r,
            "bytes_literal": lit2, "bytes_on_wire": (a2s or {}).get("bytes_on_wire"),
            "bytes_resumed": (a2s or {}).get("bytes_resumed"),
            "files_resumed": (a2s or {}).get("files_resumed"),
            "files_up_to_date": (a2s or {}).get("files_up_to_date"),
            "files_transferred": (a2s or {}).get("files_transferred"),
            "progress_bytes_resumed": a2_prog[0].get("bytes_resumed") if a2_prog else None,
            "first_progress": a2_prog[0] if a2_prog else None,
        },
        "restart_from_zero": {
            "secs": num("base_secs"), "exit": num("base_rc", int), "summary": base,
            "bytes_literal": base_lit, "bytes_on_wire": (base or {}).get("bytes_on_wire"),
        },
        "verify_ok": a.get("verify") == "ok",
    }
    if tree and on_disk is not None and lit2 is not None:
        rec["resent_fraction"] = lit2 / tree
        rec["lost_bytes"] = on_disk + lit2 - tree
        rec["lost_bytes_by_progress"] = (at_kill + lit2 - tree) if at_kill is not None else None
    if tree and on_disk is not None and base_lit is not None:
        rec["restart_lost_bytes"] = on_disk + base_lit - tree
    with open(out_jsonl, "a") as f:
        f.write(json.dumps(rec) + "\n")
    hb, r1, r2 = report.human_bytes, rec["attempt1"], rec["attempt2"]
    pct = lambda x: "n/a" if x is None or not tree else "%.1f%%" % (100.0 * x / tree)
    print("killed=%s at bytes_done=%s (%s), received %s, checkpoint %s (%d partial); attempt 2: "
          "%ss exit %s/%s, literal %s (%s), bytes_resumed %s, files_resumed %s; lost %s; "
          "restart from zero: %ss literal %s" % (
              r1["killed"], hb(at_kill), pct(at_kill), hb(on_disk), hb(r1["checkpoint_bytes_done"]),
              r1["checkpoint_partials"], a.get("a2_secs"), r2["send_exit"], r2["recv_exit"],
              hb(lit2), pct(lit2), hb(r2["bytes_resumed"]), r2["files_resumed"],
              "n/a" if rec.get("lost_bytes") is None else report.hb_signed(rec["lost_bytes"]),
              a.get("base_secs"), hb(base_lit)))


def main(argv):
    cmd = argv[1]
    if cmd == "small":
        gen_small(argv[2], int(argv[3]), int(argv[4]), int(argv[5]))
    elif cmd == "many":
        gen_many(argv[2], int(argv[3]), int(argv[4]), int(argv[5]))
    elif cmd == "logs":
        gen_logs(argv[2], int(argv[3]), int(argv[4]), int(argv[5]))
    elif cmd == "edit":
        edit(argv[2], int(argv[3]), int(argv[4]))
    elif cmd == "rsync-wire":
        print(rsync_wire(argv[2]))
    elif cmd == "mover-wire":
        print(mover_wire(argv[2]))
    elif cmd == "watch-kill":
        sys.exit(watch_kill(argv[2], int(argv[3]), float(argv[4]), float(argv[5]), argv[6]))
    elif cmd == "disk-usage":
        disk_usage(argv[2], argv[3])
    elif cmd == "tree-bytes":
        d = disk_usage(argv[2])
        print(d["files"], d["bytes"])
    elif cmd == "resume-record":
        resume_record(argv[2], argv[3:])
    elif cmd == "tail-state":
        print(tail.state(argv[2]))
    elif cmd == "tail-record":
        tail.record(argv[2], argv[3:])
    elif cmd == "report":
        report.report(*argv[2:6], *(argv[6:9] + [None] * 3)[:3])
    else:
        sys.exit("unknown subcommand %r" % cmd)


if __name__ == "__main__":
    main(sys.argv)
