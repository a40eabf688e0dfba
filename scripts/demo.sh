#!/usr/bin/env bash
# The main job on inputs it makes itself: three phone-style clip fragments (H.264 + AAC, cut from
# one continuous recording) are joined losslessly, turned 90 degrees (portrait), made fast-start,
# and given a cover image; a webcam clip that differs is joined to them with `merge --conform` (only
# it is re-encoded) and the result transcoded for the web and published as an HLS ladder (linted);
# then the capture flow records the test pattern and uploads the result by TUS to a local TUS
# server; and it ends by serving what it made: `clipflow serve` receives the merged videos by the
# Gcore flow, processes them into feed ladders and serves the feed page (until Ctrl-C on a
# terminal; stopped at once otherwise). Outputs go to out/demo/.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=.build/debug/clipflow
dir=out/demo
mkdir -p "$dir"
for i in 0 1 2; do
  f="$dir/fragment$i.mp4"
  [ -s "$f" ] && continue
  ffmpeg -v error -y \
    -f lavfi -i "testsrc2=size=640x360:rate=30,trim=start_frame=$((i*90)):end_frame=$((i*90+90)),setpts=PTS-STARTPTS" \
    -f lavfi -i "aevalsrc=0.3*sin(2*PI*440*(t+$((i*3)))):s=48000:d=3" \
    -c:v libx264 -preset veryfast -g 30 -bf 2 -pix_fmt yuv420p -c:a aac -b:a 128k -shortest "$f"
done
"$bin" merge -y --rotate 90 -o "$dir/merged.mp4" --thumbnail "$dir/cover.jpg" "$dir"/fragment{0,1,2}.mp4
echo "--- ffprobe of $dir/merged.mp4"
ffprobe -v error -show_entries stream=codec_name,width,height,nb_frames,duration:stream_side_data=rotation \
  -of compact=p=0 "$dir/merged.mp4"
echo "--- top-level boxes (moov before mdat = fast start)"
ffprobe -v trace "$dir/merged.mp4" 2>&1 | grep -o "type:'[a-z]*' parent:'root'" | tr '\n' ' '; echo
echo "--- cover"
ffprobe -v error -show_entries stream=width,height -of csv=p=0 "$dir/cover.jpg"
echo "--- the same job as a pipeline: pipelines/fragments-to-folder.json"
rm -rf "$dir/pipeline"
"$bin" run --set CLIPS="$dir" --set OUT="$dir/pipeline" pipelines/fragments-to-folder.json
ls -l "$dir/pipeline/publish"
echo "--- clips that differ: a webcam clip (320x240, 25 fps, 44.1 kHz mono, MKV) after the phone's fragments"
[ -s "$dir/webcam.mkv" ] || ffmpeg -v error -y -f lavfi -i "testsrc2=size=320x240:rate=25" \
  -f lavfi -i "sine=f=660:r=44100" -t 2 -c:v libx264 -preset veryfast -c:a aac -ac 1 "$dir/webcam.mkv"
"$bin" merge --conform --plan "$dir"/fragment{0,1,2}.mp4 "$dir/webcam.mkv"; echo
"$bin" merge -y --conform -o "$dir/conformed.mp4" "$dir"/fragment{0,1,2}.mp4 "$dir/webcam.mkv"
ffprobe -v error -show_entries stream=codec_name,width,height,nb_frames,duration -of compact=p=0 "$dir/conformed.mp4"
echo "--- transcoded for the web: clipflow transcode --preset web-360p (H.264 High, AAC, fast start)"
"$bin" transcode -y --preset web-360p -o "$dir/web-360p.mp4" "$dir/merged.mp4"
ffprobe -v error -show_entries stream=codec_name,profile,width,height,nb_frames:stream_side_data=rotation -of compact=p=0 "$dir/web-360p.mp4"
echo "--- an HLS ladder for a feed: clipflow hls --profile feed (one decode, portrait renditions, 1 s first segment)"
rm -rf "$dir/hls"
"$bin" hls --profile feed -o "$dir/hls" "$dir/merged.mp4"
grep -E "STREAM-INF|MEDIA:" "$dir/hls/master.m3u8"
echo "--- clipflow hls lint $dir/hls"
"$bin" hls lint "$dir/hls"; echo
echo "--- the capture flow: pipelines/testpattern-to-upload.json (6 s of the test pattern, recorded in real time,"
echo "    uploaded by TUS to a local resumable-upload server on 127.0.0.1; a real one is https://host/files)"
rm -rf "$dir/capture" "$dir/tus"
mkdir -p "$dir/tus"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
python3 Tests/Servers/supervise.py --max-seconds 300 -- python3 -m resumable_upload serve --host 127.0.0.1 --port "$port" \
  --upload-dir "$dir/tus" --db-path "$dir/tus/db.sqlite" --checksum-algorithms sha1,sha256 --log-level ERROR &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
  python3 -c "import socket,sys; s=socket.socket(); sys.exit(s.connect_ex(('127.0.0.1',$port)))" 2>/dev/null && break
  sleep 0.1
done
"$bin" run --set DURATION=6 --set OUT="$dir/capture" --set TUS_ENDPOINT="http://127.0.0.1:$port/files" pipelines/testpattern-to-upload.json
"$bin" clips "$dir/capture/clips"
ffprobe -v error -show_entries stream=codec_name,width,height,nb_frames:stream_side_data=rotation \
  -of compact=p=0 "$dir/capture/video.mp4"
echo "--- the upload queue after the run"
"$bin" upload list --queue "$dir/capture/upload-queue"
echo "--- sha256 of the video here and of what the server stored"
sha256sum "$dir/capture/video.mp4" | cut -c1-64
for f in "$dir"/tus/*; do
  case "$f" in *.sqlite*|*.json) continue ;; esac
  if [ "$(stat -c %s "$f")" = "$(stat -c %s "$dir/capture/video.mp4")" ]; then sha256sum "$f" | cut -c1-64; fi
done
echo "--- clipflow serve: the hosting side (TUS + hosting API + processing + feed page) on 127.0.0.1"
rm -rf "$dir/serve" "$dir/serve-queue"
sport=8080
python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',$sport))" 2>/dev/null \
  || sport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
CLIPFLOW_API_KEY=demo-key "$bin" serve --data "$dir/serve" --listen "127.0.0.1:$sport" &
serve=$!
trap 'kill $server $serve 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$sport/feed.json" && break; sleep 0.1; done
CLIPFLOW_UPLOAD_TOKEN=demo-key "$bin" upload "$dir/merged.mp4" "$dir/conformed.mp4" --to gcore --endpoint "http://127.0.0.1:$sport" \
  --upload-url 'http://{hostname}/files' --queue "$dir/serve-queue"
python3 - "http://127.0.0.1:$sport" <<'PY'
import json, sys, time, urllib.request
base = sys.argv[1]
def get(path):
    return json.load(urllib.request.urlopen(urllib.request.Request(base + path, headers={"Authorization": "Bearer demo-key"})))
deadline = time.time() + 300
while time.time() < deadline:
    videos = get("/videos")
    if all(v["status"] in ("ready", "error") for v in videos): break
    time.sleep(0.5)
for v in videos:
    print(f"video {v['id']} {v['name']}: {v['status']}, {v['duration']} s, renditions {[r['name'] for r in v['renditions']]}")
    print(f"  hls_url {v['hls_url']}\n  cover   {v['screenshot']}")
sys.exit(0 if all(v["status"] == "ready" for v in videos) else 1)
PY
"$bin" hls lint "$(curl -s -H 'Authorization: Bearer demo-key' "http://127.0.0.1:$sport/videos/1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["hls_url"])')"; echo
if [ -t 0 ] && [ -z "${CI:-}" ]; then
  echo "--- serving: the feed at http://127.0.0.1:$sport/ , the list at http://127.0.0.1:$sport/videos (password demo-key, any user name) (Ctrl-C to stop)"
  wait $serve
else
  echo "--- served: the feed was at http://127.0.0.1:$sport/ (stopped: not a terminal)"
  kill -TERM $serve; wait $serve || true
fi
