#!/usr/bin/env python3
"""The chat body budget under a flood of large bodies: Condenser's peak
memory, whether every request got an answer, and how long small requests
waited meanwhile.

Starts the fake upstream (windows large enough that nothing overflows) and
one Condenser on a fresh SQLite file, with its default budget
(server.max_inflight_body_bytes: a quarter of the memory over 40, never
below max_body_bytes) unless --budget is given. Then sends REQUESTS distinct
chat bodies of SIZE MiB at once (short messages, the costliest kind per
byte), and a small chat request every 100 ms until they are all answered.
A large request is answered when it is forwarded (2xx) or refused with a
503 carrying Retry-After; anything else, or no answer, is a failure.

Prints the budget, the answers, the small requests' latencies and the peak
resident size (VmHWM). Exits 1 when a request got no acceptable answer or
the peak exceeds the documented ceiling: the idle size plus 40 bytes per
byte of the budget, plus the write queue (64 MiB) and a margin of 10 %
(README.md, "Memory").

Usage: bench/body_budget.py [--condenser target/release/condenser]
                            [--upstream target/release/fake-upstream]
                            [--requests 40] [--size 30] [--budget BYTES]
Build first: cargo build --release -p condenser -p fake-upstream
"""

import argparse
import http.client
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from memory import free_port, mib, status_kib, wait_http  # noqa: E402

MODEL = "bench-model"
EXPANSION = 40
WRITE_QUEUE = 64 * 2**20
MARGIN = 1.10


def large_body(index, size):
    """A chat body of about `size` bytes of short messages, unlike any other."""
    parts, total, i = [], 0, 0
    while total < size - 200:
        role = "user" if i % 2 == 0 else "assistant"
        part = f'{{"role":"{role}","content":"r{index} m{i} ok"}}'
        parts.append(part)
        total += len(part) + 1
        i += 1
    messages = ",".join(parts)
    return (f'{{"model":"{MODEL}","max_tokens":16,"messages":'
            f'[{{"role":"system","content":"You are terse."}},{messages}]}}').encode()


def small_body(index):
    return (f'{{"model":"{MODEL}","max_tokens":16,"messages":'
            f'[{{"role":"user","content":"small request {index}"}}]}}').encode()


def post(port, payload, timeout=600):
    """(status, retry-after, seconds); status None when nothing answered.
    A refused body may be answered while it is still being sent: the
    answer is read even when sending failed, as HTTP clients do."""
    started = time.time()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        try:
            conn.request("POST", "/v1/chat/completions", body=payload, headers={
                "content-type": "application/json", "authorization": "Bearer sk-bench"})
        except OSError:
            pass
        response = conn.getresponse()
        response.read()
        return response.status, response.getheader("retry-after"), time.time() - started
    except (OSError, http.client.HTTPException):
        return None, None, time.time() - started
    finally:
        conn.close()


def metric(port, name):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/metrics")
    for line in conn.getresponse().read().decode().splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def small_requests(port, stop, results):
    index = 0
    while not stop.is_set():
        started = time.time()
        status, after, seconds = post(port, small_body(index), timeout=120)
        results.append((status, after, seconds, started))
        index += 1
        time.sleep(max(0.0, 0.1 - (time.time() - started)))


def percentile(values, share):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round((len(ordered) - 1) * share))]


def start(args, work):
    upstream_port, port = free_port(), free_port()
    upstream = subprocess.Popen(
        [os.path.abspath(args.upstream), "--listen", f"127.0.0.1:{upstream_port}", "--no-record",
         "--window", f"{MODEL}=1000000000"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    env = dict(os.environ,
               CONDENSER_LISTEN=f"127.0.0.1:{port}",
               DATABASE_URL=f"sqlite://{work}/condenser.db",
               CONDENSER_OPENAI_BASE_URL=f"http://127.0.0.1:{upstream_port}/v1",
               RUST_LOG="warn")
    if args.budget:
        env["CONDENSER__SERVER__MAX_INFLIGHT_BODY_BYTES"] = str(args.budget)
    proxy = subprocess.Popen([os.path.abspath(args.condenser), "serve"], env=env, cwd=work,
                             stdout=subprocess.DEVNULL,
                             stderr=open(f"{work}/condenser.log", "w"))
    return upstream, proxy, port


def flood(args, port):
    print(f"building {args.requests} bodies of {args.size} MiB ...", flush=True)
    payloads = [large_body(i, args.size * 2**20) for i in range(args.requests)]
    answers = [None] * len(payloads)
    stop, small = threading.Event(), []
    prober = threading.Thread(target=small_requests, args=(port, stop, small))

    def send(i):
        answers[i] = post(port, payloads[i])

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(payloads))]
    started = time.time()
    prober.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    prober.join()
    return answers, small, time.time() - started, len(payloads[0])


def report(answers, small, seconds, size):
    forwarded = sum(1 for status, _, _ in answers if status and 200 <= status < 300)
    refused = sum(1 for status, after, _ in answers if status == 503 and after)
    bad = [status for status, after, _ in answers
           if not ((status and 200 <= status < 300) or (status == 503 and after))]
    print(f"{len(answers)} bodies of {size / 2**20:.1f} MiB in {seconds:.1f} s: "
          f"{forwarded} forwarded, {refused} refused with 503 + Retry-After, "
          f"{len(bad)} without an acceptable answer {bad or ''}")
    slowest = max(s for _, _, s in answers)
    print(f"slowest large answer: {slowest:.2f} s")
    latencies = [s for _, _, s, _ in small]
    statuses = {}
    for status, _, _, _ in small:
        statuses[status] = statuses.get(status, 0) + 1
    print(f"{len(small)} small requests, statuses {statuses}: "
          f"p50 {statistics.median(latencies) * 1000:.0f} ms, "
          f"p95 {percentile(latencies, 0.95) * 1000:.0f} ms, "
          f"max {max(latencies) * 1000:.0f} ms")
    began = small[0][3]
    slow = sorted(small, key=lambda r: -r[2])[:3]
    print("slowest small requests: " + ", ".join(
        f"{s * 1000:.0f} ms at {at - began:.1f} s" for _, _, s, at in slow))
    unanswered = [status for status, _, _, _ in small if status is None]
    return not bad and not unanswered


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--condenser", default="target/release/condenser")
    parser.add_argument("--upstream", default="target/release/fake-upstream")
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--size", type=int, default=30, help="MiB per large body")
    parser.add_argument("--budget", type=int, help="server.max_inflight_body_bytes")
    args = parser.parse_args()

    work = tempfile.mkdtemp(prefix="condenser-budget-")
    upstream, proxy, port = start(args, work)
    try:
        try:
            wait_http(port)
        except RuntimeError:
            with open(f"{work}/condenser.log") as log:
                print("condenser did not start:\n" + log.read()[-2000:], file=sys.stderr)
            return 1
        post(port, small_body(-1))
        time.sleep(1)
        idle = status_kib(proxy.pid, "VmRSS")
        budget = metric(port, "condenser_inflight_body_limit_bytes")
        ceiling_kib = idle + (EXPANSION * budget + WRITE_QUEUE) * MARGIN / 1024
        print(f"budget {budget / 2**20:.0f} MiB; idle RSS {mib(idle):.0f} MiB; "
              f"ceiling {mib(ceiling_kib):.0f} MiB")
        answers, small, seconds, size = flood(args, port)
        answered = report(answers, small, seconds, size)
        peak = status_kib(proxy.pid, "VmHWM")
        within = peak <= ceiling_kib
        print(f"peak RSS {mib(peak):.0f} MiB ({(mib(peak) - mib(idle)) / (budget / 2**20):.1f} "
              f"MiB per MiB of budget): {'within' if within else 'ABOVE'} the ceiling")
        refused = metric(port, "condenser_inflight_body_refused_total")
        print(f"condenser_inflight_body_refused_total {refused:.0f}")
        return 0 if answered and within else 1
    finally:
        proxy.terminate()
        upstream.terminate()
        proxy.wait()
        upstream.wait()
        if os.environ.get("KEEP_WORK"):
            print(f"kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
