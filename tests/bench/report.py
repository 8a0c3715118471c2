"""The report of tests/bench/run.sh: median and ratio tables on stdout, everything to JSON.
Used by helper.py:

  report TSV VFAIL_TSV JSON META_JSON [RESUME_JSONL [TLS_TSV [TAIL_JSONL]]]
"""
import json
import os
import statistics

import tail

# One reader of a mover's summary line for every case.
mover_summary = tail.summary


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
            "n/a" if lost is None else "%s (%s)" % (hb_signed(lost), pct(lost, tree)),
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


def hb_signed(n):
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


def _local(rows, med, key, mover_secs):
    """The scenario's local reference (tool `cp`: cp -a + sync -f): median, mover/cp, ok."""
    cp = rows.get((key, "cp"), [])
    if not cp:
        return None
    ok = all(r["status"] == "ok" for r in cp)
    secs = med([r["secs"] for r in cp]) if ok else None
    ratio = (mover_secs / secs) if (secs and mover_secs is not None) else None
    return dict(ok=ok, median_secs=secs, mover_ratio=ratio, runs=cp)


def report_pairs(rows, med, targets, title=None):
    """mover vs rsync (daemon) per scenario of TARGETS: a table; (all ok, results list). Where
    the run measured the local reference (`cp`), two more columns: its time and mover/cp."""
    with_cp = any(rows.get((key, "cp")) for key, *_ in targets)
    header = ["scenario", "rsync time", "mover time", "time ratio (target)",
              "rsync wire", "mover wire", "wire ratio (target)", "mover peak RSS, max of both sides (target)",
              "result"]
    if with_cp:
        header[-1:-1] = ["cp -a + sync", "mover / cp"]
    table, out, all_ok = [], [], True
    secs = lambda x: "n/a" if x is None else "%.2f s" % x
    for key, label, t_target, w_target in targets:
        if not rows.get((key, "rsync")) and not rows.get((key, "mover")):
            continue
        p = _pair(rows, med, key, "rsync", "mover", t_target, w_target)
        local = _local(rows, med, key, p["mover"]["median_secs"])
        all_ok &= p["ok"] and (local is None or local["ok"])
        row = [label, secs(p["rsync"]["median_secs"]), secs(p["mover"]["median_secs"]),
               _ratio_cell(p["time_ratio"], t_target, p["time_target_met"]),
               human_bytes(p["rsync"]["median_wire_bytes"]),
               human_bytes(p["mover"]["median_wire_bytes"]),
               _ratio_cell(p["wire_ratio"], w_target, p["wire_target_met"]),
               _rss_cell(p), p["verdict"]]
        if with_cp:
            row[-1:-1] = ["n/a", "n/a"] if local is None else [
                secs(local["median_secs"]), _ratio_cell(local["mover_ratio"], None, None)]
        table.append(row)
        out.append(dict(scenario=key, label=label, local_cp=local, **p))
    if table:
        if title:
            print()
            print(title)
        print_table(header, table)
        if with_cp:
            print("cp -a + sync: the same data copied locally by one process and made durable "
                  "(sync -f), page cache dropped; delta: the basis read meanwhile. A plain copy "
                  "on this disk, not a bound on a copy that reads many files at once.")
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

