#!/usr/bin/env python3
"""A loopback Sentry envelope sink for tests: accepts POST /api/<project>/envelope/ (gzip or plain), answers
200, and appends one line per event item to a file: the event's `event_id`. Everything else (sessions) is
counted but not recorded.

Usage: envelope-sink.py EVENTS_FILE PORT_FILE
Binds 127.0.0.1 on a free port, writes the port to PORT_FILE once listening, and serves until killed.
Standard library only.
"""
import gzip
import http.server
import json
import os
import sys
import threading

if len(sys.argv) == 2 and sys.argv[1] in ("-h", "--help"):
    print(__doc__, end="")
    sys.exit(0)
if len(sys.argv) != 3:
    sys.exit("usage: envelope-sink.py EVENTS_FILE PORT_FILE (--help prints what it does)")
events_path, port_path = sys.argv[1], sys.argv[2]
lock = threading.Lock()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # TCP_NODELAY on each connection: the response head and body are separate small writes, and on a kept-alive
    # connection Nagle's algorithm holds the second until the client's delayed ACK (~40 ms), capping a
    # keep-alive client at ~25 requests/s.
    disable_nagle_algorithm = True

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        status = 200
        try:
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            lines = body.split(b"\n")
            header = json.loads(lines[0])
            pos = len(lines[0]) + 1
            ids = []
            while pos < len(body):
                end = body.index(b"\n", pos)
                item = json.loads(body[pos:end])
                pos = end + 1
                size = item["length"]
                payload = body[pos:pos + size]
                pos += size + 1
                if item["type"] == "event":
                    ids.append(json.loads(payload)["event_id"])
                    if header.get("event_id") != ids[-1]:
                        status = 400
        except Exception:  # a malformed envelope is a permanent 400: the test then misses the event
            status, ids = 400, []
        with lock, open(events_path, "a") as f:
            for i in ids:
                f.write(i + "\n")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
tmp = port_path + ".tmp"
with open(tmp, "w") as f:
    f.write(str(server.server_address[1]))
os.rename(tmp, port_path)
server.serve_forever()
