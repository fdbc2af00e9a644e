"""A local OTLP/HTTP trace sink for the benchmarks: answers every POST with
200 and an empty ExportTraceServiceResponse (zero bytes of protobuf), as a
fast collector would, and counts what it was sent.

Usage: python3 otlp_sink.py PORT COUNTS_FILE
COUNTS_FILE is rewritten after every export: "exports bytes".
"""

import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

lock = threading.Lock()
totals = {"exports": 0, "bytes": 0}


class Sink(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        with lock:
            totals["exports"] += 1
            totals["bytes"] += len(body)
            with open(sys.argv[2], "w") as f:
                f.write(f"{totals['exports']} {totals['bytes']}\n")
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Sink).serve_forever()
