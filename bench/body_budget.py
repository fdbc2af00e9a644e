#!/usr/bin/env python3
"""The chat body budget under a flood of large bodies: Condenser's peak
memory, whether every request got an answer, and how long small requests
waited meanwhile.

Starts the fake upstream (windows large enough that nothing overflows) and
one Condenser on a fresh SQLite file, with its default budget
(server.max_inflight_body_bytes: a quarter of the memory over 20, never
below max_body_bytes) unless --budget is given. Then sends REQUESTS distinct
chat bodies of SIZE MiB at once (--shape: short messages, the costliest
kind per byte; one huge tool result; a base64 image), and a small chat
request every 100 ms until they are all answered.
A large request is answered when it is forwarded (2xx) or refused with a
503 carrying Retry-After; anything else, or no answer, is a failure.

Prints the budget, the answers, the small requests' latencies and the peak
resident size (VmHWM). Exits 1 when a request got no acceptable answer or
the peak exceeds the documented ceiling: the idle size plus 20 bytes per
unit of the budget's weight, plus the write queue (64 MiB) and a margin
of 10 % (docs/operating.md, "Memory"). Also prints the largest weight in
flight, whether the peak stayed under the documented share of memory (a
quarter) and, with --measure (a budget that admits every body), the
resident bytes per body byte in flight: the figures the costs of
src/http/weight.rs are derived from. --hold has the upstream wait before
answering, so that every body let in is in flight at once.

Usage: bench/body_budget.py [--condenser target/release/condenser]
                            [--upstream target/release/fake-upstream]
                            [--requests 40] [--size 30] [--budget BYTES]
                            [--shape messages|tool|image|agent] [--hold SECONDS]
                            [--measure]
Build first: cargo build --release -p condenser -p fake-upstream
"""

import argparse
import base64
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_bodies  # noqa: E402
from memory import free_port, mib, status_kib, wait_http  # noqa: E402

MODEL = "bench-model"
EXPANSION = 20  # src/config/server.rs BODY_EXPANSION
SHARE = 4
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


def tool_body(index, size):
    """One huge tool result (a file read back whole) in a short agent turn."""
    line = f"    let value_{index} = compute(input, {index}); // a line of the file read back\n"
    text = (line * (size // len(line) + 1))[: max(size - 600, 0)]
    messages = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": f"Read src/big_{index}.rs and summarize it."},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": f"call_{index}", "type": "function",
            "function": {"name": "read_file", "arguments": json.dumps({"path": f"src/big_{index}.rs"})}}]},
        {"role": "tool", "tool_call_id": f"call_{index}", "content": text},
    ]
    return json.dumps({"model": MODEL, "max_tokens": 16, "messages": messages}).encode()


def image_body(index, size):
    """One user message carrying a base64 image (a data URL) and a question."""
    raw = (bytes(range(256)) * (size // 256 + 1))[: max(size - 400, 0) * 3 // 4]
    data = base64.b64encode(bytes([index % 256]) + raw).decode()
    messages = [
        {"role": "system", "content": "You describe images."},
        {"role": "user", "content": [
            {"type": "text", "text": f"What is in image {index}?"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}}]},
    ]
    return json.dumps({"model": MODEL, "max_tokens": 16, "messages": messages}).encode()


def agent_body(index, size):
    """A coding agent's history (bench/make_bodies.py: turns of a user
    request, a tool call, a 15.5 KB file read back and a short answer),
    as many turns as fill `size`."""
    body = make_bodies.history(target_messages=max(8, size // 4000))
    body["model"] = MODEL
    body["messages"][0]["content"] = f"Session {index}. " + body["messages"][0]["content"]
    return json.dumps(body).encode()


SHAPES = {"messages": large_body, "tool": tool_body, "image": image_body, "agent": agent_body}


def small_body(index):
    return (f'{{"model":"{MODEL}","max_tokens":16,"messages":'
            f'[{{"role":"user","content":"small request {index}"}}]}}').encode()


def memory_available():
    """As Condenser reads it: the cgroup's limit, else MemTotal."""
    limit = None
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                value = int(f.read().strip())
            if value < 1 << 60:
                limit = value
                break
        except (OSError, ValueError):
            pass
    with open("/proc/meminfo") as f:
        total = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemTotal:"))
    return min(limit, total) if limit else total


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


def sample_weight(port, stop, peak):
    """The largest weight in flight seen (condenser_inflight_body_bytes)."""
    while not stop.is_set():
        try:
            peak[0] = max(peak[0], metric(port, "condenser_inflight_body_bytes"))
        except (OSError, http.client.HTTPException):
            pass
        time.sleep(0.05)


def percentile(values, share):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round((len(ordered) - 1) * share))]


def start(args, work):
    upstream_port, port = free_port(), free_port()
    upstream = subprocess.Popen(
        [os.path.abspath(args.upstream), "--listen", f"127.0.0.1:{upstream_port}", "--no-record",
         "--window", f"{MODEL}=1000000000", "--first-byte-delay-ms", str(int(args.hold * 1000))],
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
    print(f"building {args.requests} bodies of {args.size} MiB, shape {args.shape} ...", flush=True)
    make = SHAPES[args.shape]
    payloads = [make(i, int(args.size * 2**20)) for i in range(args.requests)]
    answers = [None] * len(payloads)
    stop, small, weight = threading.Event(), [], [0.0]
    prober = threading.Thread(target=small_requests, args=(port, stop, small))
    sampler = threading.Thread(target=sample_weight, args=(port, stop, weight))

    def send(i):
        answers[i] = post(port, payloads[i])

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(payloads))]
    started = time.time()
    prober.start()
    sampler.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    prober.join()
    sampler.join()
    print(f"largest weight in flight: {weight[0] / 2**20:.1f} MiB")
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
    parser.add_argument("--size", type=float, default=30, help="MiB per large body")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="messages",
                        help="messages: short messages (the costliest per byte); tool: one huge "
                             "tool result; image: one base64 image; agent: a coding agent's history")
    parser.add_argument("--budget", type=int, help="server.max_inflight_body_bytes")
    parser.add_argument("--hold", type=float, default=0,
                        help="seconds the upstream waits before answering: every body let in "
                             "is in flight at once when they arrive within it")
    parser.add_argument("--measure", action="store_true",
                        help="a budget that admits every body: print resident bytes per body byte")
    args = parser.parse_args()
    if args.measure and not args.budget:
        # Every body fits: peak over idle, per byte of body, is the figure.
        # Weighed, a body of bytes a value each (short messages are one a
        # dozen) is at most 6 times its size: room for every shape.
        args.budget = max(int(args.requests * (args.size + 0.1) * 2**20 * 6), 32 * 2**20)

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
        share = memory_available() / SHARE
        print(f"documented share (memory / {SHARE}): {share / 2**20:,.0f} MiB: peak "
              f"{'under' if peak * 1024 <= share else 'ABOVE'} it")
        forwarded = sum(1 for status, _, _ in answers if status and 200 <= status < 300)
        if forwarded:
            per_byte = (peak - idle) * 1024 / (forwarded * size)
            print(f"resident bytes per body byte in flight ({args.shape}, {forwarded} bodies of "
                  f"{size / 2**20:.2f} MiB forwarded): {per_byte:.1f}")
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
