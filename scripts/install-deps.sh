#!/usr/bin/env bash
# Installs the system packages clipflow needs on Debian 12, if any are missing:
# FFmpeg 5.1 development libraries (build), the ffmpeg/ffprobe CLI and mediainfo (test oracles),
# and the Python `jsonschema` package (PyPI; an independent check of schema/pipeline.schema.json).
set -euo pipefail
pkgs=(pkg-config libavformat-dev libavcodec-dev libswscale-dev libavutil-dev ffmpeg mediainfo)
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
if ! python3 -c 'import jsonschema' 2>/dev/null; then
  echo "installing: jsonschema (PyPI)" >&2
  python3 -m pip install -q 'jsonschema>=4.18,<5' >&2
fi
