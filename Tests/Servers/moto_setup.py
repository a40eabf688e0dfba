#!/usr/bin/env python3
"""Sets up a running moto server for the S3 upload tests, and reads objects back as an oracle.

    python3 moto_setup.py setup --endpoint http://127.0.0.1:P --bucket NAME [--bucket NAME2] [--lock]
        Creates the bucket(s), an IAM user with an access key and an inline s3:*/sts:* policy, an IAM
        role (trusting the account, s3:* allowed) and calls STS AssumeRole for session credentials.
        Prints one JSON object: {"access_key_id", "secret_access_key", "session_token", "expiration",
        "bucket", "buckets", "region": "us-east-1", "user_access_key_id", "user_secret_access_key",
        "setup_actions", "role_arn"}.
        With --lock it then turns signature checking on for every later request
        (POST /moto-api/reset-auth with 0) and proves it: a request signed with a wrong secret must
        be refused, or the script fails.

    python3 moto_setup.py get  --endpoint E --bucket B --key K --out FILE   (prints {"sha256","size","etag"})
    python3 moto_setup.py head --endpoint E --bucket B --key K              (prints {"etag","size",
                                                                           "content_type","metadata"})
    python3 moto_setup.py list-uploads --endpoint E --bucket B              (prints [{"key","upload_id"}])
        These sign with the IAM user's long-term key, given by --access-key/--secret-key (or the
        env MOTO_USER_ACCESS_KEY_ID / MOTO_USER_SECRET_ACCESS_KEY).

Signature checking in moto 5 server mode: every request that reaches an authenticated handler
counts as one "action" until INITIAL_NO_AUTH_ACTION_COUNT is reached, then each one is checked.
`setup` with one bucket makes exactly 7 such requests (CreateBucket, CreateUser, PutUserPolicy,
CreateAccessKey, CreateRole, PutRolePolicy, AssumeRole; +1 per extra bucket): starting moto with
INITIAL_NO_AUTH_ACTION_COUNT=7 leaves every later request checked. The Swift harness instead
starts moto with a large count and passes --lock, which does not depend on the count.

What moto 5.2.1 enforces once checking is on (measured, see ServerHarnessTests):
  - the SigV4 signature over method, path, query, the signed headers and x-amz-content-sha256:
    wrong secret -> 403 SignatureDoesNotMatch; unknown key -> 403 InvalidAccessKeyId;
  - the session token of STS credentials: missing -> 403 InvalidAccessKeyId, wrong -> 400 InvalidToken;
  - NOT the body against x-amz-content-sha256 (any claimed hash, or UNSIGNED-PAYLOAD, is accepted
    as long as it is the one signed), NOT X-Amz-Date skew (a 2-day-old date passes), NOT the
    expiry of session credentials (they never expire: fake ExpiredToken with the proxy);
  - a request without x-amz-content-sha256 is hashed by moto from its own idea of the body, which
    for a GET is not the empty string's hash: sign and send the header on every request;
  - an unsigned request (no Authorization) gets a 500, not a 403;
  - a PUT body sent with Content-Type application/x-www-form-urlencoded is stored EMPTY (flask
    takes it as a form).
"""

import argparse
import hashlib
import json
import os
import sys
import urllib.request

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

REGION = "us-east-1"
ACCOUNT = "123456789012"  # moto's default account


def client(service, endpoint, key="testing", secret="testing", token=None):
    return boto3.client(
        service, endpoint_url=endpoint, region_name=REGION,
        aws_access_key_id=key, aws_secret_access_key=secret, aws_session_token=token,
        config=Config(retries={"max_attempts": 1, "mode": "standard"},
                      s3={"addressing_style": "path"}))


def setup(args):
    actions = 0
    s3 = client("s3", args.endpoint)
    for b in args.bucket:
        s3.create_bucket(Bucket=b)
        actions += 1
    iam = client("iam", args.endpoint)
    user = "clipflow-uploader"
    iam.create_user(UserName=user)
    iam.put_user_policy(UserName=user, PolicyName="all-s3", PolicyDocument=json.dumps({
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": ["s3:*", "sts:*"], "Resource": "*"}]}))
    key = iam.create_access_key(UserName=user)["AccessKey"]
    actions += 3
    role = iam.create_role(RoleName="clipflow-upload-role", AssumeRolePolicyDocument=json.dumps({
        "Version": "2012-10-17",
        # moto, unlike AWS, does not take the account root to cover its users: name the user too,
        # so the user can call AssumeRole again (the tests' credential-refresh commands do).
        "Statement": [{"Effect": "Allow", "Principal": {"AWS": [f"arn:aws:iam::{ACCOUNT}:root",
                                                                f"arn:aws:iam::{ACCOUNT}:user/{user}"]},
                       "Action": "sts:AssumeRole"}]}))["Role"]
    iam.put_role_policy(RoleName="clipflow-upload-role", PolicyName="all-s3",
                        PolicyDocument=json.dumps({
                            "Version": "2012-10-17",
                            "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
    actions += 2
    sts = client("sts", args.endpoint, key["AccessKeyId"], key["SecretAccessKey"])
    creds = sts.assume_role(RoleArn=role["Arn"], RoleSessionName="clipflow-test",
                            DurationSeconds=args.duration)["Credentials"]
    actions += 1
    out = {
        "access_key_id": creds["AccessKeyId"],
        "secret_access_key": creds["SecretAccessKey"],
        "session_token": creds["SessionToken"],
        "expiration": creds["Expiration"].isoformat(),
        "bucket": args.bucket[0],
        "buckets": args.bucket,
        "region": REGION,
        "user_access_key_id": key["AccessKeyId"],
        "user_secret_access_key": key["SecretAccessKey"],
        "role_arn": role["Arn"],
        "setup_actions": actions,
    }
    if args.lock:
        req = urllib.request.Request(args.endpoint + "/moto-api/reset-auth", data=b"0", method="POST",
                                     headers={"Content-Type": "text/plain"})
        urllib.request.urlopen(req, timeout=10).read()
        bad = client("s3", args.endpoint, key["AccessKeyId"], "not-the-secret")
        try:
            bad.head_bucket(Bucket=args.bucket[0])
        except ClientError as e:
            code = e.response.get("Error", {}).get("Code")
            status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if status != 403:
                sys.exit(f"moto_setup: a wrongly signed request got {status} {code}, not 403")
        else:
            sys.exit("moto_setup: signature checking is not on: a wrongly signed request worked")
        good = client("s3", args.endpoint, creds["AccessKeyId"], creds["SecretAccessKey"],
                      creds["SessionToken"])
        good.head_bucket(Bucket=args.bucket[0])
    print(json.dumps(out))


def user_client(args):
    key = args.access_key or os.environ.get("MOTO_USER_ACCESS_KEY_ID")
    secret = args.secret_key or os.environ.get("MOTO_USER_SECRET_ACCESS_KEY")
    if not key or not secret:
        sys.exit("moto_setup: --access-key/--secret-key (or MOTO_USER_* env) needed")
    return client("s3", args.endpoint, key, secret)


def get(args):
    s3 = user_client(args)
    r = s3.get_object(Bucket=args.bucket, Key=args.key)
    h = hashlib.sha256()
    size = 0
    with open(args.out, "wb") as f:
        for chunk in r["Body"].iter_chunks(256 * 1024):
            h.update(chunk)
            size += len(chunk)
            f.write(chunk)
    print(json.dumps({"sha256": h.hexdigest(), "size": size, "etag": r["ETag"]}))


def head(args):
    s3 = user_client(args)
    r = s3.head_object(Bucket=args.bucket, Key=args.key)
    print(json.dumps({"etag": r["ETag"], "size": r["ContentLength"],
                      "content_type": r.get("ContentType", ""), "metadata": r.get("Metadata", {})}))


def list_uploads(args):
    s3 = user_client(args)
    r = s3.list_multipart_uploads(Bucket=args.bucket)
    print(json.dumps([{"key": u["Key"], "upload_id": u["UploadId"]} for u in r.get("Uploads", [])]))


def main():
    ap = argparse.ArgumentParser(description="moto setup and object oracle for the S3 tests")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("setup")
    s.add_argument("--endpoint", required=True)
    s.add_argument("--bucket", action="append", required=True)
    s.add_argument("--duration", type=int, default=3600)
    s.add_argument("--lock", action="store_true", help="check every signature from now on")
    for name in ("get", "head", "list-uploads"):
        p = sub.add_parser(name)
        p.add_argument("--endpoint", required=True)
        p.add_argument("--bucket", required=True)
        p.add_argument("--access-key")
        p.add_argument("--secret-key")
        if name != "list-uploads":
            p.add_argument("--key", required=True)
        if name == "get":
            p.add_argument("--out", required=True)
    args = ap.parse_args()
    {"setup": setup, "get": get, "head": head, "list-uploads": list_uploads}[args.cmd](args)


if __name__ == "__main__":
    main()
