#!/usr/bin/env python3
"""Runs llama.cpp's own HTTP server in-process through the `xllamacpp` wheel.

The routes, JSON shapes and error bodies are llama.cpp's (OpenAI and
Anthropic compatible). Started and stopped by serve.sh.
"""
import argparse
import signal
import sys
import time

import xllamacpp as xlc


def main() -> int:
    args = argparse.ArgumentParser()
    args.add_argument("--model", required=True)
    args.add_argument("--port", type=int, required=True)
    args.add_argument("--ctx", type=int, required=True)
    args.add_argument("--threads", type=int, default=2)
    args.add_argument("--chat-template-file", required=True)
    a = args.parse_args()

    params = xlc.CommonParams()
    params.model.path = a.model
    params.model_alias = {"smollm2"}
    params.n_ctx = a.ctx
    params.n_parallel = 1
    params.hostnames = ["127.0.0.1"]
    params.port = a.port
    params.cpuparams.n_threads = a.threads
    params.cpuparams_batch.n_threads = a.threads
    params.ui = False
    with open(a.chat_template_file, encoding="utf-8") as template:
        params.chat_template = template.read()

    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    signal.signal(signal.SIGINT, lambda *_: stopping.append(True))
    server = xlc.Server(params)  # loads the model, serves on background threads
    print(f"listening {server.listening_address}", flush=True)
    while not stopping:
        time.sleep(0.2)
    del server
    return 0


if __name__ == "__main__":
    sys.exit(main())
