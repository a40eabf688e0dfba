#!/usr/bin/env python3
"""MP4 fuzz run: mutants of real clips (mp4mutate.py) into `clipflow merge` and `merge --thumbnail`.

    fuzz_mp4.py --clipflow BIN --fixtures DIR --work DIR [--seed S] [--cases N] [--timeout SEC] [--jobs J]

DIR holds pairs of good clips named FAMILY-a.* and FAMILY-b.* (e.g. h264-a.mp4, h264-b.mp4): clips
of one family can be joined. Missing ones of the standard set (H.264+AAC MP4, HEVC (hvc1)+AAC MP4,
MOV, video-only MP4) are made first with the ffmpeg CLI. Case k (seed S + k) takes a family, mutates its first clip and runs it
with the family's second clip, in both orders, through `merge` and `merge --thumbnail`. Each run must:
  - end by itself within the timeout (no hang) and not by a signal (no crash);
  - exit 0 with an output ffmpeg decodes (`ffmpeg -v error -i OUT -enc_time_base -1 -f null -` exits
    0, and prints no error unless the mutant itself decodes with errors: payload bytes are copied,
    not repaired) and whose video decode times strictly increase (ffprobe),
    plus a cover JPEG that ffmpeg decodes when one was asked for;
  - or exit 65 (bad input) or 1 (a library failure) with an `error:` line naming the mutant and not the good clip (except a "cannot join
    'A' and 'B'" compatibility refusal, which names both), no cover, and no merged output unless
    the merge itself succeeded and only the cover failed (then the output must decode);
  - leave no temporary file in the output folder, and both inputs byte-identical.
Prints one line per failing run (with the case's seed and the mutation, so it can be reproduced with
`mp4mutate.py`) and a summary; exit status 1 if any run failed, 2 on a usage error.
"""
import argparse
import concurrent.futures
import hashlib
import os
import random
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mp4mutate  # noqa: E402


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def decode_errors(path, timeout):
    """ffmpeg's verdict on a file: (exit status, error text). Frames keep the file's own time base
    (`-enc_time_base -1`): by default the CLI retimes them onto its guess of a constant frame rate,
    and two clips of different rates joined (a variable-rate file) then read as "non monotonically
    increasing dts" although the file's timestamps increase (`video_dts_increase` checks those)."""
    try:
        r = subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-i", path, "-enc_time_base", "-1", "-f", "null", "-"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=timeout)
    except subprocess.TimeoutExpired:
        return 124, "ffmpeg timed out"
    return r.returncode, r.stderr.decode("utf-8", "replace").strip()


# The good clips: 1 s, 160x120 at 25 fps, B-frames, in each container and codec a merge takes.
FIXTURES = {
    "h264-%s.mp4": ["-c:v", "libx264", "-preset", "ultrafast", "-g", "12", "-bf", "2", "-pix_fmt", "yuv420p",
                    "-c:a", "aac", "-b:a", "64k"],
    "hevc-%s.mp4": ["-c:v", "libx265", "-preset", "ultrafast", "-x265-params", "log-level=error", "-g", "12",
                    "-bf", "2", "-pix_fmt", "yuv420p", "-tag:v", "hvc1", "-c:a", "aac", "-b:a", "64k"],
    "mov-%s.mov": ["-c:v", "libx264", "-preset", "ultrafast", "-g", "12", "-bf", "2", "-pix_fmt", "yuv420p",
                   "-c:a", "aac", "-b:a", "64k"],
    "vonly-%s.mp4": ["-an", "-c:v", "libx264", "-preset", "ultrafast", "-g", "12", "-bf", "2", "-pix_fmt", "yuv420p"],
}


def make_fixtures(fixtures):
    """Makes the good clip pairs with the ffmpeg CLI (clip a: seconds 0-1 of a moving picture and a
    tone, clip b: seconds 1-2), unless they are there."""
    os.makedirs(fixtures, exist_ok=True)
    for pattern, codec in FIXTURES.items():
        for k, part in enumerate("ab"):
            path = os.path.join(fixtures, pattern % part)
            if os.path.exists(path):
                continue
            subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-y",
                            "-f", "lavfi", "-i", "testsrc2=size=160x120:rate=25,trim=start_frame=%d:end_frame=%d,setpts=PTS-STARTPTS"
                            % (25 * k, 25 * k + 25),
                            "-f", "lavfi", "-i", "sine=f=440:sample_rate=48000:duration=1"]
                           + codec + [path + ".tmp" + os.path.splitext(path)[1]], check=True)
            os.rename(path + ".tmp" + os.path.splitext(path)[1], path)


def video_dts_increase(path, timeout):
    """Whether the video packets' decode times, as ffprobe reads them, strictly increase."""
    r = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries", "packet=dts",
                        "-of", "csv=p=0", path], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=timeout)
    dts = [int(x) for x in r.stdout.decode().split() if x.strip().lstrip("-").isdigit()]
    return bool(dts) and all(a < b for a, b in zip(dts, dts[1:]))


def families(fixtures):
    fams = {}
    for name in sorted(os.listdir(fixtures)):
        stem, ext = os.path.splitext(name)
        if stem.endswith("-a") or stem.endswith("-b"):
            fams.setdefault(stem[:-2], {})[stem[-1]] = os.path.join(fixtures, name)
    return {k: v for k, v in fams.items() if "a" in v and "b" in v}


def run_case(k, seed, fams, args):
    rng = random.Random(seed)
    fam = rng.choice(sorted(fams))
    good_a, good_b = fams[fam]["a"], fams[fam]["b"]
    case_dir = os.path.join(args.work, "case-%d" % k)
    shutil.rmtree(case_dir, ignore_errors=True)
    os.makedirs(case_dir)
    ext = os.path.splitext(good_a)[1]
    mutant = os.path.join(case_dir, "mutant" + ext)
    good = os.path.join(case_dir, "good" + ext)
    with open(good_a, "rb") as f:
        data, what = mp4mutate.mutate(f.read(), seed)
    with open(mutant, "wb") as f:
        f.write(data)
    shutil.copyfile(good_b, good)
    before = (sha(mutant), sha(good))
    mutant_decodes_cleanly = None
    failures = []
    statuses = []
    label = "seed %d (%s, %s)" % (seed, fam, what)

    for order in ("mutant-first", "good-first"):
        inputs = [mutant, good] if order == "mutant-first" else [good, mutant]
        for thumb in (False, True):
            out_dir = os.path.join(case_dir, "out-%s-%s" % (order, "cover" if thumb else "plain"))
            os.makedirs(out_dir)
            out = os.path.join(out_dir, "merged.mp4")
            cover = os.path.join(out_dir, "cover.jpg")
            cmd = [args.clipflow, "merge", "--quiet", "-o", out] + (["--thumbnail", cover] if thumb else []) + inputs
            run = "%s %s%s" % (label, order, " --thumbnail" if thumb else "")
            try:
                r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=args.timeout)
            except subprocess.TimeoutExpired:
                failures.append("%s: hang (no exit within %g s)" % (run, args.timeout))
                continue
            statuses.append(r.returncode)
            err = r.stderr.decode("utf-8", "replace")
            left = sorted(set(os.listdir(out_dir)) - {"merged.mp4", "cover.jpg"})
            if left:
                failures.append("%s: left behind %s" % (run, left))
            # Documented statuses: 0 merged, 65 a clip refused as bad input, 1 a library failure.
            if r.returncode not in (0, 1, 65):
                failures.append("%s: exit %d (a crash or undocumented status): %s" % (run, r.returncode, err.strip()[-500:]))
                continue
            if r.returncode == 0:
                if not os.path.exists(out):
                    failures.append("%s: exit 0 but no output" % run)
                    continue
                status, text = decode_errors(out, args.timeout)
                if status != 0:
                    failures.append("%s: exit 0 but ffmpeg cannot decode the output: %s" % (run, text[-300:]))
                elif not video_dts_increase(out, args.timeout):
                    failures.append("%s: exit 0 but the output's video decode times do not increase" % run)
                elif text:
                    if mutant_decodes_cleanly is None:
                        mutant_decodes_cleanly = decode_errors(mutant, args.timeout) == (0, "")
                    if mutant_decodes_cleanly:
                        failures.append("%s: exit 0 but the output decodes with errors the inputs do not have: %s"
                                        % (run, text[-300:]))
                if thumb:
                    if not os.path.exists(cover):
                        failures.append("%s: exit 0 but no cover" % run)
                    elif decode_errors(cover, args.timeout)[0] != 0:
                        failures.append("%s: the cover does not decode" % run)
                continue
            # Exit 65 or 1: a message for the person at the terminal.
            lines = [l for l in err.splitlines() if l.startswith("error: ")]
            if not lines:
                failures.append("%s: exit %d without an 'error:' line: %s" % (run, r.returncode, err.strip()[-300:]))
            msg = "\n".join(lines)
            if mutant not in msg:
                failures.append("%s: the error does not name the bad file: %s" % (run, msg[-400:]))
            if good in msg and "cannot join '" not in msg:
                failures.append("%s: the error names the good file: %s" % (run, msg[-400:]))
            if "internal" in msg:
                failures.append("%s: an internal error instead of a reason: %s" % (run, msg[-400:]))
            if os.path.exists(cover):
                failures.append("%s: exit %d but a cover was written" % (run, r.returncode))
            if os.path.exists(out):
                merged_ok = thumb and "cover" in msg.lower() and decode_errors(out, args.timeout)[0] == 0
                if not merged_ok:
                    failures.append("%s: exit %d but an output was left" % (run, r.returncode))
    if (sha(mutant), sha(good)) != before:
        failures.append("%s: an input was modified" % label)
    if not failures:
        shutil.rmtree(case_dir, ignore_errors=True)
    return failures, what, statuses


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clipflow", required=True)
    p.add_argument("--fixtures", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--seed", type=int, default=int(os.environ.get("CLIPFLOW_FUZZ_SEED", "1")))
    p.add_argument("--cases", type=int, default=int(os.environ.get("CLIPFLOW_FUZZ_CASES", "100")))
    p.add_argument("--timeout", type=float, default=30)
    p.add_argument("--jobs", type=int, default=2)
    args = p.parse_args()
    make_fixtures(args.fixtures)
    fams = families(args.fixtures)
    if not fams:
        print("fuzz_mp4: no FAMILY-a/FAMILY-b clip pairs in %s" % args.fixtures, file=sys.stderr)
        return 2
    os.makedirs(args.work, exist_ok=True)
    failed = 0
    kinds = {}
    exits = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(run_case, k, args.seed + k, fams, args) for k in range(args.cases)]
        for f in futures:
            failures, what, statuses = f.result()
            for st in statuses:
                exits[st] = exits.get(st, 0) + 1
            op = what.split(" ")[0]
            kinds[op] = kinds.get(op, 0) + 1
            for line in failures:
                print("FAIL " + line, flush=True)
            failed += bool(failures)
    print("fuzz_mp4: %d cases (seeds %d..%d, %s; runs by exit status: %s), %d failed"
          % (args.cases, args.seed, args.seed + args.cases - 1,
             ", ".join("%s %d" % kv for kv in sorted(kinds.items())),
             ", ".join("%d: %d" % kv for kv in sorted(exits.items())), failed), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
