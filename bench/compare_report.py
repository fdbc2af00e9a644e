"""Summary of bench/compare.sh: per round and backend, what each build adds
over a direct connection to the same upstream, and baseline : this build.

python3 compare_report.py ROUND_JSON...   (bench/hotpath.sh results files)

Bounds (issue 43): small body added p50 at the fixed rate within +20 µs of
the baseline's, added p99 within 1.2x, maximum sustained rate at least 95 %
of the baseline's, the history's added p50 within 1.1x. A bound missed by
less than the run's noise (direct's own p50 spread, hey/loadgen's 1 µs
resolution aside) is printed as missed all the same: read the rows.

With REPEATS, a fixed-rate row ran several times in a round, each time
right after direct's; every figure here is the median over the repeats of
that repeat's figure (a build's added p50 is its p50 less direct's in the
same repeat), so one stall in one row does not decide a bound.
"""

import json
import re
import statistics
import sys


def rows_of(result):
    return result["rows"]


def median_of(rows, field):
    values = [row[field] for row in rows if row[field] is not None]
    return None if not values else round(statistics.median(values), 3)


def find(rows, workload, target, phase="fixed"):
    """The fixed rows of one target, as one row of medians over repeats."""
    mine = [row for row in rows if (row["workload"], row["target"], row["phase"]) == (workload, target, phase)]
    if not mine:
        return None
    fields = ("added_p50_us", "added_p99_us", "cpu_ms_per_request", "p50_us")
    merged = {field: median_of(mine, field) for field in fields}
    merged["offered_rate"], merged["repeats"] = mine[0]["offered_rate"], len(mine)
    return merged


def ratio(this, base):
    if this is None or base is None:
        return None
    if base <= 0:
        return None
    return this / base


def fmt_us(value):
    return "" if value is None else f"{value:+,}"


def fmt_ratio(value):
    return "n/a" if value is None else f"{value:.2f}x"


def verdict(ok):
    return "ok" if ok else "MISSED"


def main(paths):
    print("| round | backend | measure | baseline | this build | this − baseline / this ÷ baseline | bound |")
    print("|---|---|---|---|---|---|---|")
    missed = 0
    for number, path in enumerate(paths, 1):
        with open(path) as f:
            result = json.load(f)
        rows = rows_of(result)
        backends = sorted({r["target"].split("-", 1)[1] for r in rows if r["target"].startswith("baseline-")})
        for backend in backends:
            this, base = f"condenser-{backend}", f"baseline-{backend}"
            small_this, small_base = find(rows, "identical", this), find(rows, "identical", base)
            if small_this and small_base:
                rate = small_this["offered_rate"]
                a, b = small_this["added_p50_us"], small_base["added_p50_us"]
                ok = a is not None and b is not None and a - b <= 20
                missed += not ok
                print(f"| {number} | {backend} | small, added p50 at {rate:,}/s | {fmt_us(b)} µs | {fmt_us(a)} µs "
                      f"| {fmt_us(None if a is None or b is None else a - b)} µs | ≤ +20 µs: {verdict(ok)} |")
                a, b = small_this["added_p99_us"], small_base["added_p99_us"]
                # A p99 at or below direct's is as good as it gets: no ratio.
                r = ratio(max(a, 0), max(b, 1)) if a is not None and b is not None else None
                ok = r is not None and (r <= 1.2 or a <= 0)
                missed += not ok
                print(f"| {number} | {backend} | small, added p99 at {rate:,}/s | {fmt_us(b)} µs | {fmt_us(a)} µs "
                      f"| {fmt_ratio(r)} | ≤ 1.2x: {verdict(ok)} |")
            maxima = result.get("max_sustained", {}).get("identical", {})
            if this in maxima and base in maxima:
                a, b = maxima[this]["max_sustained_rate"], maxima[base]["max_sustained_rate"]
                r = ratio(a, b)
                ok = r is not None and r >= 0.95
                missed += not ok
                print(f"| {number} | {backend} | small, maximum sustained | {b:,}/s | {a:,}/s | {fmt_ratio(r)} "
                      f"| ≥ 0.95x: {verdict(ok)} |")
            hist_this, hist_base = find(rows, "history", this), find(rows, "history", base)
            if hist_this and hist_base:
                a, b = hist_this["added_p50_us"], hist_base["added_p50_us"]
                r = ratio(a, b) if a is not None and b is not None and b > 0 else None
                ok = r is not None and r <= 1.1 or (a is not None and b is not None and a <= b)
                missed += not ok
                rate = hist_this["offered_rate"]
                print(f"| {number} | {backend} | history, added p50 at {rate}/s | {fmt_us(b)} µs | {fmt_us(a)} µs "
                      f"| {fmt_ratio(r)} | ≤ 1.1x: {verdict(ok)} |")
            for workload in ("identical", "history"):
                a, b = find(rows, workload, this), find(rows, workload, base)
                if a and b:
                    print(f"| {number} | {backend} | {workload}, CPU ms/request | {b['cpu_ms_per_request']:.3f} "
                          f"| {a['cpu_ms_per_request']:.3f} | {fmt_ratio(ratio(a['cpu_ms_per_request'], b['cpu_ms_per_request']))} | |")
        direct = [find(rows, w, "direct") for w in ("identical", "history")]
        spread = ", ".join(
            f"{w} p50 {d['p50_us']:,.0f} µs ({d['repeats']} run{'s' if d['repeats'] > 1 else ''}, median)"
            for w, d in zip(("small", "history"), direct)
            if d
        )
        print(f"| {number} | | direct (the reference) | | | {spread} | |")
        print(f"| {number} | | settings | | | {result['settings']} | |")
    print(f"\n{missed} bound(s) missed.")
    against_nginx(paths)


# Issue 54: this build against nginx as a plain reverse proxy, in the
# same run: its maximum at least this share of nginx's, its added p50 at
# the fixed rate at most +150 µs, the history's at most 1 ms.
NGINX_SHARE = {"sqlite": 0.50, "postgres": 0.45}


def against_nginx(paths):
    lines = []
    for number, path in enumerate(paths, 1):
        with open(path) as f:
            result = json.load(f)
        rows = rows_of(result)
        maxima = result.get("max_sustained", {}).get("identical", {})
        if not find(rows, "identical", "nginx"):
            continue
        floor = maxima.get("nginx", {}).get("max_sustained_rate")
        cap = re.search(r"MAX_RATE_CAP=(\d+)", result["settings"])
        cap = int(cap.group(1)) if cap else None
        for target in ["nginx"] + sorted(t for t in maxima if t.startswith("condenser-")):
            backend = target.split("-", 1)[-1]
            small, history = find(rows, "identical", target), find(rows, "history", target)
            rate = maxima.get(target, {}).get("max_sustained_rate")
            share = ratio(rate, floor) if target != "nginx" else None
            cells = [
                f"{fmt_us(small and small['added_p50_us'])} µs",
                f"{fmt_us(history and history['added_p50_us'])} µs",
                f"{rate:,}/s" if rate else "n/a",
                "" if share is None else f"{share:.0%}",
            ]
            if target == "nginx":
                verdicts = "the floor" + (f" (the search's cap {cap:,}/s)" if cap and rate == cap else "")
            else:
                small_ok = small and small["added_p50_us"] is not None and small["added_p50_us"] <= 150
                history_ok = history and history["added_p50_us"] is not None and history["added_p50_us"] <= 1000
                share_ok = share is not None and share >= NGINX_SHARE.get(backend, 0.5)
                verdicts = (f"p50 ≤ +150 µs: {verdict(small_ok)}; history ≤ +1 ms: {verdict(history_ok)}; "
                            f"≥ {NGINX_SHARE.get(backend, 0.5):.0%} of nginx: {verdict(share_ok)}")
            lines.append(f"| {number} | {target} | " + " | ".join(cells) + f" | {verdicts} |")
    if lines:
        print("\nAgainst nginx as a plain reverse proxy, same run (issue 54's bounds):\n")
        print("| round | target | small, added p50 | history, added p50 | maximum sustained | of nginx's | bounds |")
        print("|---|---|---|---|---|---|---|")
        print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1:])
