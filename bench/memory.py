#!/usr/bin/env python3
"""Memory under large bodies: Condenser's resident size before, during and
after a burst of large chat requests.

Starts the fake upstream (windows large enough that nothing overflows) and
one Condenser on a fresh SQLite file, measures the idle RSS after one small
request, sends REQUESTS distinct bodies of MESSAGES short messages each
(100,000 messages make 4.3 MB), CONCURRENCY at a time, and samples RSS
until it settles. Exits 1 when RSS 5 s after the burst exceeds LIMIT times
the idle size (default 6: the bound README.md documents; 2 holds with
MIMALLOC_PURGE_DELAY=0).

Usage: bench/memory.py [--condenser target/release/condenser]
                       [--upstream target/release/fake-upstream]
                       [--requests 12] [--concurrency 4] [--messages 100000]
                       [--limit 6.0] [--bursts 1]
Build first: cargo build --release -p condenser -p fake-upstream
"""

import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def status_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} missing")


def mib(kib):
    return kib / 1024


def wait_http(port, path="/healthz", seconds=30):
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", path)
            if conn.getresponse().status == 200:
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing answered on port {port}")


def body(index, messages):
    history = [{"role": "system", "content": "You are a terse assistant."}]
    for i in range(messages):
        role = "user" if i % 2 == 0 else "assistant"
        history.append({"role": role, "content": f"r{index} m{i} ok"})
    request = {"model": "bench-model", "messages": history, "max_tokens": 16}
    return json.dumps(request).encode()


def post(port, payload, errors):
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        conn.request(
            "POST",
            "/v1/chat/completions",
            body=payload,
            headers={"content-type": "application/json", "authorization": "Bearer sk-bench"},
        )
        response = conn.getresponse()
        response.read()
        if response.status != 200:
            errors.append(response.status)
    except OSError as error:
        errors.append(str(error))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--condenser", default="target/release/condenser")
    parser.add_argument("--upstream", default="target/release/fake-upstream")
    parser.add_argument("--requests", type=int, default=12)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--limit", type=float, default=6.0)
    parser.add_argument("--bursts", type=int, default=1,
                        help="repeat the burst: a leak grows with each, retention does not")
    args = parser.parse_args()

    work = tempfile.mkdtemp(prefix="condenser-memory-")
    upstream_port, port = free_port(), free_port()
    upstream = subprocess.Popen(
        [args.upstream, "--listen", f"127.0.0.1:{upstream_port}", "--no-record",
         "--window", "bench-model=100000000"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    env = dict(os.environ,
               CONDENSER_LISTEN=f"127.0.0.1:{port}",
               DATABASE_URL=f"sqlite://{work}/condenser.db",
               CONDENSER_OPENAI_BASE_URL=f"http://127.0.0.1:{upstream_port}/v1",
               RUST_LOG="warn")
    proxy = subprocess.Popen([args.condenser, "serve"], env=env, cwd=work,
                             stdout=subprocess.DEVNULL, stderr=open(f"{work}/condenser.log", "w"))
    try:
        wait_http(port)
        errors = []
        post(port, body(-1, 2), errors)
        time.sleep(1)
        idle = status_kib(proxy.pid, "VmRSS")
        for burst_index in range(args.bursts):
            payloads = [body(burst_index * args.requests + i, args.messages)
                        for i in range(args.requests)]
            size = len(payloads[0])
            started = time.time()
            for wave in range(0, args.requests, args.concurrency):
                threads = [threading.Thread(target=post, args=(port, p, errors))
                           for p in payloads[wave:wave + args.concurrency]]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
            burst = time.time() - started
            peak = status_kib(proxy.pid, "VmHWM")
            samples = {}
            for after in (0, 1, 5, 10, 30):
                while time.time() < started + burst + after:
                    time.sleep(0.05)
                samples[after] = status_kib(proxy.pid, "VmRSS")
            print(f"burst {burst_index + 1}: body {size / 1e6:.1f} MB ({args.messages} messages), "
                  f"{args.requests} requests, {args.concurrency} at a time, {burst:.1f} s, errors: {errors or 'none'}")
            print(f"idle RSS: {mib(idle):.0f} MiB")
            print(f"peak RSS: {mib(peak):.0f} MiB, "
                  f"{(mib(peak) - mib(idle)) / (args.concurrency * size / 2**20):.1f} MiB per MiB of body in flight")
            for after, rss in samples.items():
                print(f"RSS {after:>2} s after the burst: {mib(rss):.0f} MiB ({rss / idle:.2f}x idle)")
        within = samples[5] <= args.limit * idle
        print(f"RSS 5 s after {'within' if within else 'ABOVE'} {args.limit}x idle")
        return 0 if within and not errors else 1
    finally:
        proxy.terminate()
        upstream.terminate()
        proxy.wait()
        upstream.wait()


if __name__ == "__main__":
    sys.exit(main())
