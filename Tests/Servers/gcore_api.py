#!/usr/bin/env python3
"""A small stand-in for Gcore's video hosting REST API, for the upload tests (standard library only).

    python3 gcore_api.py --port 0 --port-file FILE --tus-host 127.0.0.1:TUSPORT --max-seconds 600 \
        [--access TOKEN --refresh TOKEN] [--username U --password P]

Binds 127.0.0.1, writes its port to --port-file once listening, exits after --max-seconds or when
its parent process dies.

    POST /auth/login    {"username","password"} -> {"access", "refresh"}  (401 on bad credentials)
    POST /auth/refresh  {"refresh"}             -> {"access"}  (a new access token every time;
                                                   401 if the refresh token is unknown)
Bearer access token needed below; unknown or expired -> 401 {"detail": "token expired"}:
    POST /videos               {"name", "description"?} -> 201 video
    GET  /videos/{id}          -> video
    GET  /videos/{id}/upload   -> {"servers": [{"id": 1, "hostname": TUS_HOST}], "video": {...},
                                   "token": "<upload token>"}
    DELETE /videos/{id}        -> 204, the video gone (404 if unknown)
Control (no token needed):
    POST /__control/expire-access  every access token issued so far expires
    GET  /__control/state          {"videos": [...], "refreshes": N, "logins": N,
                                    "upload_tokens": {"<id>": "<token>"},
                                    "requests": [[method, path, status], ...]}
"""

import argparse
import json
import re
import secrets
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from lifetime import watchdog, write_port


class State:
    def __init__(self, tus_host, username, password):
        self.lock = threading.Lock()
        self.tus_host = tus_host
        self.username = username
        self.password = password
        self.access = set()
        self.refresh = set()
        self.videos = {}
        self.next_id = 1000
        self.refreshes = 0
        self.logins = 0
        self.upload_tokens = {}
        self.requests = []

    def new_access(self):
        token = "acc-" + secrets.token_hex(12)
        self.access.add(token)
        return token


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state: State = None  # set in main

    def log_message(self, fmt, *args):
        sys.stderr.write("gcore_api: " + (fmt % args) + "\n")

    def reply(self, status, obj):
        body = json.dumps(obj).encode()
        # Recorded before the answer goes: a client that asks for the state once it has the
        # answer always finds the request there.
        with self.state.lock:
            self.state.requests.append([self.command, self.path, status])
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def body_json(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        if not raw:
            return {}
        try:
            obj = json.loads(raw)
        except ValueError:
            return None
        return obj if isinstance(obj, dict) else None

    def authorized(self):
        auth = self.headers.get("Authorization") or ""
        token = auth[7:].strip() if auth.startswith("Bearer ") else None
        with self.state.lock:
            ok = token is not None and token in self.state.access
        if not ok:
            self.reply(401, {"detail": "token expired"})
        return ok

    def do_POST(self):
        s = self.state
        body = self.body_json()
        if body is None:
            return self.reply(400, {"detail": "body must be a JSON object"})
        path = self.path.split("?")[0]
        if path == "/auth/login":
            if body.get("username") != s.username or body.get("password") != s.password:
                return self.reply(401, {"detail": "bad credentials"})
            with s.lock:
                s.logins += 1
                access = s.new_access()
                refresh = "ref-" + secrets.token_hex(12)
                s.refresh.add(refresh)
            return self.reply(200, {"access": access, "refresh": refresh})
        if path == "/auth/refresh":
            with s.lock:
                if body.get("refresh") not in s.refresh:
                    known = False
                else:
                    known = True
                    s.refreshes += 1
                    access = s.new_access()
            if not known:
                return self.reply(401, {"detail": "refresh token unknown"})
            return self.reply(200, {"access": access})
        if path == "/__control/expire-access":
            with s.lock:
                n = len(s.access)
                s.access.clear()
            return self.reply(200, {"expired": n})
        if path == "/videos":
            if not self.authorized():
                return
            name = body.get("name")
            if not isinstance(name, str) or not name:
                return self.reply(400, {"detail": "name is required"})
            with s.lock:
                vid = s.next_id
                s.next_id += 1
                v = {"id": vid, "name": name, "description": body.get("description", ""),
                     "client_id": 1234, "screenshot": "",
                     "hls_url": f"https://demo-files.gvideo.io/videos/{vid}/master.m3u8",
                     "status": "empty"}
                s.videos[vid] = v
            return self.reply(201, v)
        return self.reply(404, {"detail": "not found"})

    def do_DELETE(self):
        s = self.state
        m = re.fullmatch(r"/videos/(\d+)/?", self.path.split("?")[0])
        if not m:
            return self.reply(404, {"detail": "not found"})
        if not self.authorized():
            return
        with s.lock:
            gone = s.videos.pop(int(m.group(1)), None)
        if gone is None:
            return self.reply(404, {"detail": "video not found"})
        with s.lock:
            s.requests.append([self.command, self.path, 204])
        self.send_response(204)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self):
        s = self.state
        path = self.path.split("?")[0]
        if path == "/__control/state":
            with s.lock:
                out = {"videos": list(s.videos.values()), "refreshes": s.refreshes,
                       "logins": s.logins,
                       "upload_tokens": {str(k): v for k, v in s.upload_tokens.items()},
                       "requests": list(s.requests)}
            return self.reply(200, out)
        m = re.fullmatch(r"/videos/(\d+)(/upload)?/?", path)
        if not m:
            return self.reply(404, {"detail": "not found"})
        if not self.authorized():
            return
        vid = int(m.group(1))
        with s.lock:
            v = s.videos.get(vid)
        if v is None:
            return self.reply(404, {"detail": "video not found"})
        if m.group(2):
            token = secrets.token_hex(16)
            with s.lock:
                s.upload_tokens[vid] = token
            return self.reply(200, {
                "servers": [{"id": 1, "hostname": s.tus_host}],
                "video": {"id": v["id"], "name": v["name"], "client_id": v["client_id"]},
                "token": token})
        return self.reply(200, v)


def main():
    ap = argparse.ArgumentParser(description="Gcore video API stand-in")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file")
    ap.add_argument("--tus-host", required=True, help="host:port put in servers[].hostname")
    ap.add_argument("--max-seconds", type=float, default=600)
    ap.add_argument("--access", help="an access token valid from the start")
    ap.add_argument("--refresh", help="a refresh token valid from the start")
    ap.add_argument("--username", default="user@example.com")
    ap.add_argument("--password", default="secret")
    args = ap.parse_args()

    threading.Thread(target=watchdog, args=(args.max_seconds,), daemon=True).start()
    state = State(args.tus_host, args.username, args.password)
    if args.access:
        state.access.add(args.access)
    if args.refresh:
        state.refresh.add(args.refresh)
    Handler.state = state
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    port = server.server_address[1]
    write_port(args.port_file, port)
    print(f"gcore_api listening on 127.0.0.1:{port}", file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
