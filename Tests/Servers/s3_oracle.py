#!/usr/bin/env python3
"""An S3 client that is not ours (boto3), for the tests against a real S3 server (SeaweedFS).

Endpoint and keys come from the environment, as the AWS tools take them: AWS_ENDPOINT_URL_S3,
AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION. Every request is signed (path-style
addressing), one attempt each (no retries hide a failure). Each command prints one JSON value:

    s3_oracle.py setup --bucket B [--bucket B2...] [--wait S]
        Waits (up to S seconds) until a signed ListBuckets succeeds, creates the buckets, and proves
        that signatures are checked: a request signed with a wrong secret must get 403, else exit 1.
        Prints {"buckets": [...], "wrong_secret": {"status": 403, "code": ...}, "waited": seconds}.
    s3_oracle.py put  --bucket B --key K --file F [--metadata JSON]   {"etag": ...}
    s3_oracle.py put-tree --bucket B --dir D --prefix P   every file under D at P + its relative path; [key, ...]
    s3_oracle.py keys --bucket B [--prefix P]       [key, ...] (every page)
    s3_oracle.py get  --bucket B --key K --out F    {"sha256", "size", "etag"}
    s3_oracle.py head --bucket B --key K            {"size", "etag", "content_type", "metadata": {...}}
    s3_oracle.py pending-uploads --bucket B         [{"key", "upload_id"}, ...] (every page)
"""

import argparse
import hashlib
import json
import os
import sys
import time

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError


def client(secret=None):
    return boto3.client(
        "s3",
        endpoint_url=os.environ["AWS_ENDPOINT_URL_S3"],
        region_name=os.environ.get("AWS_REGION", "us-east-1"),
        aws_access_key_id=os.environ["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=secret or os.environ["AWS_SECRET_ACCESS_KEY"],
        config=Config(retries={"max_attempts": 1, "mode": "standard"}, s3={"addressing_style": "path"}),
    )


def setup(args):
    s3 = client()
    started = time.monotonic()
    while True:
        try:
            s3.list_buckets()
            break
        except (ClientError, BotoCoreError) as e:
            if time.monotonic() - started > args.wait:
                sys.exit(f"s3_oracle: the server did not serve a signed ListBuckets within {args.wait} s: {e}")
            time.sleep(0.1)
    waited = time.monotonic() - started
    for b in args.bucket:
        try:
            s3.create_bucket(Bucket=b)
        except ClientError as e:
            # A restarted server keeps its buckets.
            if e.response.get("Error", {}).get("Code") != "BucketAlreadyOwnedByYou":
                raise
    try:
        client(secret="not-the-secret").head_bucket(Bucket=args.bucket[0])
    except ClientError as e:
        status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        wrong = {"status": status, "code": e.response.get("Error", {}).get("Code")}
        if status != 403:
            sys.exit(f"s3_oracle: a request signed with a wrong secret got {wrong}, not 403")
    else:
        sys.exit("s3_oracle: signature checking is off: a request signed with a wrong secret was served")
    print(json.dumps({"buckets": args.bucket, "wrong_secret": wrong, "waited": round(waited, 2)}))


def put(args):
    with open(args.file, "rb") as f:
        r = client().put_object(Bucket=args.bucket, Key=args.key, Body=f, Metadata=json.loads(args.metadata))
    print(json.dumps({"etag": r["ETag"]}))


def put_tree(args):
    s3, out = client(), []
    for top, _, files in os.walk(args.dir):
        for name in sorted(files):
            path = os.path.join(top, name)
            key = args.prefix + os.path.relpath(path, args.dir)
            with open(path, "rb") as f:
                s3.put_object(Bucket=args.bucket, Key=key, Body=f)
            out.append(key)
    print(json.dumps(sorted(out)))


def keys(args):
    out = []
    for page in client().get_paginator("list_objects_v2").paginate(Bucket=args.bucket, Prefix=args.prefix):
        out += [o["Key"] for o in page.get("Contents", [])]
    print(json.dumps(out))


def get(args):
    r = client().get_object(Bucket=args.bucket, Key=args.key)
    h = hashlib.sha256()
    size = 0
    with open(args.out, "wb") as f:
        for chunk in r["Body"].iter_chunks(256 * 1024):
            h.update(chunk)
            size += len(chunk)
            f.write(chunk)
    print(json.dumps({"sha256": h.hexdigest(), "size": size, "etag": r["ETag"]}))


def head(args):
    r = client().head_object(Bucket=args.bucket, Key=args.key)
    print(json.dumps({"size": r["ContentLength"], "etag": r["ETag"], "content_type": r.get("ContentType", ""),
                      "metadata": r.get("Metadata", {})}))


def pending_uploads(args):
    out = []
    for page in client().get_paginator("list_multipart_uploads").paginate(Bucket=args.bucket):
        out += [{"key": u["Key"], "upload_id": u["UploadId"]} for u in page.get("Uploads", [])]
    print(json.dumps(out))


def main():
    ap = argparse.ArgumentParser(description="boto3 oracle for the tests against a real S3 server")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("setup")
    s.add_argument("--bucket", action="append", required=True)
    s.add_argument("--wait", type=float, default=30)
    t = sub.add_parser("put-tree")
    t.add_argument("--bucket", required=True)
    t.add_argument("--dir", required=True)
    t.add_argument("--prefix", default="")
    for name in ("put", "keys", "get", "head", "pending-uploads"):
        p = sub.add_parser(name)
        p.add_argument("--bucket", required=True)
        if name in ("put", "get", "head"):
            p.add_argument("--key", required=True)
        if name == "put":
            p.add_argument("--file", required=True)
            p.add_argument("--metadata", default="{}", help="user metadata as a JSON object (ASCII values)")
        if name == "get":
            p.add_argument("--out", required=True)
        if name == "keys":
            p.add_argument("--prefix", default="")
    args = ap.parse_args()
    {"setup": setup, "put": put, "put-tree": put_tree,
     "keys": keys, "get": get, "head": head, "pending-uploads": pending_uploads}[args.cmd](args)


if __name__ == "__main__":
    main()
