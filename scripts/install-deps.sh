#!/usr/bin/env bash
# Installs the system packages clipflow needs on Debian 12, if any are missing:
# FFmpeg 5.1 development libraries (build), the ffmpeg/ffprobe CLI and mediainfo (test oracles).
set -euo pipefail
pkgs=(pkg-config libavformat-dev libavcodec-dev libswscale-dev libavutil-dev ffmpeg mediainfo)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing: ${missing[*]}" >&2
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
