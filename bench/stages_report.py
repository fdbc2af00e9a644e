"""The median timeline of a request's critical path, from `perf script -F
tid,time,event,ip,sym` over bench/stages.sh's probes and socket calls.

Usage: python3 stages_report.py STAGES_TXT

A request is found on its connection thread by its `identify` probe: it
starts at the last socket read before it (the body's last bytes) and ends
when the second write after it returns (the first sends the request on,
the second answers the client). Each event is named by its kind and how
many of its kind came before it in the request (`sys_enter_writev#2`: the
answer's write); events fewer than 80 % of the requests reach are left out.
A body leased before its last read (one that came in several reads) shows
its lease before that read, at a negative time: the body's read.

Where the recording holds CPU samples (`cpu-clock`, stages.sh's
SAMPLE_HZ), three phases are broken down by the function each sample
ran: the body's read, from its lease (`body_lease`) to its last read; the
step after it, from that read to the upstream write; and the answer, from
the read that took the upstream's answer to the client's write.
"""

import collections
import statistics
import sys

READ_DONE = "sys_exit_recvfrom"
WRITE_START, WRITE_DONE = "sys_enter_writev", "sys_exit_writev"
SAMPLE = "cpu-clock"
LEASE = "body_lease"
SHOWN = 8


def events_by_thread(path):
    """Each thread's events in order, as (time, name, function sampled)."""
    threads = collections.defaultdict(list)
    for line in open(path, encoding="utf-8", errors="replace"):
        fields = line.split()
        if len(fields) < 3:
            continue
        thread, time, event = fields[0], float(fields[1].rstrip(":")), fields[2].rstrip(":")
        name = event.split(":")[-1]
        function = " ".join(fields[4:]) if name == SAMPLE else ""
        threads[thread].append((time, name, function))
    return threads


def requests(events):
    """Each request as its timeline, (microseconds since its body's end,
    name#n), and its samples by phase."""
    for index, (_, name, _) in enumerate(events):
        if name != "identify":
            continue
        start = index - 1
        while start >= 0 and events[start][1] != READ_DONE:
            start -= 1
        if start < 0:
            continue
        origin, seen, writes, timeline = events[start][0], collections.Counter(), 0, []
        samples = {"read": read_samples(events, start), "after": [], "answer": []}
        lease = lease_time(events, start)
        for time, name, function in events[start:]:
            if name == SAMPLE:
                phase = sample_phase(seen)
                if phase:
                    samples[phase].append(function)
                continue
            if name == "identify" and timeline and seen["identify"]:
                break
            seen[name] += 1
            timeline.append(((time - origin) * 1e6, f"{name}#{seen[name]}"))
            writes += name == WRITE_DONE
            if writes == 2:
                if lease is not None:
                    timeline.append(((lease - origin) * 1e6, f"{LEASE}#1"))
                yield timeline, samples
                break


def sample_phase(seen):
    """The phase a sample falls in, by the events seen before it: up to the
    upstream write, or from the upstream's answer (the first read after
    that write) to the client's write."""
    if not seen[WRITE_START]:
        return "after"
    if seen[WRITE_DONE] == 1 and seen[READ_DONE] >= 2 and seen[WRITE_START] == 1:
        return "answer"
    return None


def lease_time(events, last_read):
    """When the request's body was leased, if that was after the answer
    before it: the start of the body's read."""
    for time, name, _ in reversed(events[:last_read]):
        if name == LEASE:
            return time
        if name == WRITE_DONE:
            return None
    return None


def read_samples(events, last_read):
    """The functions sampled from the request's lease to its last read."""
    functions = []
    for time, name, function in reversed(events[:last_read]):
        if name == LEASE or name == WRITE_DONE:
            return functions if name == LEASE else []
        if name == SAMPLE:
            functions.append(function)
    return []


def print_phase(title, functions, count):
    if not functions:
        return
    shares = collections.Counter(functions)
    print(f"\n{title}: {len(functions) / count:.1f} samples a request")
    for function, samples in shares.most_common(SHOWN):
        print(f"{100 * samples / len(functions):7.1f} %  {function[:100]}")


def main(path):
    offsets, count = collections.defaultdict(list), 0
    phases = {"read": [], "after": [], "answer": []}
    for events in events_by_thread(path).values():
        for timeline, samples in requests(events):
            count += 1
            for offset, key in timeline:
                offsets[key].append(offset)
            for phase, functions in samples.items():
                phases[phase].extend(functions)
    if not count:
        sys.exit("stages: no request found (were the probes hit?)")
    rows = [(statistics.median(v), k) for k, v in offsets.items() if len(v) >= 0.8 * count]
    print(f"{count} requests; median microseconds since the body's last byte was read")
    print(f"{'at':>8} {'step':>8}  event")
    rows.sort()
    previous = min(0.0, rows[0][0])
    for at, key in rows:
        print(f"{at:8.1f} {at - previous:+8.1f}  {key}")
        previous = at
    print_phase("the body's read (lease to last read)", phases["read"], count)
    print_phase("after the last read (to the upstream write)", phases["after"], count)
    print_phase("the answer (the upstream's read to the client's write)", phases["answer"], count)


if __name__ == "__main__":
    main(sys.argv[1])
