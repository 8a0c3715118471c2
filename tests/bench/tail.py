"""The `resume-tail` case of tests/bench (see README.md): a receiver SIGKILLed at 90% of one
large file, attempt 2 against a fresh copy of what attempt 2 had left. Used by helper.py:

  tail-state INSPECT_JSON        "TEMP VERIFIED_LEN" of the one partial file `mover inspect` shows
  tail-record OUT_JSONL KEY=VALUE...   one run (one page-cache state) as a JSON line
"""
import json
import statistics

TAIL_TARGET = 1.2   # attempt 2 time / fresh copy of the rest (issue 14)


def load(path):
    """A JSON file, or None if it is missing or not JSON."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def summary(path):
    """The last {"event":"summary"} line of a mover stdout file (None if there is none)."""
    found = None
    try:
        with open(path, errors="replace") as f:
            for line in f:
                if '"summary"' not in line:
                    continue
                try:
                    obj = json.loads(line)
                except ValueError:
                    continue
                if isinstance(obj, dict) and obj.get("event") == "summary":
                    found = obj
    except OSError:
        pass
    return found


def fields(kv):
    """KEY=VALUE arguments as a dict, and a reader of one as a number (None if absent or
    not a number)."""
    a = dict(x.split("=", 1) for x in kv)

    def num(key, conv=float):
        try:
            return conv(a[key])
        except (KeyError, ValueError):
            return None

    return a, num


def state(inspect_json):
    cp = (load(inspect_json) or {}).get("checkpoint") or {}
    parts = cp.get("partials") or []
    if len(parts) != 1:
        return "- -1"
    return "%s %d" % (parts[0]["temp"], parts[0]["verified_len"])


def record(out_jsonl, kv):
    """KEY=VALUE: rep, cache (cold|warm), status, tree_bytes, temp_len, temp_is_prefix,
    rest_bytes, a2_secs, a2_rc, rest_secs, rest_rc, verify, and files: kill=, inspect=,
    a2_send=, a2_recv=, rest_send= (mover stdout)."""
    a, num = fields(kv)
    kill = load(a.get("kill", "")) or {}
    cp = (load(a.get("inspect", "")) or {}).get("checkpoint") or {}
    parts = cp.get("partials") or []
    a2 = summary(a.get("a2_send", ""))
    a2r = summary(a.get("a2_recv", ""))
    rest = summary(a.get("rest_send", ""))
    t2, tr = num("a2_secs"), num("rest_secs")
    rec = {
        "rep": num("rep", int), "cache": a.get("cache"), "status": a.get("status"),
        "tree_bytes": num("tree_bytes", int),
        "bytes_done_at_kill": (kill.get("event") or {}).get("bytes_done"),
        "killed": kill.get("killed"), "kill_event": kill.get("event"),
        "verified_len": parts[0]["verified_len"] if len(parts) == 1 else None,
        "temp_len": num("temp_len", int), "temp_is_source_prefix": a.get("temp_is_prefix") == "1",
        "rest_bytes": num("rest_bytes", int),
        "attempt2": {"secs": t2, "exit": a.get("a2_rc"), "summary": a2, "recv_summary": a2r},
        "fresh_rest": {"secs": tr, "exit": a.get("rest_rc"), "summary": rest},
        "ratio": (t2 / tr) if (t2 and tr and t2 > 0 and tr > 0) else None,
        "verify_ok": a.get("verify") == "ok",
    }
    with open(out_jsonl, "a") as f:
        f.write(json.dumps(rec) + "\n")
    print("%s: killed at %s, checkpoint %s, temp %s; attempt 2 %ss (exit %s, literal %s, "
          "matched %s, read by the sender %s, prefix read back by the receiver %s); fresh copy "
          "of the rest (%s B) %ss (exit %s); ratio %s" % (
              rec["cache"], rec["bytes_done_at_kill"], rec["verified_len"], rec["temp_len"], t2,
              a.get("a2_rc"), (a2 or {}).get("bytes_literal"), (a2 or {}).get("bytes_matched"),
              (a2 or {}).get("source_bytes_read"), (a2 or {}).get("prefix_bytes_read"),
              rec["rest_bytes"], tr, a.get("rest_rc"),
              "n/a" if rec["ratio"] is None else "%.2f" % rec["ratio"]))


def report(path, results, human_bytes, print_table):
    """tail.jsonl -> one table row per page-cache state, results["resume_tail"]."""
    recs = []
    try:
        recs = [json.loads(l) for l in open(path) if l.strip()]
    except (OSError, TypeError):
        pass
    results["resume_tail"] = []
    if not recs:
        return True

    def med(vals):
        vals = [v for v in vals if v is not None]
        return statistics.median(vals) if vals else None

    all_ok, table = True, []
    for cache in ("cold", "warm"):
        rs = [r for r in recs if r["cache"] == cache]
        if not rs:
            continue
        ok = all(r["status"] == "ok" for r in rs)
        all_ok &= ok
        tree = rs[0]["tree_bytes"]
        kill, ver = med([r["bytes_done_at_kill"] for r in rs]), med([r["verified_len"] for r in rs])
        t2, tr = med([r["attempt2"]["secs"] for r in rs]), med([r["fresh_rest"]["secs"] for r in rs])
        ratio = med([r["ratio"] for r in rs])
        lit = med([(r["attempt2"]["summary"] or {}).get("bytes_literal") for r in rs])
        met = ratio is not None and ratio <= TAIL_TARGET
        verdict = "FAIL" if not ok else ("met" if met else "missed")
        pct = lambda x: "n/a" if x is None or not tree else "%.1f%%" % (100.0 * x / tree)
        spread = lambda k: "%.2f-%.2f" % (min(dig(r, k) for r in rs), max(dig(r, k) for r in rs)) \
            if all(dig(r, k) is not None for r in rs) else "n/a"
        table.append([
            {"cold": "dropped", "warm": "warm"}[cache], len(rs),
            "%s (%s)" % (human_bytes(kill), pct(kill)), "%s (%s)" % (human_bytes(ver), pct(ver)),
            human_bytes(lit),
            "n/a" if t2 is None else "%.2f s (%s)" % (t2, spread(("attempt2", "secs"))),
            "n/a" if tr is None else "%.2f s (%s)" % (tr, spread(("fresh_rest", "secs"))),
            "n/a" if ratio is None else "%.2fx" % ratio,
            "<=%.1fx %s" % (TAIL_TARGET, "met" if met else "missed"), verdict])
        results["resume_tail"].append(dict(
            page_cache=cache, ok=ok, tree_bytes=tree, median_bytes_done_at_kill=kill,
            median_verified_len=ver, median_attempt2_bytes_literal=lit, median_attempt2_secs=t2,
            median_fresh_rest_secs=tr, median_ratio=ratio, target_ratio=TAIL_TARGET,
            target_met=bool(met), verdict=verdict, runs=rs))
    print()
    print("resume-tail: receiver SIGKILLed at >= 90%% of one %s file; attempt 2 vs a fresh copy "
          "of the rest (from the checkpoint's verified length; median [range])"
          % human_bytes(recs[0]["tree_bytes"]))
    print_table(["page cache", "runs", "bytes_done at kill", "checkpoint at kill",
                 "attempt 2 literal", "attempt 2 time", "fresh copy of the rest", "ratio",
                 "target", "result"], table)
    return all_ok


def dig(obj, keys):
    """obj[k1][k2]..., or None where a level is missing or not a dict."""
    for k in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(k)
    return obj
