#!/usr/bin/env bash
# Installs what building clipflow and `make demo` need on Debian 12, if any of it is missing
# (`make build`, `release`, `install` and `demo` run it; safe to run again). It starts no service.
# The tests need much more: scripts/install-test-deps.sh, which runs this first.
#
# Debian packages (apt-get, through sudo when not root):
#   pkg-config                       how SwiftPM finds the system libraries below
#   libavformat-dev libavcodec-dev libswscale-dev libswresample-dev libavutil-dev
#                                    FFmpeg 5.1's libraries: all the media work (CClipFlowFFmpeg)
#   libcurl4-openssl-dev libssl-dev  libcurl and OpenSSL's libcrypto, for uploads (CClipFlowCurl:
#                                    their headers when building, the libraries opened when uploading)
#   libasound2-dev                   alsa-lib: microphones (CClipFlowALSA)
#   libsqlite3-dev                   SQLite: `clipflow serve`'s database, through GRDB
#   zlib1g-dev                       zlib: gzip of `clipflow serve`'s text answers (CClipFlowZlib)
#   linux-libc-dev                   the V4L2 header, linux/videodev2.h: cameras (CClipFlowV4L2)
#   ffmpeg                           the ffmpeg and ffprobe commands: scripts/demo.sh makes its clips
#                                    with one and shows what came out with the other
#   curl                             scripts/demo.sh asks `clipflow serve` for its videos
#   python3 python3-pip              scripts/demo.sh: free ports, its TUS server (run under
#                                    Tests/Servers/supervise.py), reading `clipflow serve`'s answers
# From PyPI (pip):
#   resumable-upload                 the TUS 1.0 server scripts/demo.sh uploads its recording to
set -euo pipefail
. "$(dirname "$0")/install-lib.sh"
install_debian pkg-config libavformat-dev libavcodec-dev libswscale-dev libswresample-dev libavutil-dev \
  libcurl4-openssl-dev libssl-dev libasound2-dev libsqlite3-dev zlib1g-dev linux-libc-dev ffmpeg curl python3 python3-pip
install_python 'import resumable_upload' 'resumable-upload==0.3.0'
