#!/usr/bin/env python3
"""Helpers for tests/bench/run.sh: data generation, edits, output parsing, report.

Subcommands:
  small DIR NFILES NDIRS SEED        NFILES random files of 1-8 KiB spread over NDIRS dirs
  logs DIR TOTAL_BYTES NFILES SEED   log-like text (compresses ~5-10x with zstd)
  edit DIR EDITS_PER_FILE SEED       overwrite EDITS_PER_FILE random 4 KiB ranges in each file
  rsync-wire FILE                    sent+received bytes from `rsync --stats` output
  mover-wire FILE                    bytes_on_wire of the last {"event":"summary"} line
  report TSV VFAIL_TSV JSON META_JSON         median/ratio table on stdout, results to JSON
"""
import json
import os
import random
import re
import statistics
import sys

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


def mover_summary(path):
    summary = None
    try:
        with open(path, errors="replace") as f:
            for line in f:
                line = line.strip()
                if '"summary"' not in line:
                    continue
                try:
                    obj = json.loads(line)
                except ValueError:
                    continue
                if isinstance(obj, dict) and obj.get("event") == "summary":
                    summary = obj
    except OSError:
        pass
    return summary


def mover_wire(path):
    s = mover_summary(path)
    if s is None or not isinstance(s.get("bytes_on_wire"), int):
        return -1
    return s["bytes_on_wire"]


# scenario -> (label, max time ratio, max wire ratio or None)
TARGETS = [
    ("initial_large", "1 initial copy, large random", 0.8, None),
    ("delta_large", "2 delta re-sync, 4 KiB edits", 0.5, 1.2),
    ("initial_small", "3a initial copy, small files", 0.5, None),
    ("noop_small", "3b no-op re-sync, small files", 1.0, None),
    ("compressed_logs", "4 compressed copy, log text", 0.1, 1.1),
]


def human_bytes(n):
    if n is None or n < 0:
        return "n/a"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return ("%d %s" % (n, unit)) if unit == "B" else ("%.1f %s" % (n, unit))
        n /= 1024.0
    return str(n)


def report(tsv, vfail_tsv, out_json, meta_json):
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

    results = {"meta": meta, "scenarios": []}
    header = ["scenario", "rsync time", "mover time", "time ratio (target)",
              "rsync wire", "mover wire", "wire ratio (target)", "mover peak RSS", "result"]
    table = []
    all_ok = True
    for key, label, t_target, w_target in TARGETS:
        rs, mv = rows.get((key, "rsync"), []), rows.get((key, "mover"), [])
        if not rs and not mv:
            continue
        ok_runs = all(r["status"] == "ok" for r in rs + mv) and rs and mv
        r_t, m_t = med([r["secs"] for r in rs]), med([r["secs"] for r in mv])
        r_w, m_w = med([r["wire"] for r in rs]), med([r["wire"] for r in mv])
        rss = max([max(r["rss_send_kb"], r["rss_recv_kb"]) for r in mv] or [-1])
        rss_s = max([r["rss_send_kb"] for r in mv] or [-1])
        rss_r = max([r["rss_recv_kb"] for r in mv] or [-1])
        t_ratio = (m_t / r_t) if (ok_runs and r_t and m_t is not None) else None
        w_ratio = (m_w / r_w) if (ok_runs and r_w and m_w is not None) else None
        t_met = t_ratio is not None and t_ratio <= t_target
        w_met = True if w_target is None else (w_ratio is not None and w_ratio <= w_target)
        if not ok_runs:
            verdict = "FAIL"
            all_ok = False
        else:
            verdict = "met" if (t_met and w_met) else "missed"
        fmt_r = lambda x: "n/a" if x is None else "%.3fx" % x
        t_cell = "%s (<=%.1fx %s)" % (fmt_r(t_ratio), t_target, "met" if t_met else "missed")
        w_cell = "%s" % fmt_r(w_ratio) if w_target is None else "%s (<=%.1fx %s)" % (
            fmt_r(w_ratio), w_target, "met" if w_met else "missed")
        table.append([label, "n/a" if r_t is None else "%.2f s" % r_t,
                      "n/a" if m_t is None else "%.2f s" % m_t, t_cell,
                      human_bytes(r_w), human_bytes(m_w), w_cell,
                      "n/a" if rss < 0 else "%.1f MiB" % (rss / 1024.0), verdict])
        results["scenarios"].append(dict(
            scenario=key, label=label, ok=bool(ok_runs),
            rsync=dict(median_secs=r_t, median_wire_bytes=r_w, runs=rs),
            mover=dict(median_secs=m_t, median_wire_bytes=m_w, peak_rss_send_kb=rss_s,
                       peak_rss_recv_kb=rss_r, runs=mv,
                       last_summary=mover_summary(mv[-1]["log"]) if mv else None),
            time_ratio=t_ratio, wire_ratio=w_ratio, target_time_ratio=t_target,
            target_wire_ratio=w_target, time_target_met=t_met, wire_target_met=w_met,
            verdict=verdict))
    results["all_ok"] = all_ok
    with open(out_json, "w") as f:
        json.dump(results, f, indent=2)
        f.write("\n")

    widths = [max(len(str(r[i])) for r in [header] + table) for i in range(len(header))]
    line = lambda r: "| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths)) + " |"
    print(line(header))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in table:
        print(line(r))


def main(argv):
    cmd = argv[1]
    if cmd == "small":
        gen_small(argv[2], int(argv[3]), int(argv[4]), int(argv[5]))
    elif cmd == "logs":
        gen_logs(argv[2], int(argv[3]), int(argv[4]), int(argv[5]))
    elif cmd == "edit":
        edit(argv[2], int(argv[3]), int(argv[4]))
    elif cmd == "rsync-wire":
        print(rsync_wire(argv[2]))
    elif cmd == "mover-wire":
        print(mover_wire(argv[2]))
    elif cmd == "report":
        report(argv[2], argv[3], argv[4], argv[5])
    else:
        sys.exit("unknown subcommand %r" % cmd)


if __name__ == "__main__":
    main(sys.argv)
