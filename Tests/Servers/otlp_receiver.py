#!/usr/bin/env python3
"""An OTLP/HTTP receiver for the tracing tests: what an OpenTelemetry collector's receiver does,
decoded with the protocol's own Python classes (PyPI opentelemetry-proto).

    python3 otlp_receiver.py --port P|0 [--port-file FILE] --log FILE [--max-seconds S]

Binds 127.0.0.1. Every span of every POST to /v1/traces (binary protobuf, gzip or not) is appended
to --log as one JSON line:
    {"service", "trace", "span", "parent", "name", "kind", "attributes", "start", "end", "status",
     "authorization"}
ids in hex, times in nanoseconds since 1970, attributes as {key: value}, "authorization" the
request's Authorization header (or null). It answers an empty
ExportTraceServiceResponse.
"""

import argparse
import gzip
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from lifetime import watchdog, write_port


def value(v):
    kind = v.WhichOneof("value")
    if kind in ("array_value", "kvlist_value"):
        return str(getattr(v, kind))
    return getattr(v, kind) if kind else None


class Handler(BaseHTTPRequestHandler):
    lock = threading.Lock()
    log = None

    def log_message(self, *a):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        if self.path != "/v1/traces":
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        request = trace_service_pb2.ExportTraceServiceRequest()
        request.ParseFromString(body)
        lines = []
        authorization = self.headers.get("Authorization")
        for resource_spans in request.resource_spans:
            resource = {a.key: value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    lines.append({
                        "service": resource.get("service.name"),
                        "trace": span.trace_id.hex(), "span": span.span_id.hex(), "parent": span.parent_span_id.hex(),
                        "name": span.name, "kind": span.kind,
                        "attributes": {a.key: value(a.value) for a in span.attributes},
                        "start": span.start_time_unix_nano, "end": span.end_time_unix_nano, "status": span.status.code,
                        "authorization": authorization,
                    })
        with Handler.lock, open(Handler.log, "a") as f:
            for line in lines:
                f.write(json.dumps(line) + "\n")
        answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)


def main():
    ap = argparse.ArgumentParser(description="OTLP/HTTP trace receiver for the tests")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file")
    ap.add_argument("--log", required=True)
    ap.add_argument("--max-seconds", type=float, default=600)
    args = ap.parse_args()
    threading.Thread(target=watchdog, args=(args.max_seconds,), daemon=True).start()
    Handler.log = args.log
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    port = server.server_address[1]
    write_port(args.port_file, port)
    print(f"otlp_receiver listening on 127.0.0.1:{port}", file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
