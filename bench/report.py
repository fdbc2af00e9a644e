"""Prints the benchmark table from hey's per-request CSV files.

Usage: python3 report.py RUNS_FILE CLOCK_TICKS_PER_SECOND
RUNS_FILE lines: body target rate cpu_ticks csv_path
"""

import csv
import statistics
import sys


def latencies(path):
    times, failures = [], 0
    with open(path) as f:
        for row in csv.DictReader(f):
            if row["status-code"] != "200":
                failures += 1
            times.append(float(row["response-time"]) * 1e6)
    return sorted(times), failures


def percentile(values, p):
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


def main():
    runs = [line.split() for line in open(sys.argv[1])]
    ticks = int(sys.argv[2])
    direct = {}
    print("| body | target | rate | requests | failed | p50 µs | p99 µs | p50 added | p99 added | p50 ratio | p99 ratio | CPU ms/request |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for body, target, rate, cpu, path in runs:
        times, failed = latencies(path)
        p50, p99 = percentile(times, 50), percentile(times, 99)
        if target == "direct":
            direct[body] = (p50, p99)
        d50, d99 = direct[body]
        cpu_ms = "" if target == "direct" else f"{int(cpu) * 1000 / ticks / len(times):.2f}"
        print(
            f"| {body} | {target} | {rate}/s | {len(times)} | {failed} | {p50:.0f} | {p99:.0f} "
            f"| {p50 - d50:+.0f} | {p99 - d99:+.0f} | {p50 / d50:.2f} | {p99 / d99:.2f} | {cpu_ms} |"
        )


if __name__ == "__main__":
    main()
