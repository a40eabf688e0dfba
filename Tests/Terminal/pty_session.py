#!/usr/bin/env python3
"""A person at a terminal, for tests: runs a command in a pseudo-terminal and renders what it
prints with pyte (a VT100 emulator), so a test judges the screen a person would see.

usage: pty_session.py STEPS_JSON -- COMMAND [ARG...]

STEPS_JSON is a list of steps, run in order:
  {"wait": REGEX, "timeout": S}   until the screen (its lines joined by newlines) matches REGEX
  {"sleep": S}
  {"press": TEXT}                 types TEXT (no Enter unless it holds one; "\u0003" is Ctrl-C)
  {"screen": NAME}                keeps the screen as it is now
  {"termios": NAME}               keeps the terminal's mode as the command has it now
  {"exit": S}                     waits up to S seconds for the command to end
Prints one JSON object: "screens" {NAME: {"lines": [...], "cursor": ROW}}, "modes" {NAME: {...}},
"before" and "after" (the terminal's mode before the command started and after it ended, as
{"icanon", "echo", "isig", "attrs"}), "status" (the exit status; -N for a signal), "raw" (every
byte printed, as text) and "failed" (why a step did not succeed, or null). The command is killed
if it is still running at the end. Exit status 0 unless the driver itself could not run.
"""
import fcntl
import json
import os
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time

import pyte

ROWS, COLS = 40, 140


def mode(fd):
    attrs = termios.tcgetattr(fd)
    lflag = attrs[3]
    return {
        "icanon": bool(lflag & termios.ICANON),
        "echo": bool(lflag & termios.ECHO),
        "isig": bool(lflag & termios.ISIG),
        "attrs": [a if not isinstance(a, list) else [x if isinstance(x, int) else x.hex() for x in a] for a in attrs],
    }


def main():
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        sys.exit(__doc__)
    steps = json.loads(sys.argv[1])
    argv = sys.argv[3:]

    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
    screen = pyte.Screen(COLS, ROWS)
    stream = pyte.ByteStream(screen)
    raw = bytearray()
    env = dict(os.environ, TERM="xterm")
    before = mode(slave)
    proc = subprocess.Popen(
        argv, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True,
        # The terminal becomes the command's controlling terminal: Ctrl-C reaches it as SIGINT.
        preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))

    def pump(seconds):
        """Reads what the command prints for up to `seconds`."""
        end = time.monotonic() + seconds
        while True:
            left = end - time.monotonic()
            r, _, _ = select.select([master], [], [], max(0, min(left, 0.02)))
            if r:
                try:
                    data = os.read(master, 65536)
                except OSError:
                    data = b""
                if data:
                    raw.extend(data)
                    stream.feed(data)
            if left <= 0:
                return

    def text():
        return "\n".join(line.rstrip() for line in screen.display)

    out = {"screens": {}, "modes": {}, "before": before, "after": None, "status": None, "failed": None}
    try:
        for step in steps:
            if "wait" in step:
                deadline = time.monotonic() + step.get("timeout", 10)
                pattern = re.compile(step["wait"], re.M)
                while not pattern.search(text()):
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"timed out waiting for /{step['wait']}/")
                    if proc.poll() is not None:
                        pump(0.1)
                        if pattern.search(text()):
                            break
                        raise RuntimeError(f"the command ended (status {proc.returncode}) before /{step['wait']}/")
                    pump(0.05)
            elif "sleep" in step:
                pump(step["sleep"])
            elif "press" in step:
                os.write(master, step["press"].encode())
            elif "screen" in step:
                pump(0.02)
                out["screens"][step["screen"]] = {"lines": [line.rstrip() for line in screen.display], "cursor": screen.cursor.y}
            elif "termios" in step:
                out["modes"][step["termios"]] = mode(slave)
            elif "exit" in step:
                deadline = time.monotonic() + step["exit"]
                while proc.poll() is None:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"the command did not end within {step['exit']} s")
                    pump(0.05)
                pump(0.1)
                out["status"] = proc.returncode
    except RuntimeError as e:
        out["failed"] = str(e)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        out["after"] = mode(slave)
        out["screens"].setdefault("end", {"lines": [line.rstrip() for line in screen.display], "cursor": screen.cursor.y})
        out["raw"] = raw.decode("utf-8", "replace")
        os.close(master)
        os.close(slave)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
