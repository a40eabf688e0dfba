#!/usr/bin/env python3
"""A hostile HTTP server for the uploaders' tests and fuzzing (standard library only).

    python3 hostile_http.py --bind 127.0.0.1 --port 0 --port-file FILE --max-seconds 600 \
        [--foreign HOST:PORT]

One listener speaks, in memory and just enough to complete an upload, three protocols:
    /files...         TUS 1.0 (OPTIONS, POST -> Location /files/<id>, HEAD, PATCH, DELETE)
    /api/...          a Gcore-style hosting API (POST /api/videos, GET /api/videos/<id>/upload,
                      whose upload server is this listener: use --upload-url http://{hostname}/files)
    /<bucket>/<key>   S3 multipart (CreateMultipartUpload, UploadPart, ListParts, Complete, Abort,
                      PutObject); no signature checks
and records every request (method, path, Host and every header) so a test can see what a client
sent where. It answers honestly until told otherwise:

    POST /__control/plan  {"seed": N, "rate": 0.0-1.0}   each answer is mutated with probability
                          `rate`, the mutation drawn from a random.Random(N) (reproducible for one
                          client run); or {"rules": [{"method": "POST", "path": "/files",
                          "mutation": NAME, "value": ..., "times": K}]} for exact cases
                          (times -1: every time). Clears the request log.
    GET  /__control/log   {"requests": [{"method","path","headers"{lower-case name: value}}],
                           "mutations": [[method, path, name], ...],
                           "objects": {"<name>": sha256 hex of a completed upload}}

Mutations (NAME): status (a wrong status), offset (a wrong/missing/huge/negative Upload-Offset),
location (a Location elsewhere: other port, other host name, user info, scheme-relative, garbage),
giant-header (one 200 KB header line), many-headers (200 KB of header lines), endless-headers,
endless-body (chunked, never ends), giant-body (10 MB body), truncate (half an answer, then
close), close (no answer), drip (a correct answer, one byte every 0.3 s), hang (no answer for
60 s), early-drip (before reading the request body, a 500 whose chunked body drips one byte
every 0.3 s and never ends; not in the random set: it lasts until the client gives up),
bad-json, bad-xml, bad-host (the Gcore upload server named with a path/user info/space),
foreign-host (the Gcore upload server is --foreign: allowed by the protocol; the API's bearer
token must not go there).

Binds --bind (127.0.0.1, or another loopback address such as 127.0.0.2), writes its port to
--port-file once listening, exits after --max-seconds or when its parent process dies.
"""

import argparse
import hashlib
import json
import random
import re
import socket
import socketserver
import sys
import threading
import time
import uuid

from lifetime import watchdog, write_port

MUTATIONS = ["status", "offset", "location", "giant-header", "many-headers", "endless-headers",
             "endless-body", "giant-body", "truncate", "close", "drip", "hang", "bad-json",
             "bad-xml", "bad-host", "foreign-host"]


class State:
    def __init__(self, foreign):
        self.lock = threading.Lock()
        self.foreign = foreign
        self.self_host = ""
        self.requests = []
        self.mutations = []
        self.rules = []
        self.rng = None
        self.rate = 0.0
        self.tus = {}        # id -> {"length": n, "data": bytearray}
        self.videos = {}     # id -> name
        self.multipart = {}  # upload id -> {"key": k, "parts": {n: bytes}}
        self.objects = {}    # name -> sha256

    def reset(self, plan):
        self.requests = []
        self.mutations = []
        self.rules = [dict(r) for r in plan.get("rules", [])]
        self.rng = random.Random(plan["seed"]) if "seed" in plan else None
        self.rate = float(plan.get("rate", 0.0))

    def pick(self, method, path):
        """The mutation for this request, or None."""
        for r in self.rules:
            if r.get("times", -1) == 0:
                continue
            if r.get("method") not in (None, method):
                continue
            if r.get("path") and not path.startswith(r["path"]):
                continue
            if r.get("times", -1) > 0:
                r["times"] -= 1
            return r["mutation"], r.get("value")
        if self.rng is not None and self.rng.random() < self.rate:
            return self.rng.choice(MUTATIONS), self.rng.random()
        return None


STATE: State = None


def reason(status):
    return {200: "OK", 201: "Created", 204: "No Content", 400: "Bad Request", 401: "Unauthorized",
            404: "Not Found", 409: "Conflict", 410: "Gone", 412: "Precondition Failed",
            460: "Checksum Mismatch", 500: "Internal Server Error", 503: "Service Unavailable"}.get(status, "X")


class Handler(socketserver.StreamRequestHandler):
    timeout = 120

    def handle(self):
        try:
            while self.one():
                pass
        except (OSError, ValueError):
            pass

    def one(self):
        line = self.rfile.readline(65537)
        if not line:
            return False
        parts = line.decode("latin-1").split()
        if len(parts) < 3:
            return False
        method, target = parts[0], parts[1]
        headers = {}
        while True:
            h = self.rfile.readline(65537)
            if h in (b"\r\n", b"\n", b""):
                break
            name, _, value = h.decode("latin-1").partition(":")
            key = name.strip().lower()
            headers[key] = (headers[key] + ", " if key in headers else "") + value.strip()
        n = int(headers.get("content-length") or 0)
        path, _, query = target.partition("?")
        if path.startswith("/__control/"):
            return self.control(method, path, self.rfile.read(n) if n > 0 else b"")
        s = STATE
        with s.lock:
            s.requests.append({"method": method, "path": target, "headers": headers})
            mutation = s.pick(method, path)
            if mutation:
                s.mutations.append([method, path, mutation[0]])
        if mutation and mutation[0] == "early-drip":
            return self.early_drip()
        body = self.rfile.read(n) if n > 0 else b""
        status, hdrs, payload = self.answer(method, path, query, headers, body, mutation)
        return self.send(status, hdrs, payload, mutation, method)

    # ---- honest answers (possibly bent by data mutations) ----

    def answer(self, method, path, query, headers, body, mutation):
        name = mutation[0] if mutation else None
        value = mutation[1] if mutation else None
        s = STATE
        if path.startswith("/files"):
            return self.tus(method, path, headers, body, name, value)
        if path.startswith("/api/"):
            return self.gcore(method, path, body, name, value)
        if path.count("/") >= 2:
            return self.s3(method, path, query, body, name)
        return 404, [], b"no such thing"

    def tus(self, method, path, headers, body, name, value):
        s = STATE
        base = [("Tus-Resumable", "1.0.0")]
        if method == "OPTIONS":
            return 204, base + [("Tus-Version", "1.0.0"), ("Tus-Extension", "creation,termination")], b""
        if method == "POST" and path.rstrip("/") == "/files":
            length = int(headers.get("upload-length") or -1)
            uid = uuid.uuid4().hex[:16]
            with s.lock:
                s.tus[uid] = {"length": length, "data": bytearray()}
                if length == 0:
                    s.objects["tus/" + uid] = hashlib.sha256(b"").hexdigest()
            loc = "/files/" + uid
            if name == "location":
                loc = self.bad_location(uid, value)
            return 201, base + [("Location", loc), ("Upload-Offset", "0")], b""
        uid = path[len("/files/"):]
        with s.lock:
            up = s.tus.get(uid)
        if up is None:
            return 404, base, b"no such upload"
        if method == "HEAD":
            return 200, base + [("Upload-Offset", self.offset(len(up["data"]), up["length"], name, value)),
                                ("Upload-Length", str(up["length"])), ("Cache-Control", "no-store")], b""
        if method == "PATCH":
            off = int(headers.get("upload-offset") or -1)
            if off != len(up["data"]):
                return 409, base, b"offset mismatch"
            with s.lock:
                up["data"] += body
                if len(up["data"]) == up["length"]:
                    s.objects["tus/" + uid] = hashlib.sha256(bytes(up["data"])).hexdigest()
            return 204, base + [("Upload-Offset", self.offset(len(up["data"]), up["length"], name, value))], b""
        if method == "DELETE":
            with s.lock:
                s.tus.pop(uid, None)
            return 204, base, b""
        return 405, base, b""

    def offset(self, real, length, name, value):
        if name != "offset":
            return str(real)
        choices = ["", "-1", str(2 ** 63), str(2 ** 64), "abc", str(length + 1), str(max(0, real - 1)), " 12 ", "0x10"]
        return choices[int((value or 0) * 1000) % len(choices)]

    def bad_location(self, uid, value):
        host, port = STATE.self_host.split(":")
        foreign = STATE.foreign or "127.0.0.2:9"
        fhost, fport = foreign.split(":")
        choices = [
            "http://%s/files/%s" % (foreign, uid),                 # another host and port
            "//%s/files/%s" % (foreign, uid),                      # scheme-relative
            "http://%s:%s/files/%s" % (host, fport, uid),          # another port
            "http://localhost:%s/files/%s" % (port, uid),          # another host name, same port
            "http://user:pw@%s:%s/files/%s" % (host, port, uid),   # user info
            "https://%s:%s/files/%s" % (host, port, uid),          # another scheme
            "ftp://%s/files/%s" % (foreign, uid),
            "http://[::1/x",
            "",
        ]
        if isinstance(value, str):
            return value
        return choices[int((value or 0) * 1000) % len(choices)]

    def gcore(self, method, path, body, name, value):
        s = STATE
        js = [("Content-Type", "application/json")]
        if name == "bad-json":
            bad = [b"{", b"[]", b'{"id": null}', b'{"servers": "x", "token": 5}', b"\xff\xfe", b'{"id": {"a": 1}}']
            return 200 if method == "GET" else 201, js, bad[int((value or 0) * 1000) % len(bad)]
        if method == "POST" and path == "/api/videos":
            with s.lock:
                vid = 1000 + len(s.videos)
                s.videos[vid] = json.loads(body or b"{}").get("name", "")
            return 201, js, json.dumps({"id": vid, "hls_url": "http://%s/hls/%d.m3u8" % (s.self_host, vid)}).encode()
        m = re.match(r"^/api/videos/(\d+)/upload$", path)
        if method == "GET" and m:
            host = s.self_host
            if name == "foreign-host":
                host = s.foreign or host
            if name == "bad-host":
                bad = ["evil@%s" % host, "%s/x?y=" % host, "a b", "", "%s:99999" % host, "http://%s" % host]
                host = bad[int((value or 0) * 1000) % len(bad)]
            return 200, js, json.dumps({"servers": [{"id": 1, "hostname": host}], "token": "upl-" + uuid.uuid4().hex,
                                        "video": {"id": int(m.group(1)), "client_id": 7}}).encode()
        return 404, js, b'{"detail": "not found"}'

    def s3(self, method, path, query, body, name):
        s = STATE
        xml = [("Content-Type", "application/xml")]
        q = dict(p.partition("=")[::2] for p in query.split("&") if p)
        _, bucket, key = path.split("/", 2)
        if name == "bad-xml" and method in ("POST", "GET"):
            bad = [b"<Initiate", b"<?xml version='1.0'?><X><UploadId></UploadId></X>",
                   b"<Error><Code>InternalError</Code></Error>", b"\x00\x01", b"<a>" * 1000]
            return 200, xml, random.Random(len(path)).choice(bad)
        if method == "POST" and "uploads" in q:
            uid = uuid.uuid4().hex
            with s.lock:
                s.multipart[uid] = {"key": key, "parts": {}}
            return 200, xml, ("<?xml version=\"1.0\" encoding=\"UTF-8\"?><InitiateMultipartUploadResult><Bucket>%s</Bucket>"
                              "<Key>%s</Key><UploadId>%s</UploadId></InitiateMultipartUploadResult>" % (bucket, key, uid)).encode()
        if method == "PUT" and "uploadId" in q:
            with s.lock:
                mp = s.multipart.get(q["uploadId"])
                if mp is None:
                    return 404, xml, b"<Error><Code>NoSuchUpload</Code></Error>"
                mp["parts"][int(q.get("partNumber", "0"))] = body
            return 200, [("ETag", '"%s"' % hashlib.md5(body).hexdigest())], b""
        if method == "GET" and "uploadId" in q:
            with s.lock:
                mp = s.multipart.get(q["uploadId"])
                if mp is None:
                    return 404, xml, b"<Error><Code>NoSuchUpload</Code></Error>"
                parts = "".join("<Part><PartNumber>%d</PartNumber><ETag>\"%s\"</ETag><Size>%d</Size></Part>"
                                % (n, hashlib.md5(b).hexdigest(), len(b)) for n, b in sorted(mp["parts"].items()))
            return 200, xml, ("<?xml version=\"1.0\"?><ListPartsResult><Bucket>%s</Bucket><Key>%s</Key><UploadId>%s</UploadId>"
                              "<IsTruncated>false</IsTruncated>%s</ListPartsResult>" % (bucket, key, q["uploadId"], parts)).encode()
        if method == "POST" and "uploadId" in q:
            with s.lock:
                mp = s.multipart.pop(q["uploadId"], None)
                if mp is None:
                    return 404, xml, b"<Error><Code>NoSuchUpload</Code></Error>"
                data = b"".join(b for _, b in sorted(mp["parts"].items()))
                s.objects["s3/" + key] = hashlib.sha256(data).hexdigest()
            return 200, xml, ("<?xml version=\"1.0\"?><CompleteMultipartUploadResult><Bucket>%s</Bucket><Key>%s</Key>"
                              "<ETag>\"x-1\"</ETag></CompleteMultipartUploadResult>" % (bucket, key)).encode()
        if method == "DELETE" and "uploadId" in q:
            with s.lock:
                s.multipart.pop(q["uploadId"], None)
            return 204, [], b""
        if method == "PUT":
            with s.lock:
                s.objects["s3/" + key] = hashlib.sha256(body).hexdigest()
            return 200, [("ETag", '"%s"' % hashlib.md5(body).hexdigest())], b""
        return 400, xml, b"<Error><Code>InvalidRequest</Code></Error>"

    # ---- sending, possibly bent by transport mutations ----

    def send(self, status, hdrs, payload, mutation, method):
        name = mutation[0] if mutation else None
        value = mutation[1] if mutation else 0.5
        w = self.wfile
        if name == "status":
            choices = [200, 201, 204, 301, 400, 404, 409, 410, 412, 460, 500, 503, 999, 100]
            status = choices[int((value or 0) * 1000) % len(choices)]
            if status == 301:
                hdrs = hdrs + [("Location", "http://%s/elsewhere" % (STATE.foreign or "127.0.0.2:9"))]
        if name in ("endless-body", "giant-body", "drip") and status in (204, 304):
            status = 200  # a body after 204 would be read as the next answer
        if name == "close":
            return False
        if name == "hang":
            time.sleep(60)
            return False
        if name == "giant-body":
            payload = b"x" * (10 << 20)
        head = "HTTP/1.1 %d %s\r\n" % (status, reason(status))
        for k, v in hdrs:
            head += "%s: %s\r\n" % (k, v)
        if name == "giant-header":
            head += "X-Big: " + "a" * (200 << 10) + "\r\n"
        if name == "many-headers":
            head += "".join("X-H%d: %s\r\n" % (i, "b" * 100) for i in range(2000))
        if name == "endless-headers":
            w.write(head.encode("latin-1"))
            try:
                i = 0
                while True:
                    w.write(("X-E%d: %s\r\n" % (i, "c" * 60)).encode())
                    i += 1
            except OSError:
                return False
        if name == "endless-body":
            head += "Transfer-Encoding: chunked\r\n\r\n"
            w.write(head.encode("latin-1"))
            chunk = b"%x\r\n%s\r\n" % (4096, b"d" * 4096)
            try:
                while True:
                    w.write(chunk)
            except OSError:
                return False
        if method == "HEAD":
            head += "Content-Length: %d\r\n\r\n" % len(payload)
            data = head.encode("latin-1")
        else:
            head += "Content-Length: %d\r\n\r\n" % len(payload)
            data = head.encode("latin-1") + payload
        if name == "truncate":
            w.write(data[: max(1, len(data) // 2)])
            w.flush()
            return False
        if name == "drip":
            try:
                for b in data:
                    w.write(bytes([b]))
                    w.flush()
                    time.sleep(0.3)
            except OSError:
                return False
            return True
        w.write(data)
        w.flush()
        return True

    def early_drip(self):
        """Answers without reading the request body, then drips a chunked body forever."""
        w = self.wfile
        try:
            w.write(b"HTTP/1.1 500 Internal Server Error\r\nTransfer-Encoding: chunked\r\n\r\n")
            w.flush()
            while True:
                w.write(b"1\r\nx\r\n")
                w.flush()
                time.sleep(0.3)
        except OSError:
            return False

    def control(self, method, path, body):
        s = STATE
        if method == "POST" and path == "/__control/plan":
            with s.lock:
                s.reset(json.loads(body or b"{}"))
            out = b"{}"
        elif path == "/__control/log":
            with s.lock:
                out = json.dumps({"requests": s.requests, "mutations": s.mutations, "objects": s.objects}).encode()
        else:
            out = b'{"error": "unknown control"}'
        self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(out) + out)
        self.wfile.flush()
        return True


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    global STATE
    ap = argparse.ArgumentParser()
    ap.add_argument("--bind", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file")
    ap.add_argument("--max-seconds", type=int, default=600)
    ap.add_argument("--foreign", default="")
    a = ap.parse_args()
    STATE = State(a.foreign)
    srv = Server((a.bind, a.port), Handler)
    port = srv.server_address[1]
    STATE.self_host = "%s:%d" % (a.bind, port)
    threading.Thread(target=watchdog, args=(a.max_seconds,), daemon=True).start()
    write_port(a.port_file, port)
    srv.serve_forever()


if __name__ == "__main__":
    main()
