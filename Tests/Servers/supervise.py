#!/usr/bin/env python3
"""Runs a server that cannot watch its own parent (moto_server, resumable-upload) so that it never
outlives the test run:

    python3 supervise.py --max-seconds 600 -- COMMAND ARGS...

Starts COMMAND in its own process group and ends that group (SIGTERM, then SIGKILL after 3 s) when
this script's parent dies, when --max-seconds have passed, or when this script gets SIGTERM/SIGINT.
Exits with COMMAND's status when COMMAND exits by itself.
"""

import argparse
import os
import signal
import subprocess
import sys
import time


def die_with_parent():
    """In the child, before exec: the kernel SIGKILLs it when this supervisor dies, however it
    dies (PR_SET_PDEATHSIG), so a server can never be orphaned."""
    import ctypes
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-seconds", type=float, default=600)
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        sys.exit("supervise.py: no command")
    parent = os.getppid()
    child = subprocess.Popen(cmd, start_new_session=True, preexec_fn=die_with_parent)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    deadline = time.monotonic() + args.max_seconds
    while True:
        code = child.poll()
        if code is not None:
            sys.exit(code if code >= 0 else 128 - code)
        if stop or os.getppid() != parent or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    try:
        os.killpg(child.pid, signal.SIGTERM)
        try:
            # resumable-upload can take a while to end on SIGTERM (open keep-alive connections);
            # the caller SIGKILLs us after a few seconds, so do not wait long ourselves.
            child.wait(1)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    except ProcessLookupError:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()
