#!/usr/bin/env python3
"""Serves a folder over HTTP on 127.0.0.1, as a plain web server does for an HLS ladder:
files as they are, and a single `Range: bytes=A-B` answered with 206 (byte-range HLS, one file per
rendition). Used by browser-play and by tests that read a ladder over HTTP.

Usage: static_server.py FOLDER   (prints the port it listens on, then serves until killed)
"""
import functools, http.server, os, re, sys, threading


class Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        m = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        path = self.translate_path(self.path)
        if not m or not os.path.isfile(path):
            return super().do_GET()
        size = os.path.getsize(path)
        start = int(m.group(1))
        end = min(int(m.group(2)) if m.group(2) else size - 1, size - 1)
        if start > end:
            self.send_error(416)
            return
        with open(path, "rb") as f:
            f.seek(start)
            body = f.read(end - start + 1)
        self.send_response(206)
        self.send_header("Content-Type", self.guess_type(path))
        self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client had what it needed


def serve(folder):
    """A started server for `folder` on a fresh port of 127.0.0.1 (stop it with shutdown())."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=folder))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


if __name__ == "__main__":
    s = serve(sys.argv[1])
    print(s.server_address[1], flush=True)
    threading.Event().wait()
