#!/usr/bin/env python3
"""Helpers for tests/bench/run.sh: data generation, edits, output parsing, report.

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
import statistics
import sys
import time

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
    hb, r1, r2 = human_bytes, rec["attempt1"], rec["attempt2"]
    pct = lambda x: "n/a" if x is None or not tree else "%.1f%%" % (100.0 * x / tree)
    print("killed=%s at bytes_done=%s (%s), received %s, checkpoint %s (%d partial); attempt 2: "
          "%ss exit %s/%s, literal %s (%s), bytes_resumed %s, files_resumed %s; lost %s; "
          "restart from zero: %ss literal %s" % (
              r1["killed"], hb(at_kill), pct(at_kill), hb(on_disk), hb(r1["checkpoint_bytes_done"]),
              r1["checkpoint_partials"], a.get("a2_secs"), r2["send_exit"], r2["recv_exit"],
              hb(lit2), pct(lit2), hb(r2["bytes_resumed"]), r2["files_resumed"],
              "n/a" if rec.get("lost_bytes") is None else _hb_signed(rec["lost_bytes"]),
              a.get("base_secs"), hb(base_lit)))


# The targets ("Mover speed"), mover / rsync.
# scenario -> (label, max time ratio, max wire ratio or None)
TARGETS = [
    ("initial_large", "1 initial copy, large random", 0.7, None),
    ("delta_large", "2 delta re-sync, 4 KiB edits", 0.5, 1.0),
    ("initial_small", "3a initial copy, small files", 0.5, None),
    ("noop_small", "3b no-op re-sync, small files", 0.4, 1.0),
    ("compressed_logs", "4 compressed copy, log text", 0.35, 1.0),
]
# The `many` case: 1M files of 100-2000 bytes.
MANY_TARGETS = [
    ("initial_many", "initial copy, many small files", 0.6, None),
    ("noop_many", "no-op re-sync, many small files", 0.4, None),
]
# The `ssh` case: the compare scenarios (and their targets), each run by four tools.
SSH_SCENARIOS = [("ssh_" + key, label, t, w) for key, label, t, w in TARGETS]
RSS_TARGET_KB = 64 * 1024   # mover's peak RSS, each side (the max of both is reported)
TLS_COST_TARGET = 0.10      # tls time / insecure time - 1


def human_bytes(n):
    if n is None or n < 0:
        return "n/a"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return ("%d %s" % (n, unit)) if unit == "B" else ("%.1f %s" % (n, unit))
        n /= 1024.0
    return str(n)


def print_table(header, table):
    widths = [max(len(str(r[i])) for r in [header] + table) for i in range(len(header))]
    line = lambda r: "| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths)) + " |"
    print(line(header))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in table:
        print(line(r))


# checkpoint-overhead data sets: (runs.tsv scenario prefix, label)
OVERHEAD_SETS = [("ckpt_large", "initial copy, large random"),
                 ("ckpt_small", "initial copy, small files")]
OVERHEAD_TARGET = 1.05   # "no measurable slowdown": with/without --operation-id
RESUME_LOST_TARGET = 0.01  # work lost to a kill, as a share of the tree


def report_overhead(rows, med, results):
    table, all_ok = [], True
    for key, label in OVERHEAD_SETS:
        off, on = rows.get((key + "_off", "mover"), []), rows.get((key + "_on", "mover"), [])
        if not off and not on:
            continue
        ok_runs = bool(off and on) and all(r["status"] == "ok" for r in off + on)
        t_off, t_on = med([r["secs"] for r in off]), med([r["secs"] for r in on])
        ratio = (t_on / t_off) if (ok_runs and t_off and t_on is not None) else None
        met = ratio is not None and ratio <= OVERHEAD_TARGET
        verdict = "FAIL" if not ok_runs else ("met" if met else "missed")
        all_ok &= ok_runs
        spread = lambda rs: "%.2f-%.2f" % (min(r["secs"] for r in rs), max(r["secs"] for r in rs)) \
            if rs else "n/a"
        table.append([label, len(off), "n/a" if t_off is None else "%.2f s" % t_off, spread(off),
                      "n/a" if t_on is None else "%.2f s" % t_on, spread(on),
                      "n/a" if ratio is None else "%.3fx" % ratio,
                      "<=%.2fx %s" % (OVERHEAD_TARGET, "met" if met else "missed"), verdict])
        results["checkpoint_overhead"].append(dict(
            scenario=key, label=label, ok=ok_runs, median_secs_without=t_off,
            median_secs_with=t_on, ratio=ratio, target_ratio=OVERHEAD_TARGET, target_met=met,
            verdict=verdict, runs_without=off, runs_with=on,
            last_summary_with=mover_summary(on[-1]["log"]) if on else None))
    if table:
        print()
        print("checkpoint overhead: initial copy into an empty destination, without and with "
              "--operation-id (median)")
        print_table(["data set", "runs", "without", "range", "with --operation-id", "range",
                     "ratio", "target", "result"], table)
    return all_ok


def report_resume(path, results):
    recs = []
    if path and os.path.exists(path):
        recs = [json.loads(l) for l in open(path) if l.strip()]
    if not recs:
        return True
    all_ok = True
    by_variant = {}
    for r in recs:
        by_variant.setdefault(r["variant"], []).append(r)

    def med(vals):
        vals = [v for v in vals if v is not None]
        return statistics.median(vals) if vals else None

    hb = human_bytes
    pct = lambda x, t: "n/a" if x is None or not t else "%.1f%%" % (100.0 * x / t)
    table = []
    for variant, rs in by_variant.items():
        ok = all(r["status"] == "ok" for r in rs)
        all_ok &= ok
        tree = rs[0]["tree_bytes"]
        g = lambda *keys: med([_dig(r, keys) for r in rs])
        kill_at, recvd = g("attempt1", "bytes_done_at_kill"), g("attempt1", "bytes_received")
        cp_at = g("attempt1", "checkpoint_bytes_done")
        lit2, res2 = g("attempt2", "bytes_literal"), g("attempt2", "bytes_resumed")
        fres2 = g("attempt2", "files_resumed")
        t2, t0 = g("attempt2", "secs"), g("restart_from_zero", "secs")
        lit0 = g("restart_from_zero", "bytes_literal")
        lost, lost0 = g("lost_bytes"), g("restart_lost_bytes")
        met = lost is not None and tree and lost <= RESUME_LOST_TARGET * tree
        verdict = "FAIL" if not ok else ("met" if met else "missed")
        exits = sorted({"%s/%s" % (r["attempt2"]["send_exit"], r["attempt2"]["recv_exit"]) for r in rs})
        table.append([
            variant, len(rs), ",".join(exits), "%s (%s)" % (hb(kill_at), pct(kill_at, tree)),
            "%s (%s)" % (hb(recvd), pct(recvd, tree)), "%s (%s)" % (hb(cp_at), pct(cp_at, tree)),
            "%s (%s)" % (hb(lit2), pct(lit2, tree)), hb(res2),
            "n/a" if fres2 is None else "%d" % fres2,
            "n/a" if t2 is None else "%.2f s" % t2,
            "n/a" if t0 is None else "%.2f s" % t0, hb(lit0),
            "n/a" if lost is None else "%s (%s)" % (_hb_signed(lost), pct(lost, tree)),
            "n/a" if lost0 is None else "%s (%s)" % (hb(lost0), pct(lost0, tree)),
            verdict])
        results["resume"].append(dict(
            variant=variant, ok=ok, tree_bytes=tree, median_bytes_done_at_kill=kill_at,
            median_bytes_received_attempt1=recvd, median_checkpoint_bytes_done=cp_at,
            median_attempt2_bytes_literal=lit2, median_attempt2_bytes_resumed=res2,
            median_attempt2_files_resumed=fres2, median_attempt2_secs=t2,
            median_restart_secs=t0, median_restart_bytes_literal=lit0,
            median_lost_bytes=lost, median_restart_lost_bytes=lost0,
            target_lost_fraction=RESUME_LOST_TARGET, target_met=bool(met), verdict=verdict,
            runs=rs))
    print()
    print("resume after SIGKILL at >= 90%% of the bytes (attempt 1 paced by --bwlimit), "
          "attempt 2 vs restart from zero (median); lost = attempt 1 received + attempt 2 "
          "literal - tree (target <= %d%% of the tree)" % round(RESUME_LOST_TARGET * 100))
    print_table(["kill", "runs", "attempt 2 exit", "bytes_done at kill", "received by kill", "checkpoint at kill",
                 "attempt 2 literal", "bytes_resumed", "files_resumed", "attempt 2 time",
                 "restart time", "restart literal", "lost (resume)", "lost (restart)", "result"],
                table)
    return all_ok


# tls case: (tls.tsv case, label, MiB/s meaningful, max TLS cost (tls time / insecure time - 1)
# or None). The no-op re-sync takes tens of ms, mostly connection set-up: the handshake alone
# is ~30% of it, and the target is about the cost per byte moved.
TLS_CASES = [
    ("initial", "initial copy", True, TLS_COST_TARGET),
    ("resync", "delta re-sync, contents unchanged (mtimes bumped)", True, TLS_COST_TARGET),
    ("noop", "no-op re-sync (nothing changed)", False, None),
]
TLS_MODES = [("insecure", "insecure"), ("insecure-op", "insecure --operation-id"), ("tls", "tls")]


def report_tls(path, vfail, meta, results):
    """tls.tsv (one line per run, see run.sh tls_run) -> result lines, a table, results["tls"]."""
    runs = {}
    if path and os.path.exists(path):
        for line in open(path):
            if not line.strip():
                continue
            f = line.rstrip("\n").split("\t")
            case, mode, rep, secs, wire, rss_s, rss_r, us, ss, ur, sr, status, log = f
            if status == "ok" and ("tls_%s_%s" % (case, mode), "mover") in vfail:
                status = "verify-failed"
            runs.setdefault((case, mode), []).append(dict(
                rep=int(rep), secs=float(secs), wire=int(wire), rss_send_kb=int(rss_s),
                rss_recv_kb=int(rss_r), cpu_send=_cpu(us, ss), cpu_recv=_cpu(ur, sr),
                cpu_user_send=float(us), cpu_sys_send=float(ss), cpu_user_recv=float(ur),
                cpu_sys_recv=float(sr), status=status, log=log))
    if not runs:
        return True
    tree = None
    for rs in runs.values():
        for r in rs:
            s = mover_summary(r["log"]) or {}
            if isinstance(s.get("bytes_total"), int):
                tree = s["bytes_total"]
    large = meta.get("large") or {}
    tree = tree or (large.get("files", 0) * large.get("file_bytes", 0)) or None
    mib = lambda secs: (tree / secs / (1 << 20)) if (tree and secs) else None
    med = lambda vals: statistics.median(vals) if vals else None
    all_ok, lines, table = True, [], []
    for case, label, rate, target in TLS_CASES:
        per = {}
        for mode, _ in TLS_MODES:
            rs = runs.get((case, mode), [])
            ok = bool(rs) and all(r["status"] == "ok" for r in rs)
            secs = [r["secs"] for r in rs if r["secs"] >= 0]
            cs = [r["cpu_send"] for r in rs if r["cpu_send"] is not None]
            cr = [r["cpu_recv"] for r in rs if r["cpu_recv"] is not None]
            per[mode] = dict(ok=ok, runs=rs, median_secs=med(secs),
                             min_secs=min(secs) if secs else None, max_secs=max(secs) if secs else None,
                             median_mib_s=mib(med(secs)) if secs else None,
                             median_cpu_send=med(cs), median_cpu_recv=med(cr),
                             median_wire=med([r["wire"] for r in rs if r["wire"] >= 0]),
                             peak_rss_kb=max([max(r["rss_send_kb"], r["rss_recv_kb"]) for r in rs] or [-1]))
        if not any(p["runs"] for p in per.values()):
            continue
        ok = all(p["ok"] for p in per.values() if p["runs"]) and per["insecure"]["runs"] \
            and per["tls"]["runs"]
        all_ok &= bool(ok)
        ti, to, tt = (per[m]["median_secs"] for m in ("insecure", "insecure-op", "tls"))
        ratio = (ti / tt) if (ok and ti and tt) else None          # tls / insecure throughput
        ratio_op = (to / tt) if (ok and to and tt) else None       # tls / insecure --operation-id
        cost = (tt / ti - 1) if (ok and ti and tt) else None        # tls time / insecure time - 1
        met = None if target is None else (cost is not None and cost <= target)
        verdict = "FAIL" if not ok else ("-" if met is None else ("met" if met else "missed"))
        size = "" if not tree else " %s" % ("%.2f GiB" % (tree / float(1 << 30)) if tree >= 1 << 30
                                            else human_bytes(tree))

        def t(mode, with_rate=rate):
            p = per[mode]
            if p["median_secs"] is None:
                return "n/a"
            return "%.2f s" % p["median_secs"] + (" (%.0f MiB/s)" % p["median_mib_s"]
                                                  if with_rate and p["median_mib_s"] else "")

        tgt = "" if target is None else " (target <= %d%%, %s)" % (
            round(100 * target), "met" if met else "MISSED")
        lines.append("tls: %s%s: insecure %s, tls %s, ratio %s, TLS cost %s%s%s" % (
            label, size, t("insecure"), t("tls"), "n/a" if ratio is None else "%.2f" % ratio,
            "n/a" if cost is None else "%+.1f%%" % (100 * cost), tgt,
            "" if ok else "  FAIL (a run failed or a destination differs)"))
        cpu = lambda m: "n/a" if per[m]["median_cpu_send"] is None else "%.2f/%.2f s" % (
            per[m]["median_cpu_send"], per[m]["median_cpu_recv"])
        lines.append("     cpu user+sys send/receive: insecure %s, insecure --operation-id %s, tls %s;"
                     " insecure --operation-id %s, tls vs it %s" % (
                         cpu("insecure"), cpu("insecure-op"), cpu("tls"), t("insecure-op"),
                         "n/a" if ratio_op is None else "%.2f" % ratio_op))
        rng = lambda m: "n/a" if per[m]["min_secs"] is None else "%.2f-%.2f" % (
            per[m]["min_secs"], per[m]["max_secs"])
        cell = lambda m: "%s [%s]" % (t(m), rng(m))
        table.append([label, len(per["tls"]["runs"]), cell("insecure"), cell("insecure-op"),
                      cell("tls"), "n/a" if ratio is None else "%.3f" % ratio,
                      "n/a" if ratio_op is None else "%.3f" % ratio_op,
                      cpu("insecure"), cpu("insecure-op"), cpu("tls"),
                      "%s / %s" % (human_bytes(per["insecure"]["median_wire"]),
                                   human_bytes(per["tls"]["median_wire"])),
                      "n/a" if cost is None else "%+.1f%%" % (100 * cost),
                      "-" if target is None else "<=%d%%" % round(100 * target), verdict])
        results["tls"].append(dict(
            case=case, label=label, ok=bool(ok), tree_bytes=tree, ratio_tls_insecure=ratio,
            ratio_tls_insecure_operation_id=ratio_op, tls_cost=cost, target_max_cost=target,
            target_met=met,
            verdict=verdict, modes=per))
    print()
    print("tls: --tls-dir (TLS 1.3, mutual auth; implies the material's --operation-id) vs "
          "--insecure, loopback, median; ratio = tls throughput / insecure throughput; "
          "TLS cost = tls time / insecure time - 1 (target <= %d%% where data moves)"
          % round(100 * TLS_COST_TARGET))
    for l in lines:
        print(l)
    print()
    print_table(["case", "runs", "insecure [range]", "insecure --operation-id [range]", "tls [range]",
                 "ratio tls/insecure", "ratio tls/insecure-op", "cpu s/r insecure",
                 "cpu s/r insecure-op", "cpu s/r tls", "wire insecure / tls", "TLS cost",
                 "target", "result"],
                table)
    return all_ok


def _cpu(user, sys_):
    try:
        u, s = float(user), float(sys_)
    except ValueError:
        return None
    return None if u < 0 or s < 0 else u + s


_dig = tail.dig


def _hb_signed(n):
    return ("-" + human_bytes(-n)) if n < 0 else human_bytes(n)


def _pair(rows, med, key, rsync_tool, mover_tool, t_target, w_target):
    """rsync_tool's and mover_tool's runs of scenario KEY: medians, ratios against the targets
    (time, wire, mover's peak RSS against RSS_TARGET_KB), a verdict."""
    rs, mv = rows.get((key, rsync_tool), []), rows.get((key, mover_tool), [])
    ok_runs = bool(rs and mv) and all(r["status"] == "ok" for r in rs + mv)
    r_t, m_t = med([r["secs"] for r in rs]), med([r["secs"] for r in mv])
    r_w, m_w = med([r["wire"] for r in rs]), med([r["wire"] for r in mv])
    rss_s = max([r["rss_send_kb"] for r in mv] or [-1])
    rss_r = max([r["rss_recv_kb"] for r in mv] or [-1])
    rss = max(rss_s, rss_r)
    t_ratio = (m_t / r_t) if (ok_runs and r_t and m_t is not None) else None
    w_ratio = (m_w / r_w) if (ok_runs and r_w and m_w is not None) else None
    t_met = t_ratio is not None and t_ratio <= t_target
    w_met = True if w_target is None else (w_ratio is not None and w_ratio <= w_target)
    rss_met = None if rss < 0 else rss <= RSS_TARGET_KB   # None: not measured
    verdict = "FAIL" if not ok_runs else (
        "met" if (t_met and w_met and rss_met is not False) else "missed")
    return dict(ok=ok_runs, rsync_tool=rsync_tool, mover_tool=mover_tool,
                rsync=dict(median_secs=r_t, median_wire_bytes=r_w, runs=rs),
                mover=dict(median_secs=m_t, median_wire_bytes=m_w, peak_rss_send_kb=rss_s,
                           peak_rss_recv_kb=rss_r, runs=mv,
                           last_summary=mover_summary(mv[-1]["log"]) if mv else None),
                time_ratio=t_ratio, wire_ratio=w_ratio, target_time_ratio=t_target,
                target_wire_ratio=w_target, time_target_met=t_met, wire_target_met=w_met,
                peak_rss_kb=rss, target_peak_rss_kb=RSS_TARGET_KB, rss_target_met=rss_met,
                verdict=verdict)


def _ratio_cell(ratio, target, met):
    r = "n/a" if ratio is None else "%.3fx" % ratio
    return r if target is None else "%s (<=%.2fx %s)" % (r, target, "met" if met else "missed")


def _rss_cell(p):
    if p["peak_rss_kb"] < 0:
        return "n/a"
    return "%.1f MiB (<=%d %s)" % (p["peak_rss_kb"] / 1024.0, RSS_TARGET_KB // 1024,
                                   "met" if p["rss_target_met"] else "missed")


def report_pairs(rows, med, targets, title=None):
    """mover vs rsync (daemon) per scenario of TARGETS: a table; (all ok, results list)."""
    header = ["scenario", "rsync time", "mover time", "time ratio (target)",
              "rsync wire", "mover wire", "wire ratio (target)", "mover peak RSS, max of both sides (target)",
              "result"]
    table, out, all_ok = [], [], True
    for key, label, t_target, w_target in targets:
        if not rows.get((key, "rsync")) and not rows.get((key, "mover")):
            continue
        p = _pair(rows, med, key, "rsync", "mover", t_target, w_target)
        all_ok &= p["ok"]
        secs = lambda x: "n/a" if x is None else "%.2f s" % x
        table.append([label, secs(p["rsync"]["median_secs"]), secs(p["mover"]["median_secs"]),
                      _ratio_cell(p["time_ratio"], t_target, p["time_target_met"]),
                      human_bytes(p["rsync"]["median_wire_bytes"]),
                      human_bytes(p["mover"]["median_wire_bytes"]),
                      _ratio_cell(p["wire_ratio"], w_target, p["wire_target_met"]),
                      _rss_cell(p), p["verdict"]])
        out.append(dict(scenario=key, label=label, **p))
    if table:
        if title:
            print()
            print(title)
        print_table(header, table)
    return all_ok, out


def report_ssh(rows, med, meta):
    """The ssh case: per scenario mover(TLS)/rsync(ssh) and mover(--insecure)/rsync(daemon),
    both against the compare targets, and TLS's cost to mover (tls / insecure time)."""
    table, out, all_ok = [], [], True
    secs = lambda x: "n/a" if x is None else "%.2f s" % x
    for key, label, t_target, w_target in SSH_SCENARIOS:
        if not any(rows.get((key, t)) for t in ("rsync", "mover", "rsync-ssh", "mover-tls")):
            continue
        enc = _pair(rows, med, key, "rsync-ssh", "mover-tls", t_target, w_target)
        ins = _pair(rows, med, key, "rsync", "mover", t_target, w_target)
        ok = enc["ok"] and ins["ok"]
        all_ok &= ok
        tt, ti = enc["mover"]["median_secs"], ins["mover"]["median_secs"]
        cost = (tt / ti - 1) if (ok and tt is not None and ti) else None
        rss = max(enc["peak_rss_kb"], ins["peak_rss_kb"])
        rss_met = None if rss < 0 else rss <= RSS_TARGET_KB
        verdict = "FAIL" if not ok else ("met" if enc["verdict"] == ins["verdict"] == "met"
                                         else "missed")
        wires = lambda p: "%s / %s" % (human_bytes(p["mover"]["median_wire_bytes"]),
                                       human_bytes(p["rsync"]["median_wire_bytes"]))
        table.append([label,
                      "%s / %s" % (secs(tt), secs(enc["rsync"]["median_secs"])),
                      _ratio_cell(enc["time_ratio"], t_target, enc["time_target_met"]),
                      wires(enc), _ratio_cell(enc["wire_ratio"], w_target, enc["wire_target_met"]),
                      "%s / %s" % (secs(ti), secs(ins["rsync"]["median_secs"])),
                      _ratio_cell(ins["time_ratio"], t_target, ins["time_target_met"]),
                      _ratio_cell(ins["wire_ratio"], w_target, ins["wire_target_met"]),
                      "n/a" if cost is None else "%+.1f%%" % (100 * cost),
                      "n/a" if rss < 0 else "%.1f MiB (%s)" % (rss / 1024.0,
                                                               "met" if rss_met else "missed"),
                      verdict])
        out.append(dict(scenario=key, label=label, ok=ok, tls_vs_ssh=enc, insecure_vs_daemon=ins,
                        mover_tls_cost=cost, peak_rss_kb=rss, rss_target_met=rss_met,
                        verdict=verdict))
    if table:
        print()
        print("ssh: mover --tls-dir vs rsync over ssh (%s), and from the same run mover --insecure "
              "vs the rsync daemon; median, ratios mover/rsync against the compare targets; "
              "wire as each tool counts it (rsync: its stream inside ssh); peak RSS: mover, max of "
              "both sides and both modes (target <= %d MiB)" % (
                  (meta.get("ssh") or {}).get("version") or "ssh", RSS_TARGET_KB // 1024))
        print_table(["scenario", "mover tls / rsync ssh", "time ratio tls/ssh (target)",
                     "wire mover tls / rsync ssh", "wire ratio tls/ssh (target)",
                     "mover insecure / rsync daemon", "time ratio insecure/daemon (target)",
                     "wire ratio insecure/daemon (target)", "TLS cost to mover", "mover peak RSS",
                     "result"], table)
    return all_ok, out


def report(tsv, vfail_tsv, out_json, meta_json, resume_jsonl=None, tls_tsv=None,
           tail_jsonl=None):
    meta = json.load(open(meta_json))
    vfail = {tuple(l.split()) for l in open(vfail_tsv) if l.strip()}
    rows = {}
    for line in open(tsv):
        if not line.strip() or line.startswith("#"):
            continue
        sc, tool, rep, secs, wire, rss_s, rss_r, status, log = line.rstrip("\n").split("\t")
        if status == "ok" and (sc, tool) in vfail:
            status = "verify-failed"
        rows.setdefault((sc, tool), []).append(dict(
            rep=int(rep), secs=float(secs), wire=int(wire), rss_send_kb=int(rss_s),
            rss_recv_kb=int(rss_r), status=status, log=log))

    def med(vals):
        vals = [v for v in vals if v is not None and v >= 0]
        return statistics.median(vals) if vals else None

    results = {"meta": meta}
    all_ok = True
    ok, results["scenarios"] = report_pairs(rows, med, TARGETS)
    all_ok &= ok
    ok, results["many"] = report_pairs(rows, med, MANY_TARGETS, title=(
        "many: %s files of 100-2000 bytes, mover --insecure vs rsync daemon (median)" % (
            (meta.get("many") or {}).get("files", "?"))))
    all_ok &= ok
    ok, results["ssh"] = report_ssh(rows, med, meta)
    all_ok &= ok
    results["checkpoint_overhead"] = []
    results["resume"] = []
    results["tls"] = []
    all_ok &= report_overhead(rows, med, results)
    all_ok &= report_resume(resume_jsonl, results)
    all_ok &= report_tls(tls_tsv, vfail, meta, results)
    all_ok &= tail.report(tail_jsonl, results, human_bytes, print_table)
    results["all_ok"] = all_ok
    with open(out_json, "w") as f:
        json.dump(results, f, indent=2)
        f.write("\n")


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
        report(*argv[2:6], *(argv[6:9] + [None] * 3)[:3])
    else:
        sys.exit("unknown subcommand %r" % cmd)


if __name__ == "__main__":
    main(sys.argv)
