"""The median timeline of a request's critical path, from `perf script -F
tid,time,event` over bench/stages.sh's probes and socket calls.

Usage: python3 stages_report.py STAGES_TXT

A request is found on its connection thread by its `identify` probe: it
starts at the last socket read before it (the body's last bytes) and ends
when the second write after it returns (the first sends the request on,
the second answers the client). Each event is named by its kind and how
many of its kind came before it in the request (`sys_enter_writev#2`: the
answer's write); events fewer than 80 % of the requests reach are left out.
"""

import collections
import statistics
import sys

READ_DONE = "sys_exit_recvfrom"
WRITE_START, WRITE_DONE = "sys_enter_writev", "sys_exit_writev"


def events_by_thread(path):
    threads = collections.defaultdict(list)
    for line in open(path, encoding="utf-8", errors="replace"):
        fields = line.split()
        if len(fields) < 3:
            continue
        thread, time, event = fields[0], float(fields[1].rstrip(":")), fields[2].rstrip(":")
        threads[thread].append((time, event.split(":")[-1]))
    return threads


def requests(events):
    """Each request's events as (microseconds since its body's end, name#n)."""
    for index, (_, name) in enumerate(events):
        if name != "identify":
            continue
        start = index - 1
        while start >= 0 and events[start][1] != READ_DONE:
            start -= 1
        if start < 0:
            continue
        origin, seen, writes, timeline = events[start][0], collections.Counter(), 0, []
        for time, name in events[start:]:
            if name == "identify" and timeline and seen["identify"]:
                break
            seen[name] += 1
            timeline.append(((time - origin) * 1e6, f"{name}#{seen[name]}"))
            writes += name == WRITE_DONE
            if writes == 2:
                yield timeline
                break


def main(path):
    offsets, count = collections.defaultdict(list), 0
    for events in events_by_thread(path).values():
        for timeline in requests(events):
            count += 1
            for offset, key in timeline:
                offsets[key].append(offset)
    if not count:
        sys.exit("stages: no request found (were the probes hit?)")
    rows = [(statistics.median(v), k) for k, v in offsets.items() if len(v) >= 0.8 * count]
    print(f"{count} requests; median microseconds since the body's last byte was read")
    print(f"{'at':>8} {'step':>8}  event")
    previous = 0.0
    for at, key in sorted(rows):
        print(f"{at:8.1f} {at - previous:+8.1f}  {key}")
        previous = at


if __name__ == "__main__":
    main(sys.argv[1])
