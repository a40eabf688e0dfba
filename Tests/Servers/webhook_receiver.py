#!/usr/bin/env python3
"""A webhook receiver for the `serve --webhook` tests, written as a receiver's own code would be
(standard library only): it checks each request's signature as docs/serve.md tells receivers to.

    WEBHOOK_SECRET=... python3 webhook_receiver.py --port P|0 [--port-file FILE] --log FILE \
        [--fail-first N] [--redirect URL] [--max-seconds S]

Binds 127.0.0.1. Every POST is appended to --log as one JSON line:
    {"id", "type", "video", "status", "signature_ok", "answered", "time", "event_id_header"}
where signature_ok says the `ClipFlow-Signature` header (t=UNIX,v1=HEX) is the HMAC-SHA256 of
"UNIX." + body under the secret, with UNIX within five minutes of now. It answers 500 to its first
--fail-first requests, 307 to --redirect when given, else 204. The log outlives a restart.
"""

import argparse
import hashlib
import hmac
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from lifetime import watchdog, write_port


def signature_ok(secret, header, body, now):
    fields = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    try:
        timestamp = int(fields["t"])
    except (KeyError, ValueError):
        return False
    expected = hmac.new(secret, f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, fields.get("v1", "")) and abs(now - timestamp) < 300


class Handler(BaseHTTPRequestHandler):
    lock = threading.Lock()
    args = None
    secret = b""
    answered = 0

    def log_message(self, *a):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        with Handler.lock:
            Handler.answered += 1
            if Handler.answered <= self.args.fail_first:
                status = 500
            elif self.args.redirect:
                status = 307
            else:
                status = 204
            try:
                event = json.loads(body)
            except ValueError:
                event = {}
            line = {
                "id": event.get("id"), "type": event.get("type"), "video": (event.get("video") or {}).get("id"),
                "status": (event.get("video") or {}).get("status"), "event_id_header": self.headers.get("ClipFlow-Event-Id"),
                "signature_ok": signature_ok(Handler.secret, self.headers.get("ClipFlow-Signature", ""), body, time.time()),
                "answered": status, "time": time.time(), "path": self.path,
            }
            with open(self.args.log, "a") as f:
                f.write(json.dumps(line) + "\n")
        self.send_response(status)
        if status == 307:
            self.send_header("Location", self.args.redirect)
        self.send_header("Content-Length", "0")
        self.end_headers()


def main():
    ap = argparse.ArgumentParser(description="webhook receiver for the tests")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file")
    ap.add_argument("--log", required=True)
    ap.add_argument("--fail-first", type=int, default=0)
    ap.add_argument("--redirect")
    ap.add_argument("--max-seconds", type=float, default=600)
    args = ap.parse_args()
    threading.Thread(target=watchdog, args=(args.max_seconds,), daemon=True).start()
    Handler.args = args
    Handler.secret = os.environ["WEBHOOK_SECRET"].encode()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    port = server.server_address[1]
    write_port(args.port_file, port)
    print(f"webhook_receiver listening on 127.0.0.1:{port}", file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
