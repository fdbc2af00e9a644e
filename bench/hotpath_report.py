"""Rows, checks and the report of bench/hotpath.sh.

python3 hotpath_report.py row WORKLOAD TARGET RATE PHASE REPEAT CPU_TICKS DB_BEFORE DB_AFTER LOADGEN_JSON
    prints one JSON line (DB_*: "pid:ticks ..." of the database's backends)
python3 hotpath_report.py line ROWS_JSONL
    prints the last row, short, for progress
python3 hotpath_report.py sustained ROWS_JSONL WORKLOAD TARGET RATE P99_BOUND_MS MIN_ACHIEVED
    exit 0 when the last row at that rate was sustained, 1 when it was not
    though it achieved the rate (its p99 or its errors), 3 when it fell short
python3 hotpath_report.py report ROWS_JSONL OUT_JSON CLK_TCK COMMIT P99_BOUND_MS MIN_ACHIEVED SECONDS SETTINGS
    prints the tables (markdown) and writes OUT_JSON
"""

import json
import os
import platform
import sys
import time

MAX_ERROR_SHARE = 0.001


def db_ticks(before, after):
    old = dict(item.split(":") for item in before.split())
    new = dict(item.split(":") for item in after.split())
    return sum(int(t) - int(old.get(pid, 0)) for pid, t in new.items())


def cmd_row(workload, target, rate, phase, repeat, cpu_ticks, db_before, db_after, path):
    with open(path) as f:
        result = json.load(f)
    row = {
        "workload": workload,
        "target": target,
        "offered_rate": int(rate),
        "phase": phase,
        "repeat": int(repeat),
        "cpu_ticks": int(cpu_ticks),
        "db_cpu_ticks": db_ticks(db_before, db_after) if db_after.strip() else None,
        "loadgen": result,
    }
    print(json.dumps(row))


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def lat(row, key):
    summary = row["loadgen"]["latency_us"]
    return summary[key] if summary else None


def degraded(row):
    """Answers Condenser served without storing them (x-condenser-degraded):
    a rate reached by skipping the writes is not the rate asked about."""
    return row["loadgen"].get("degraded", 0)


def is_sustained(row, p99_bound_ms, min_achieved):
    g = row["loadgen"]
    answered = g["ok"] + g["errors"]
    p99 = lat(row, "p99")
    return (
        g["achieved_rate"] >= min_achieved * row["offered_rate"]
        and g["errors"] + degraded(row) <= MAX_ERROR_SHARE * max(answered, 1)
        and p99 is not None
        and p99 <= p99_bound_ms * 1000
    )


def cmd_line(path):
    row = load(path)[-1]
    g = row["loadgen"]
    print(
        f"hotpath: {row['workload']:11} {row['target']:18} {row['offered_rate']:>6}/s {row['phase']:5} "
        f"achieved {g['achieved_rate']:>8}/s  p50 {lat(row, 'p50')} µs  p99 {lat(row, 'p99')} µs  "
        f"errors {g['errors']}  degraded {degraded(row)}  connects {g['connects']}"
    )


def cmd_sustained(path, workload, target, rate, p99_bound_ms, min_achieved):
    """The last row decides: a search step run again (MAX_CONFIRM) is
    judged by its second run."""
    for row in reversed(load(path)):
        if (row["workload"], row["target"], row["offered_rate"]) == (workload, target, int(rate)):
            if is_sustained(row, float(p99_bound_ms), float(min_achieved)):
                sys.exit(0)
            sys.exit(1 if row["loadgen"]["achieved_rate"] >= float(min_achieved) * row["offered_rate"] else 3)
    sys.exit(2)


def key(row):
    """A row's place: the added latency of a row is taken against direct's
    row of the same key (rows from before REPEATS count as repeat 1)."""
    return row["workload"], row["offered_rate"], row["phase"], row.get("repeat", 1)


def enrich(rows, ticks_per_second, p99_bound_ms, min_achieved):
    direct = {}
    for row in rows:
        if row["target"] == "direct":
            direct.setdefault(key(row), row)
    for row in rows:
        g = row["loadgen"]
        served = max(g["ok"] + g["status_errors"], 1)
        row["p50_us"], row["p99_us"], row["max_us"] = lat(row, "p50"), lat(row, "p99"), lat(row, "max")
        row["achieved_rate"] = g["achieved_rate"]
        row["errors"] = g["errors"]
        row["degraded"] = degraded(row)
        row["requests"] = g["ok"] + g["errors"]
        row["cpu_ms_per_request"] = round(row["cpu_ticks"] * 1000 / ticks_per_second / served, 3)
        loadgen_ms = g.get("loadgen_cpu_ms")
        row["loadgen_cpu_ms_per_request"] = None if loadgen_ms is None else round(loadgen_ms / served, 3)
        row["db_cpu_ms_per_request"] = (
            None
            if row["db_cpu_ticks"] is None
            else round(row["db_cpu_ticks"] * 1000 / ticks_per_second / served, 3)
        )
        row["sustained"] = is_sustained(row, p99_bound_ms, min_achieved)
        # Read from direct's own load generator output: its row may come
        # later in the list (targets take turns), not yet enriched.
        base = direct.get(key(row))
        base_p50, base_p99 = (lat(base, "p50"), lat(base, "p99")) if base else (None, None)
        if row["target"] != "direct" and row["p50_us"] is not None and base_p50 is not None:
            row["added_p50_us"] = row["p50_us"] - base_p50
            row["added_p99_us"] = row["p99_us"] - base_p99
        else:
            row["added_p50_us"] = row["added_p99_us"] = None
    return rows


def cpu_budget(best, maxima, cores):
    """Whether 80 % of nginx's maximum fits in the machine's cores at all
    when every message is stored in this Postgres: the load generator, the
    upstream and Postgres run on the same cores as the proxy. Each figure
    is taken at its target's maximum (`best`: target -> row), not measured
    at the goal rate. Prints a table and returns it, or prints why not and
    returns None."""
    nginx, direct, condenser = (best.get(t) for t in ("nginx", "direct", "condenser-postgres"))
    missing = [t for t, row in (("nginx", nginx), ("direct", direct), ("condenser-postgres", condenser)) if not row]
    if missing:
        print(f"\n(No CPU budget: no sustained rate for {', '.join(missing)}.)")
        return None
    if nginx["loadgen_cpu_ms_per_request"] is None or not condenser["db_cpu_ms_per_request"]:
        print("\n(No CPU budget: the load generator's or Postgres' CPU was not measured, or nothing was stored.)")
        return None
    goal = round(0.8 * nginx["offered_rate"])
    others = {
        "load generator": nginx["loadgen_cpu_ms_per_request"],
        "upstream": direct["cpu_ms_per_request"],
        "Postgres (client backends)": condenser["db_cpu_ms_per_request"],
    }
    proxies = {"nginx": nginx["cpu_ms_per_request"], "Condenser": condenser["cpu_ms_per_request"]}
    fixed = sum(others.values())
    budget = {
        "cores": cores,
        "goal_rate": goal,
        "nginx_at_cap": maxima["nginx"]["first_not_sustained_rate"] is None,
        "rates": {"nginx": nginx["offered_rate"], "direct": direct["offered_rate"], "condenser-postgres": condenser["offered_rate"]},
        "others_ms_per_request": others,
        "proxies_ms_per_request": proxies,
        "ceiling_with_a_free_proxy": round(cores * 1000 / fixed),
        "ceiling_with_a_proxy_as_cheap_as_nginx": round(cores * 1000 / (fixed + proxies["nginx"])),
    }
    at_cap = " (nginx reached the run's MAX_RATE_CAP: its maximum is at least that)" if budget["nginx_at_cap"] else ""
    print(
        f"\nCPU budget at 80 % of nginx's maximum, {goal:,} req/s{at_cap}: {cores} cores are "
        f"{cores} CPU-seconds a second for every process of the run. Each figure is from its "
        f"target's maximum row, not measured at {goal:,} req/s: the load generator and nginx at "
        f"{nginx['offered_rate']:,}, the upstream at {direct['offered_rate']:,}, Postgres and Condenser "
        f"at {condenser['offered_rate']:,}.\n"
    )
    print(f"| part | CPU ms/req | CPU-s/s at {goal:,} req/s |")
    print("|---|---|---|")
    for name, ms in others.items():
        print(f"| {name} | {ms:.3f} | {goal * ms / 1000:.2f} |")
    print(f"| **all but the proxy** | {fixed:.3f} | **{goal * fixed / 1000:.2f}** |")
    for name, ms in proxies.items():
        print(f"| proxy: {name} | {ms:.3f} | {goal * ms / 1000:.2f} |")
    print(
        f"\nAt these costs, the most the cores allow with every message stored in this Postgres: "
        f"{budget['ceiling_with_a_free_proxy']:,} req/s with a proxy that cost no CPU, "
        f"{budget['ceiling_with_a_proxy_as_cheap_as_nginx']:,} req/s with one as cheap as nginx."
    )
    return budget


def fmt(value, signed=False):
    if value is None:
        return ""
    return f"{value:+,}" if signed else f"{value:,}"


def cmd_report(path, out, clk_tck, commit, p99_bound_ms, min_achieved, seconds, settings):
    p99_bound_ms, min_achieved = float(p99_bound_ms), float(min_achieved)
    rows = enrich(load(path), int(clk_tck), p99_bound_ms, min_achieved)
    targets = []
    for row in rows:
        if row["target"] not in targets:
            targets.append(row["target"])
    workloads = []
    for row in rows:
        if row["workload"] not in workloads:
            workloads.append(row["workload"])
    maxima, budgets = {}, {}
    cores = len(os.sched_getaffinity(0))
    for workload in workloads:
        print(f"\n### {workload}\n")
        sample = next(r for r in rows if r["workload"] == workload)["loadgen"]["body_bytes"]
        print(
            f"Bodies: {sample['min'] / 1000:.1f}–{sample['max'] / 1000:.1f} KB, "
            f"mean {sample['mean'] / 1000:.1f} KB (first row).\n"
        )
        print(
            "| target | offered/s | achieved/s | p50 µs | p99 µs | added p50 | added p99 "
            "| CPU ms/req | DB CPU ms/req | errors | unstored |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        fixed = [r for r in rows if r["workload"] == workload and r["phase"] == "fixed"]
        fixed.sort(key=lambda r: (r["offered_rate"], targets.index(r["target"]), r.get("repeat", 1)))
        repeated = any(r.get("repeat", 1) > 1 for r in fixed)
        for r in fixed:
            label = f"{r['target']} ({r['repeat']})" if repeated else r["target"]
            print(
                f"| {label} | {r['offered_rate']:,} | {r['achieved_rate']:,.0f} | {fmt(r['p50_us'])} "
                f"| {fmt(r['p99_us'])} | {fmt(r['added_p50_us'], True)} | {fmt(r['added_p99_us'], True)} "
                f"| {r['cpu_ms_per_request']:.3f} | {fmt(r['db_cpu_ms_per_request'])} | {r['errors']} "
                f"| {r['degraded']} |"
            )
        tried = [r for r in rows if r["workload"] == workload]
        if any(r["phase"] == "max" for r in tried):
            print(
                f"\nMaximum sustained rate (achieved ≥ {min_achieved:.0%} of offered, "
                f"errors and answers served without storing (`x-condenser-degraded`) ≤ {MAX_ERROR_SHARE:.1%}, "
                f"p99 ≤ {p99_bound_ms:g} ms; highest offered rate tried that met all three):\n"
            )
            print("| target | max sustained/s | first not sustained/s | p50 µs | p99 µs | CPU ms/req | DB CPU ms/req |")
            print("|---|---|---|---|---|---|---|")
            best_rows = {}
            for target in targets:
                mine = sorted((r for r in tried if r["target"] == target), key=lambda r: r["offered_rate"])
                good = [r for r in mine if r["sustained"]]
                bad = [r for r in mine if not r["sustained"] and (not good or r["offered_rate"] > good[-1]["offered_rate"])]
                best = good[-1] if good else None
                if best:
                    best_rows[target] = best
                first_bad = bad[0]["offered_rate"] if bad else None
                maxima.setdefault(workload, {})[target] = {
                    "max_sustained_rate": best["offered_rate"] if best else 0,
                    "first_not_sustained_rate": first_bad,
                }
                if best:
                    print(
                        f"| {target} | {best['offered_rate']:,} | {fmt(first_bad) or '(cap)'} | {fmt(best['p50_us'])} "
                        f"| {fmt(best['p99_us'])} | {best['cpu_ms_per_request']:.3f} | {fmt(best['db_cpu_ms_per_request'])} |"
                    )
                else:
                    print(f"| {target} | < {mine[0]['offered_rate']:,} | {fmt(first_bad)} | | | | |")
            budget = cpu_budget(best_rows, maxima[workload], cores)
            if budget:
                budgets[workload] = budget
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        cpu = ""
    result = {
        "benchmark": "bench/hotpath.sh",
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "commit": commit,
        "settings": settings,
        "run_seconds": int(seconds),
        "machine": {"cpus": os.cpu_count(), "cpu": cpu, "kernel": platform.release()},
        "sustained": {"min_achieved_share": min_achieved, "max_error_share": MAX_ERROR_SHARE, "p99_bound_ms": p99_bound_ms},
        "rows": rows,
        "max_sustained": maxima,
        "cpu_budget": budgets,
    }
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"\nCommit {commit}; {settings}; run took {int(seconds)} s.")


def main():
    command, args = sys.argv[1], sys.argv[2:]
    {"row": cmd_row, "line": cmd_line, "sustained": cmd_sustained, "report": cmd_report}[command](*args)


if __name__ == "__main__":
    main()
