#!/usr/bin/env python3
"""Fault-injecting HTTP/1.1 reverse proxy for the upload tests (standard library only).

    python3 faultproxy.py --upstream http://127.0.0.1:UPORT --port 0 --port-file FILE --max-seconds 600

Binds 127.0.0.1, writes the port it got to --port-file once listening, and exits by itself after
--max-seconds or as soon as its parent process dies (so it can never outlive a test run).

Every request is forwarded on a fresh upstream connection (Connection: close upstream, Host kept as
the client sent it, Expect stripped: the proxy answers `100 Continue` itself). The request body is
streamed (Content-Length or chunked, raw framing kept) with fixed 256 KiB buffers, never held whole.
The upstream response is relayed byte for byte until upstream EOF, with `Connection: close` put in
its head, and then the client connection is closed: one request per client connection.

Control API on the same port, never forwarded (JSON in and out):
    POST   /__proxy/rules        body: a JSON list of rules; replaces the current rules
    DELETE /__proxy/rules        clears the rules
    GET    /__proxy/rules        the current rules with their counters
    GET    /__proxy/stats        {"requests": [[method, target, status_or_fault], ...],
                                  "faults_applied": N, "bytes_forwarded": N}
    POST   /__proxy/reset-stats

A rule (all matchers optional; the first rule that matches and is not used up decides):
    {"method": "PATCH", "path_contains": "/files/", "query_contains": "partNumber=2",
     "skip": 0,            # let the first K matching requests through untouched
     "times": 1,           # apply to the next N matching requests (-1: every one)
     "action": "cut" | "cut_response" | "drop_response" | "status" | "stall" | "delay" | "rate", ...}
    cut:           "after_bytes": B | "random" (uniform in [0, Content-Length), "seed": S optional;
                   65536 stands in for the length of a chunked body). Forwards the head and B body
                   bytes, then closes upstream (FIN, or RST with "upstream_close": "rst") and the
                   client (RST if it is still sending).
    cut_response:  "after_bytes": B: forwards the whole request, relays the response head and B bytes
                   of its body, then resets the client connection (a download cut part-way).
    drop_response: forwards the whole request, reads the whole response, closes the client without
                   a byte of it (a lost response: the server applied the request).
    status:        "status": 503, "body": "...", "headers": {...}: answered by the proxy, upstream
                   never contacted (a body the client sends anyway is read and discarded; with
                   `Expect: 100-continue` the answer goes out before the body, as a server would).
    stall:         "after_bytes": B, "seconds": S: forwards B body bytes, stops reading the client
                   for S seconds, then closes both.
    delay:         "seconds": S: waits S seconds, then forwards normally.
    rate:          "bytes_per_second": N: forwards the request body at N bytes a second (a slow
                   uplink; each request paced on its own).

In stats, status_or_fault is the upstream status (an int) for a forwarded request, the int status
of a "status" rule's answer is recorded as "status:503", other faults by their action name
("cut", "cut_response", "drop_response", "stall"), 502 when the upstream could not be reached, and
"error:..." when a connection broke on its own.
"""

import argparse
import json
import random
import socket
import struct
import sys
import threading
import time
from urllib.parse import urlsplit

from lifetime import watchdog, write_port

BUF = 256 * 1024
MAX_HEAD = 64 * 1024
IO_TIMEOUT = 300.0


class ClientGone(Exception):
    pass


class Stream:
    """A socket with a read buffer (for the head and chunked framing) and counted raw reads."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = bytearray()
        self.eof = False

    def fill(self):
        if self.eof:
            return False
        data = self.sock.recv(BUF)
        if not data:
            self.eof = True
            return False
        self.buf += data
        return True

    def read_head(self):
        """Bytes up to and including the blank line ending a message head, or None at EOF."""
        while True:
            i = self.buf.find(b"\r\n\r\n")
            if i >= 0:
                head = bytes(self.buf[: i + 4])
                del self.buf[: i + 4]
                return head
            if len(self.buf) > MAX_HEAD:
                raise ValueError("message head too large")
            if not self.fill():
                return None

    def read_line(self):
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                line = bytes(self.buf[: i + 2])
                del self.buf[: i + 2]
                return line
            if len(self.buf) > MAX_HEAD:
                raise ValueError("line too long")
            if not self.fill():
                raise ClientGone("eof in chunked framing")

    def read_some(self, limit):
        """Up to `limit` bytes (at least 1), b"" at EOF."""
        if self.buf:
            n = min(limit, len(self.buf))
            data = bytes(self.buf[:n])
            del self.buf[:n]
            return data
        if self.eof:
            return b""
        data = self.sock.recv(min(limit, BUF))
        if not data:
            self.eof = True
        return data


def parse_head(head):
    lines = head.decode("latin-1").split("\r\n")
    first = lines[0]
    headers = []
    for line in lines[1:]:
        if not line:
            continue
        if ":" not in line:
            raise ValueError("bad header line")
        k, v = line.split(":", 1)
        headers.append((k.strip(), v.strip()))
    return first, headers


def get_header(headers, name):
    name = name.lower()
    for k, v in headers:
        if k.lower() == name:
            return v
    return None


def build_head(first, headers):
    out = first + "\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers) + "\r\n"
    return out.encode("latin-1")


class Proxy:
    def __init__(self, upstream):
        u = urlsplit(upstream)
        self.up_host = u.hostname or "127.0.0.1"
        self.up_port = u.port or 80
        self.lock = threading.Lock()
        self.rules = []
        self.requests = []
        self.faults_applied = 0
        self.bytes_forwarded = 0

    # ---- rules and stats -------------------------------------------------------------------

    def set_rules(self, rules):
        if not isinstance(rules, list):
            raise ValueError("rules must be a JSON list")
        prepared = []
        for r in rules:
            if not isinstance(r, dict) or r.get("action") not in (
                "cut", "cut_response", "drop_response", "status", "stall", "delay", "rate"):
                raise ValueError(f"bad rule: {r!r}")
            r = dict(r)
            r.setdefault("skip", 0)
            r.setdefault("times", 1)
            r["_seen"] = 0
            r["_applied"] = 0
            if r["action"] == "cut" and r.get("after_bytes") == "random":
                r["_rng"] = random.Random(r.get("seed"))
            prepared.append(r)
        with self.lock:
            self.rules = prepared

    def public_rules(self):
        with self.lock:
            return [{k: v for k, v in r.items() if k != "_rng"} for r in self.rules]

    def pick_rule(self, method, path, query):
        with self.lock:
            for r in self.rules:
                if r.get("method") and r["method"].upper() != method.upper():
                    continue
                if r.get("path_contains") and r["path_contains"] not in path:
                    continue
                if r.get("query_contains") and r["query_contains"] not in query:
                    continue
                if r["times"] >= 0 and r["_applied"] >= r["times"]:
                    continue
                r["_seen"] += 1
                if r["_seen"] <= r["skip"]:
                    return None
                r["_applied"] += 1
                self.faults_applied += 1
                return r
        return None

    def record(self, method, target, outcome):
        with self.lock:
            self.requests.append([method, target, outcome])

    def add_bytes(self, n):
        with self.lock:
            self.bytes_forwarded += n

    def stats(self):
        with self.lock:
            return {"requests": list(self.requests), "faults_applied": self.faults_applied,
                    "bytes_forwarded": self.bytes_forwarded}

    def reset_stats(self):
        with self.lock:
            self.requests = []
            self.faults_applied = 0
            self.bytes_forwarded = 0

    # ---- connections -----------------------------------------------------------------------

    def handle(self, csock):
        csock.settimeout(IO_TIMEOUT)
        csock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        client = Stream(csock)
        method, target = "?", "?"
        try:
            head = client.read_head()
            if head is None:
                return
            first, headers = parse_head(head)
            parts = first.split(" ")
            if len(parts) != 3:
                send_simple(csock, 400, b"bad request line\n")
                return
            method, target, version = parts
            path, _, query = target.partition("?")
            if path.startswith("/__proxy/"):
                self.control(client, method, path, headers)
                return
            rule = self.pick_rule(method, path, query)
            self.forward(client, method, target, version, headers, rule)
        except (ClientGone, OSError, ValueError) as e:
            self.record(method, target, f"error:{type(e).__name__}: {e}")
        finally:
            close_quietly(csock)

    def control(self, client, method, path, headers):
        length = int(get_header(headers, "Content-Length") or 0)
        body = b""
        while len(body) < length:
            d = client.read_some(length - len(body))
            if not d:
                break
            body += d
        try:
            if path == "/__proxy/rules" and method == "POST":
                self.set_rules(json.loads(body or b"[]"))
                out = {"ok": True, "rules": len(self.rules)}
            elif path == "/__proxy/rules" and method == "DELETE":
                self.set_rules([])
                out = {"ok": True}
            elif path == "/__proxy/rules" and method == "GET":
                out = self.public_rules()
            elif path == "/__proxy/stats" and method == "GET":
                out = self.stats()
            elif path == "/__proxy/reset-stats" and method == "POST":
                self.reset_stats()
                out = {"ok": True}
            else:
                send_simple(client.sock, 404, b'{"error": "unknown control endpoint"}',
                            "application/json")
                return
        except (ValueError, TypeError) as e:
            send_simple(client.sock, 400, json.dumps({"error": str(e)}).encode(), "application/json")
            return
        send_simple(client.sock, 200, json.dumps(out).encode(), "application/json")

    def forward(self, client, method, target, version, headers, rule):
        action = rule["action"] if rule else None
        te = (get_header(headers, "Transfer-Encoding") or "").lower()
        chunked = "chunked" in te
        cl = get_header(headers, "Content-Length")
        length = int(cl) if (cl and not chunked) else (None if chunked else 0)
        expect = (get_header(headers, "Expect") or "").lower() == "100-continue"

        def send_continue():
            if expect:
                client.sock.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")

        if action == "status":
            status = int(rule.get("status", 503))
            if not expect:
                for _ in body_pieces(client, length, chunked, None):
                    pass
            body = rule.get("body", "").encode("utf-8")
            extra = rule.get("headers") or {}
            send_simple(client.sock, status, body, extra.get("Content-Type", "text/plain"),
                        {k: v for k, v in extra.items() if k.lower() != "content-type"})
            self.record(method, target, f"status:{status}")
            return
        if action == "delay":
            time.sleep(float(rule.get("seconds", 1)))

        up_headers = [(k, v) for k, v in headers
                      if k.lower() not in ("connection", "expect", "keep-alive", "proxy-connection")]
        up_headers.append(("Connection", "close"))
        try:
            usock = socket.create_connection((self.up_host, self.up_port), timeout=10)
        except OSError as e:
            send_simple(client.sock, 502, f"faultproxy: upstream unreachable: {e}\n".encode())
            self.record(method, target, 502)
            return
        try:
            usock.settimeout(IO_TIMEOUT)
            usock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            usock.sendall(build_head(f"{method} {target} {version}", up_headers))
            send_continue()

            limit = None
            if action in ("cut", "stall"):
                ab = rule.get("after_bytes", 0)
                if ab == "random":
                    span = length if length else 65536
                    limit = rule["_rng"].randrange(span) if span > 0 else 0
                else:
                    limit = int(ab)
            sent = 0
            began = time.monotonic()
            for piece, payload in body_pieces(client, length, chunked, limit):
                if action == "rate":
                    # Paced before it goes: the upstream gets each byte when the link would
                    # deliver it (4 KiB at a time), so its last byte arrives last.
                    rate = float(rule["bytes_per_second"])
                    for at in range(0, len(piece), 4096):
                        part = piece[at:at + 4096]
                        wait = (sent + len(part)) / rate - (time.monotonic() - began)
                        if wait > 0:
                            time.sleep(wait)
                        usock.sendall(part)
                        sent += len(part)
                    self.add_bytes(len(piece))
                    continue
                usock.sendall(piece)
                sent += payload
                self.add_bytes(len(piece))
            if action == "cut":
                if rule.get("upstream_close") == "rst":
                    set_rst(usock)
                close_quietly(usock)
                set_rst(client.sock)
                close_quietly(client.sock)
                self.record(method, target, "cut")
                return
            if action == "stall":
                time.sleep(float(rule.get("seconds", 30)))
                close_quietly(usock)
                set_rst(client.sock)
                close_quietly(client.sock)
                self.record(method, target, "stall")
                return

            upstream = Stream(usock)
            if action == "drop_response":
                while upstream.read_some(BUF):
                    pass
                close_quietly(client.sock)
                self.record(method, target, "drop_response")
                return
            if action == "cut_response":
                self.relay_response(upstream, client.sock, limit=int(rule.get("after_bytes", 0)))
                set_rst(client.sock)
                close_quietly(client.sock)
                self.record(method, target, "cut_response")
                return
            status = self.relay_response(upstream, client.sock)
            self.record(method, target, status)
        finally:
            close_quietly(usock)

    def relay_response(self, upstream, csock, limit=None):
        """Relays the response (head, then body until upstream EOF, or only `limit` body bytes)."""
        while True:
            head = upstream.read_head()
            if head is None:
                send_simple(csock, 502, b"faultproxy: upstream closed without a response\n")
                return 502
            first, headers = parse_head(head)
            status = int(first.split(" ")[1])
            if 100 <= status < 200:
                if status != 101:
                    csock.sendall(head)
                    continue
            headers = [(k, v) for k, v in headers if k.lower() not in ("connection", "keep-alive")]
            headers.append(("Connection", "close"))
            csock.sendall(build_head(first, headers))
            break
        relayed = 0
        while limit is None or relayed < limit:
            data = upstream.read_some(BUF if limit is None else min(BUF, limit - relayed))
            if not data:
                break
            csock.sendall(data)
            relayed += len(data)
        return status


def body_pieces(client, length, chunked, limit):
    """Yields (raw bytes to forward, payload bytes in them) for the request body, stopping after
    `limit` payload bytes when a limit is given. Chunked framing is forwarded as is."""
    if limit is not None and limit <= 0:
        return
    if not chunked:
        remaining = length or 0
        if limit is not None:
            remaining = min(remaining, limit)
        while remaining > 0:
            data = client.read_some(min(remaining, BUF))
            if not data:
                raise ClientGone("client closed mid-body")
            remaining -= len(data)
            yield data, len(data)
        return
    budget = limit
    while True:
        line = client.read_line()
        size = int(line.split(b";")[0].strip(), 16)
        if size == 0:
            # Last chunk: forward it and the trailer section.
            out = bytearray(line)
            while True:
                t = client.read_line()
                out += t
                if t == b"\r\n":
                    break
            yield bytes(out), 0
            return
        yield line, 0
        remaining = size
        while remaining > 0:
            want = min(remaining, BUF)
            if budget is not None:
                want = min(want, budget)
            data = client.read_some(want)
            if not data:
                raise ClientGone("client closed mid-chunk")
            remaining -= len(data)
            yield data, len(data)
            if budget is not None:
                budget -= len(data)
                if budget <= 0:
                    return
        crlf = client.read_line()
        yield crlf, 0


REASONS = {200: "OK", 201: "Created", 204: "No Content", 400: "Bad Request", 401: "Unauthorized",
           403: "Forbidden", 404: "Not Found", 409: "Conflict", 410: "Gone", 423: "Locked",
           429: "Too Many Requests", 460: "Checksum Mismatch", 500: "Internal Server Error",
           502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout"}


def send_simple(sock, status, body, ctype="text/plain", extra=None):
    headers = [("Content-Type", ctype), ("Content-Length", str(len(body))), ("Connection", "close")]
    for k, v in (extra or {}).items():
        headers.append((k, str(v)))
    sock.sendall(build_head(f"HTTP/1.1 {status} {REASONS.get(status, 'Status')}", headers) + body)


def set_rst(sock):
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass


def close_quietly(sock):
    try:
        sock.close()
    except OSError:
        pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file")
    ap.add_argument("--max-seconds", type=float, default=600)
    args = ap.parse_args()

    threading.Thread(target=watchdog, args=(args.max_seconds,), daemon=True).start()
    proxy = Proxy(args.upstream)
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", args.port))
    ls.listen(64)
    port = ls.getsockname()[1]
    write_port(args.port_file, port)
    print(f"faultproxy listening on 127.0.0.1:{port} -> {args.upstream}", file=sys.stderr, flush=True)
    while True:
        csock, _ = ls.accept()
        threading.Thread(target=proxy.handle, args=(csock,), daemon=True).start()


if __name__ == "__main__":
    main()
