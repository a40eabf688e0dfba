'use strict';
window.feedLog = [];
const log = (what, index) => window.feedLog.push({ what, index, t: performance.now() });
const MS = window.ManagedMediaSource || window.MediaSource;
const AHEAD = 10;  // seconds the video on screen keeps buffered ahead
const nativeHLS = document.createElement('video').canPlayType('application/vnd.apple.mpegurl') !== '';

const soundPreference = {
  get() { try { return localStorage.getItem('clipflow.sound') === 'on'; } catch { return false; } },
  set(on) { try { localStorage.setItem('clipflow.sound', on ? 'on' : 'off'); } catch {} }
};
let soundOn = soundPreference.get();

// Throughput of media fetches, bits per second: a moving average over responses of 16 KB or more.
const throughput = {
  bps: 0,
  add(bytes, ms) {
    if (bytes < 16384 || ms <= 0) return;
    const sample = bytes * 8000 / ms;
    this.bps = this.bps ? 0.5 * this.bps + 0.5 * sample : sample;
  }
};

// The rendition to fetch next: the highest whose peak fits 70% of the throughput, no taller
// than the screen's short side needs; the smallest before anything was measured.
function chooseRendition(renditions) {
  const sorted = [...renditions].sort((a, b) => a.bandwidth - b.bandwidth);
  const screenShort = Math.min(innerWidth, innerHeight) * Math.min(devicePixelRatio || 1, 2);
  let best = sorted[0];
  for (const r of sorted) {
    const short = Math.min(r.width || 0, r.height || 0);
    if (r !== sorted[0] && short > screenShort * 1.25) break;
    if (throughput.bps && r.bandwidth <= throughput.bps * 0.7) best = r;
  }
  return best;
}

// A media fetch, read as it arrives: `chunks` grows as the body comes in, `whole` resolves to
// every byte (and rejects when the fetch fails or is aborted). Read by one reader.
class Download {
  constructor(url, signal) {
    this.chunks = [];
    this.ended = false;
    this.wake = null;
    this.stopper = new AbortController();
    this.follow(signal);
    this.whole = this.read(url, this.stopper.signal);
    this.whole.catch(() => {});
  }
  // Aborted when `signal` is: a download started early follows the signal of the player that
  // takes it.
  follow(signal) {
    if (!signal) return;
    if (signal.aborted) this.stopper.abort();
    else signal.addEventListener('abort', () => this.stopper.abort(), { once: true });
  }
  async read(url, signal) {
    const t0 = performance.now();
    try {
      const response = await fetch(url, { signal });
      if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
      const reader = response.body.getReader();
      let length = 0;
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        this.chunks.push(value);
        length += value.byteLength;
        this.notify();
      }
      throughput.add(length, performance.now() - t0);
      return joined(this.chunks, length);
    } finally {
      this.ended = true;
      this.notify();
    }
  }
  notify() { const wake = this.wake; this.wake = null; if (wake) wake(); }
  // Resolves once there are more than `count` chunks or the download has ended.
  async more(count) {
    while (this.chunks.length <= count && !this.ended) await new Promise(resolve => { this.wake = resolve; });
  }
}

function joined(chunks, length = chunks.reduce((n, c) => n + c.byteLength, 0)) {
  if (chunks.length === 1) return chunks[0];
  const out = new Uint8Array(length);
  let at = 0;
  for (const c of chunks) { out.set(c, at); at += c.byteLength; }
  return out;
}

// Downloads started before their player existed (the first video's, `fetchEarly`), by URL: each
// taken once by the player's `download` of that URL.
const early = new Map();

function download(url, signal) {
  if (early.has(url)) { const taken = early.get(url); early.delete(url); taken.follow(signal); return taken; }
  return new Download(url, signal);
}

const fetchBytes = (url, signal) => download(url, signal).whole;

// A media playlist's segments: [{uri, init (absolute: the init section before it), start,
// duration}], `ended` when it has
// #EXT-X-ENDLIST (a recording's playlist grows until then). Asked again each time (`no-cache`).
async function mediaSegments(url, signal) {
  const response = await fetch(url, { signal, cache: 'no-cache' });
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  const lines = (await response.text()).split('\n').map(l => l.trim());
  const segments = [];
  let start = 0, duration = null, init = null;
  for (const line of lines) {
    const map = line.startsWith('#EXT-X-MAP:') && /URI="([^"]*)"/.exec(line);
    if (map) init = new URL(map[1], url).href;
    else if (line.startsWith('#EXTINF:')) duration = parseFloat(line.slice(8));
    else if (line && !line.startsWith('#') && duration !== null) {
      segments.push({ uri: new URL(line, url).href, init, start, duration });
      start += duration;
      duration = null;
    }
  }
  segments.ended = lines.includes('#EXT-X-ENDLIST');
  return segments;
}

function appendTo(buffer, data) {
  return new Promise((resolve, reject) => {
    const done = () => { buffer.removeEventListener('error', fail); resolve(); };
    const fail = () => { buffer.removeEventListener('updateend', done); reject(new Error('the browser refused a segment')); };
    buffer.addEventListener('updateend', done, { once: true });
    buffer.addEventListener('error', fail, { once: true });
    buffer.appendBuffer(data);
  });
}

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));

// A WebVTT storyboard's cues: [{start, end, url, x, y, w, h}] (`sprite.jpg#xywh=X,Y,W,H`).
function storyboardCues(text, base) {
  const seconds = s => s.split(':').reduce((t, part) => t * 60 + Number(part), 0);
  const cues = [];
  for (const block of text.split(/\r?\n\r?\n/)) {
    const lines = block.split(/\r?\n/);
    const at = lines.findIndex(l => l.includes('-->'));
    if (at < 0 || !lines[at + 1]) continue;
    const [start, end] = lines[at].split('-->').map(t => seconds(t.trim().split(/\s+/)[0]));
    const [file, box] = lines[at + 1].trim().split('#xywh=');
    if (!box) continue;
    const [x, y, w, h] = box.split(',').map(Number);
    cues.push({ start, end, url: new URL(file, base).href, x, y, w, h });
  }
  return cues;
}
const storyboards = new Map();
function storyboard(entry) {
  if (!entry.storyboard) return Promise.resolve([]);
  if (!storyboards.has(entry.id)) {
    const url = new URL(entry.storyboard, location.href).href;
    storyboards.set(entry.id, fetch(url).then(r => (r.ok ? r.text() : '')).then(text => storyboardCues(text, url)).catch(() => []));
  }
  return storyboards.get(entry.id);
}

// One track (video or audio) of a Media Source player: its SourceBuffer and what comes next.
class Track {
  constructor(player, kind, renditions) {
    this.player = player;
    this.kind = kind;
    this.renditions = renditions;
    // A rendition whose first fetches started early (`fetchEarly`) is the one chosen then.
    this.rendition = renditions.find(r => early.has(this.url(r.init))) || (kind === 'video' ? chooseRendition(renditions) : renditions[0]);
    this.buffer = player.source.addSourceBuffer(`${kind}/mp4; codecs="${this.rendition.codecs}"`);
    this.appendedInit = null;
    this.segments = new Map();  // rendition name -> its segments, once read
    this.next = 0;
    this.seekTo = undefined;
  }
  url(uri) { return new URL(uri, this.player.base).href; }
  async append(data) {
    try { await appendTo(this.buffer, data); } catch (e) {
      if (this.player.closed) throw e;
      throw Object.assign(new Error(`${this.kind}: ${e.message}`), { name: e.name });
    }
  }
  // `init`: its bytes on their way already (else fetched here).
  async useRendition(r, signal, init) {
    if (this.appendedInit === r) return;
    if (this.appendedInit && r.codecs !== this.appendedInit.codecs && this.buffer.changeType) this.buffer.changeType(`${this.kind}/mp4; codecs="${r.codecs}"`);
    await this.append(await (init || fetchBytes(this.url(r.init), signal)));
    this.appendedInit = r;
    this.initURL = this.url(r.init);
  }
  // Appends the init section `segment` follows when it is not the last one appended (a
  // recording whose camera changed: a discontinuity in its playlist).
  async initFor(segment, signal) {
    if (!segment.init || segment.init === this.initURL) return;
    await this.append(await fetchBytes(segment.init, signal));
    this.initURL = segment.init;
  }
  // The init and first segment of the chosen rendition (feed.json names them), fetched side by
  // side and appended in order, while its playlist is read for the segments after.
  async first(signal) {
    if (this.player.live) return this.firstLive(signal);
    this.list(this.rendition, signal);
    const init = fetchBytes(this.url(this.rendition.init), signal), segment = download(this.url(this.rendition.segment), signal);
    await this.useRendition(this.rendition, signal, init);
    await this.appendAsItArrives(segment);
    this.next = 1;
  }
  // A recording being recorded starts at its live edge: the newest segment of its playlist.
  async firstLive(signal) {
    const segments = await this.list(this.rendition, signal);
    const edge = Math.max(0, segments.length - 1);
    await this.useRendition(this.rendition, signal);
    if (segments.length) {
      await this.initFor(segments[edge], signal);
      await this.appendAsItArrives(download(segments[edge].uri, signal));
    }
    this.next = edge + 1;
  }
  // Appends `segment` chunk by chunk as it arrives, so its first pictures can show before its
  // last byte is in. A segment cut short leaves the parser reset for the next one.
  async appendAsItArrives(segment) {
    let appended = 0;
    try {
      for (;;) {
        await segment.more(appended);
        if (segment.chunks.length === appended) break;
        const parts = segment.chunks.slice(appended);
        appended = segment.chunks.length;
        await this.append(joined(parts));
      }
      await segment.whole;
    } catch (e) {
      if (!this.player.closed && this.player.source.readyState === 'open') try { this.buffer.abort(); } catch {}
      throw e;
    }
  }
  // A rendition's segments, read once (again after a failed or aborted read).
  list(r, signal) {
    if (!this.segments.has(r.name)) {
      const read = mediaSegments(this.url(r.playlist), signal);
      read.catch(() => { if (this.segments.get(r.name) === read) this.segments.delete(r.name); });
      this.segments.set(r.name, read);
    }
    return this.segments.get(r.name);
  }
  bufferedAhead() {
    const t = this.player.video.currentTime, b = this.buffer.buffered;
    for (let i = 0; i < b.length; i++) if (b.start(i) <= t + 0.1 && t < b.end(i)) return b.end(i) - t;
    return 0;
  }
  // Appends the next segment; false once there is none.
  async more(signal) {
    const r = this.kind === 'video' ? chooseRendition(this.renditions) : this.rendition;
    const current = await this.list(this.rendition, signal);
    let segments = current;
    if (r !== this.rendition) {
      const other = await this.list(r, signal);
      // Rungs switch at segment boundaries only, which match when the counts do.
      if (other.length === current.length) { this.rendition = r; segments = other; }
    }
    if (this.next >= segments.length) {
      if (segments.ended) { this.player.liveEnded(); return false; }
      if (!this.player.entry.live) return false;
      // Live: each track reads its playlist again at its next step, until it is closed.
      this.segments.delete(this.rendition.name);
      return 'waiting';
    }
    await this.useRendition(this.rendition, signal);
    await this.initFor(segments[this.next], signal);
    const data = await fetchBytes(segments[this.next].uri, signal);
    try { await this.append(data); } catch (e) {
      // The buffer is full: what lies more than 5 s behind the playhead goes, then once more.
      const behind = this.player.video.currentTime - 5;
      if (e.name !== 'QuotaExceededError' || behind <= 0) throw e;
      await new Promise(resolve => { this.buffer.addEventListener('updateend', resolve, { once: true }); this.buffer.remove(0, behind); });
      await this.append(data);
    }
    this.next += 1;
    return true;
  }
  // Where to go on after a seek: the segment holding `t`, the end of what is buffered from
  // the new playhead on (a buffered end a little short of a boundary is that boundary).
  async seek(t, signal) {
    const segments = await this.list(this.rendition, signal);
    const i = segments.findIndex(s => t + 0.05 < s.start + s.duration);
    this.next = i < 0 ? segments.length : i;
  }
}

// Media Source Extensions over the ladder's fMP4 segments.
class SourcePlayer {
  // The video renditions a player switches among, all of a ladder's being cut at the same
  // instants (a copy among them at the source's keyframes, where the encoded rungs cut too): those
  // this browser decodes. Where it decodes AV1, the AV1 rungs (the fewest bytes for a picture)
  // and, above the tallest of them, the others (the buffer changes codec on the way: changeType).
  // Without changeType, one codec's renditions only (AV1, else H.264).
  static renditions(entry) {
    const decodes = r => MS && MS.isTypeSupported(`video/mp4; codecs="${r.codecs}"`);
    const playable = (entry.renditions || []).filter(decodes);
    const family = codec => playable.filter(r => r.codecs.startsWith(codec));
    const av1 = family('av01');
    if (!(typeof SourceBuffer !== 'undefined' && 'changeType' in SourceBuffer.prototype)) {
      const one = av1.length ? av1 : family('avc1');
      return one.length ? one : playable;
    }
    if (!av1.length) return playable;
    const short = r => Math.min(r.width || 0, r.height || 0);
    const tallest = Math.max(...av1.map(short));
    return av1.concat(playable.filter(r => !r.codecs.startsWith('av01') && short(r) > tallest));
  }
  // Starts the fetches a new player of `entry` makes first (the init and first segment of the
  // rendition it would choose now, and of the audio), before the player exists: for the first
  // video, whose player waits for the page to be laid out and its Media Source to open.
  static fetchEarly(entry) {
    if (!SourcePlayer.fits(entry) || entry.live) return;
    const base = new URL(entry.master, location.href);
    for (const r of [chooseRendition(SourcePlayer.renditions(entry)), entry.audio].filter(Boolean)) {
      for (const uri of [r.init, r.segment]) {
        const url = new URL(uri, base).href;
        early.set(url, new Download(url));
      }
    }
  }
  static fits(entry) {
    if (!MS || !entry.renditions || entry.renditions.length === 0) return false;
    return SourcePlayer.renditions(entry).length > 0 && (!entry.audio || MS.isTypeSupported(`audio/mp4; codecs="${entry.audio.codecs}"`));
  }
  constructor(entry, video, index) {
    Object.assign(this, { entry, video, index, closed: false, active: false, live: entry.live === true });
    this.base = new URL(entry.master, location.href).href;
    this.abort = new AbortController();
    this.renditions = SourcePlayer.renditions(entry);
    this.opened = this.open();
    // Taken now: a stop before the source opens aborts these fetches too.
    const signal = this.abort.signal;
    this.started = this.opened.then(() => this.firstSegments(signal));
  }
  async open() {
    this.source = new MS();
    this.video.disableRemotePlayback = true;
    this.url = URL.createObjectURL(this.source);
    this.video.src = this.url;
    await new Promise(resolve => this.source.addEventListener('sourceopen', resolve, { once: true }));
    if (this.closed) return;
    this.tracks = [new Track(this, 'video', this.renditions)];
    if (this.entry.audio) this.tracks.push(new Track(this, 'audio', [this.entry.audio]));
    if (this.entry.duration > 0 && !this.live) this.source.duration = this.entry.duration;
  }
  // The recording ended (its playlist is closed): the video is whole from here on.
  liveEnded() {
    if (!this.live) return;
    this.live = false;
    const item = items[this.index];
    if (item) { item.el.classList.remove('live'); item.video.loop = true; }
  }
  // The init and first segment of each track: all an upcoming video fetches.
  async firstSegments(signal) {
    if (this.closed) return;
    await Promise.all(this.tracks.map(t => (t.next === 0 ? t.first(signal) : null)));
    this.prefetched = true;
    // A video not playing yet shows its first picture while it waits: at 0 there may be none
    // (a first segment can begin a little after), and a paused video stays blank there. A live
    // one begins at its live edge, far from 0.
    if ((this.video.paused || this.live) && this.video.currentTime < this.start) this.video.currentTime = this.start;
    log('prefetched', this.index);
  }
  // Where its pictures begin: the start of what is buffered.
  get start() { const b = this.video.buffered; return b.length ? b.start(0) : 0; }
  // Plays: one loop per player (never two) keeps AHEAD seconds buffered per track, ends the
  // stream once every segment is in, and stays until the player is paused or stopped, so
  // a seek into what is not buffered (or a loop back to the start) is filled.
  activate() {
    this.active = true;
    if (this.pumping) return;
    this.pumping = this.pump().catch(e => { if (!this.closed && e.name !== 'AbortError') this.fail(e); }).finally(() => {
      this.pumping = null;
      if (this.active && !this.closed) this.activate();
    });
  }
  async pump() {
    await this.opened;
    await this.started.catch(() => {});
    while (this.active && !this.closed) {
      const steps = await Promise.all(this.tracks.map(t => this.step(t, this.abort.signal)));
      if (steps.every(s => s === 'done') && !this.live) {
        if (!this.complete && this.source.readyState === 'open' && this.tracks.every(t => !t.buffer.updating)) this.source.endOfStream();
        this.complete = true;
      }
      if (!steps.includes('fetched')) await sleep(250);
    }
  }
  // One track's next step: after a seek, where to go on; then its first segments, or the
  // next one while it has less than AHEAD ahead. 'fetched', 'waiting' or 'done'.
  async step(track, signal) {
    if (track.seekTo !== undefined) { const t = track.seekTo; track.seekTo = undefined; await track.seek(t, signal); }
    if (track.next === 0) { await track.first(signal); return 'fetched'; }
    if (track.bufferedAhead() >= AHEAD) return 'waiting';
    const more = await track.more(signal);
    return more === true ? 'fetched' : more === false ? 'done' : more;
  }
  // Resolves once every track has `seconds` buffered ahead, or everything.
  async buffered(seconds) {
    await this.opened;
    while (!this.closed && !this.complete && this.active && !this.tracks.every(t => t.bufferedAhead() >= seconds)) await sleep(100);
  }
  // Stops downloading (a video scrolled past); what is buffered stays.
  stop() {
    this.active = false;
    this.abort.abort();
    this.abort = new AbortController();
  }
  // Stops playing on, but lets the first segments still coming arrive (an upcoming video).
  pause() { this.active = false; }
  // Every track goes on from the end of what it has buffered from `t` on.
  seeking(t) {
    for (const track of this.tracks || []) track.seekTo = t + track.bufferedAhead();
    this.complete = false;
    if (this.active) this.activate();
  }
  fail(e) {
    log('error', this.index);
    if (view && view.index === this.index) view.error = 'source';
    console.warn(`video ${this.entry.id}: ${e.message}`);
    this.onfail && this.onfail(e);
  }
  close() {
    this.closed = true;
    this.abort.abort();
    this.video.removeAttribute('src');
    this.video.load();
    if (this.url) URL.revokeObjectURL(this.url);
  }
}

// The browser's own HLS: the master playlist, the browser's own rung choice.
class NativePlayer {
  constructor(entry, video, index) {
    Object.assign(this, { entry, video, index });
    this.abort = new AbortController();
    this.started = Promise.resolve();
  }
  activate() { if (!this.video.getAttribute('src')) this.video.src = this.entry.master; }
  async buffered() {}
  stop() { this.abort.abort(); this.abort = new AbortController(); }
  pause() {}
  seeking() {}
  close() { this.abort.abort(); this.video.removeAttribute('src'); this.video.load(); }
}

const feed = document.getElementById('feed');
const items = [];
const players = new Map();
let videos = [];
let current = -1;

// The smallest cover that fills what the screen shows of the video (fitted, or filling a
// portrait screen) at up to twice its pixel density.
function coverFor(entry, item) {
  const top = (entry.renditions || []).reduce((a, r) => (a && a.height >= r.height ? a : r), null);
  const w = (top && top.width) || 16, h = (top && top.height) || 9;
  const scale = item.el.classList.contains('fill') ? Math.max(innerWidth / w, innerHeight / h) : Math.min(innerWidth / w, innerHeight / h);
  const need = Math.max(w, h) * scale * Math.min(devicePixelRatio || 1, 2) * 0.75;
  const sized = [...(entry.covers || [])].sort((a, b) => a.size - b.size).find(c => c.size >= need);
  return sized ? new URL(sized.uri, new URL(entry.master, location.href)).href : entry.cover;
}

function layout(item) {
  const v = item.video, entry = videos[item.index];
  const top = (entry.renditions || []).reduce((a, r) => (a && a.height >= r.height ? a : r), null);
  const w = v.videoWidth || (top && top.width) || 0, h = v.videoHeight || (top && top.height) || 0;
  item.el.classList.toggle('fill', h > w && innerHeight > innerWidth);
}

function clock(s) {
  if (!isFinite(s)) s = 0;
  s = Math.max(0, Math.floor(s));
  return `${Math.floor(s / 60)}:${String(s % 60).padStart(2, '0')}`;
}

function showProblem(item, text) {
  let p = item.el.querySelector('.problem');
  if (!p) { p = document.createElement('div'); p.className = 'problem'; item.el.append(p); }
  p.textContent = text;
}

function playerFor(index) {
  if (index < 0 || index >= videos.length) return null;
  let p = players.get(index);
  if (p) return p;
  const item = items[index], entry = videos[index];
  if (SourcePlayer.fits(entry)) {
    p = new SourcePlayer(entry, item.video, index);
    p.onfail = () => {
      players.delete(index);
      p.close();
      if (!nativeHLS) { showProblem(item, 'This video cannot be played here.'); return; }
      const n = new NativePlayer(entry, item.video, index);
      players.set(index, n);
      if (index === current) { n.activate(); play(item); }
    };
  } else if (nativeHLS) {
    p = new NativePlayer(entry, item.video, index);
  } else {
    showProblem(item, 'This browser plays neither HLS nor Media Source Extensions: the video cannot be shown here.');
    return null;
  }
  players.set(index, p);
  return p;
}

function play(item) {
  const v = item.video;
  v.muted = !soundOn;
  item.el.classList.remove('paused');
  v.play().catch(e => {
    if (e.name === 'NotAllowedError' && !v.muted && items[current] === item) {
      // No sound without a gesture here: play muted, show it; a tap turns it on.
      v.muted = true;
      showSound();
      v.play().catch(() => {});
    }
  });
  showSound();
}

function showSound() {
  for (const item of items) {
    const on = !item.video.muted;
    item.sound.setAttribute('aria-pressed', String(on));
    item.sound.setAttribute('aria-label', on ? 'Sound on: turn it off (m)' : 'Sound off: turn it on (m)');
  }
}

function setSound(on) {
  soundOn = on;
  soundPreference.set(on);
  for (const item of items) item.video.muted = !on;
  showSound();
  log(on ? 'sound-on' : 'sound-off', current);
}

function togglePause(item) {
  const v = item.video;
  if (v.paused) { play(item); log('resumed', item.index); } else { v.pause(); item.el.classList.add('paused'); log('paused', item.index); }
}

// What the viewer saw of the video on screen, reported when it leaves the screen or the page
// goes (POST /beacon): the milliseconds to its first picture, the stalls after it, how long it was
// on screen, the rendition played last, a failure. Nothing that tells who the viewer is.
let view = null;
function startView(index) {
  endView();
  view = { index, id: videos[index].id, since: performance.now(), startup: null, rebuffers: 0, stalled: 0, waitingSince: null, error: null };
}
function endView() {
  if (!view) return;
  const now = performance.now();
  if (view.waitingSince !== null) view.stalled += now - view.waitingSince;
  const index = view.index;
  const p = players.get(index);
  const track = p instanceof SourcePlayer && p.tracks ? p.tracks[0] : null;
  const report = {
    video: view.id, startup_ms: view.startup === null ? null : Math.round(view.startup), rebuffers: view.rebuffers,
    rebuffer_ms: Math.round(view.stalled), watched_ms: Math.round(now - view.since),
    rendition: track && track.rendition ? track.rendition.name : (p ? 'native' : null), error: view.error
  };
  const token = new URL(videos[index].master, location.href).searchParams.get('token');
  if (token) report.token = token;
  view = null;
  // text/plain: a type a beacon may always carry (the server reads it as JSON).
  try { navigator.sendBeacon('/beacon', new Blob([JSON.stringify(report)], { type: 'text/plain' })); } catch {}
  log('reported', index);
}
addEventListener('pagehide', endView);
document.addEventListener('visibilitychange', () => {
  if (document.visibilityState === 'hidden') endView(); else if (current >= 0 && !view) startView(current);
});

// The video at `index` is the one on screen.
function focusOn(index) {
  if (index === current || index < 0 || index >= videos.length) return;
  current = index;
  window.currentIndex = index;
  log('visible', index);
  startView(index);
  // A signed video's link keeps its token (its URIs carry it).
  const token = new URL(videos[index].master, location.href).searchParams.get('token');
  history.replaceState(null, '', `/v/${encodeURIComponent(videos[index].id)}${token ? `?token=${encodeURIComponent(token)}` : ''}`);
  for (const item of items) {
    if (item.index !== index) { item.video.pause(); item.el.classList.remove('paused'); }
  }
  for (const [i, p] of players) {
    if (i < index - 1 || i > index + 2) { p.close(); players.delete(i); }
    else if (i < index) p.stop();
    else if (i > index) p.pause();
  }
  // Covers in view order, once this one's first segments are in (its first picture comes with
  // them; the cover would only compete for the bytes): this one, the next two and the one
  // before, for going back. Without segments of its own (the browser's HLS), this one's at once.
  const cover = i => {
    const item = items[i];
    if (item && !item.video.getAttribute('poster')) item.video.poster = coverFor(videos[i], item);
  };
  const p = playerFor(index);
  if (!(p instanceof SourcePlayer)) cover(index);
  if (p) { p.activate(); play(items[index]); }
  // Then the first segment of the next two, one after the other, once this one has 4 s
  // buffered ahead (before that, its own segments come first).
  const started = p ? p.started.catch(() => {}).then(() => { if (current === index) [index, index + 1, index + 2, index - 1].forEach(cover); return p.buffered(4); }) : Promise.resolve();
  started.catch(() => {}).then(() => {
    if (current !== index) return;
    const next = playerFor(index + 1);
    return next && next.started.catch(() => {}).then(() => { if (current === index) playerFor(index + 2); });
  });
}

function go(index) {
  index = Math.max(0, Math.min(videos.length - 1, index));
  feed.scrollTo({ top: index * feed.clientHeight, behavior: 'smooth' });
  focusOn(index);
}

function build(entry, index) {
  const el = document.createElement('section');
  el.className = 'item';
  el.dataset.index = index;
  el.dataset.id = entry.id;
  const video = document.createElement('video');
  Object.assign(video, { muted: !soundOn, playsInline: true, loop: !entry.live, preload: 'none' });
  video.setAttribute('playsinline', '');
  const info = document.createElement('div');
  info.className = 'info';
  const name = document.createElement('div');
  name.className = 'name';
  name.textContent = entry.name;
  const time = document.createElement('div');
  time.className = 'time';
  time.textContent = `0:00 / ${clock(entry.duration)}`;
  info.append(name, time);
  const sound = document.createElement('button');
  sound.className = 'sound';
  sound.type = 'button';
  sound.innerHTML = '<svg class="off" viewBox="0 0 24 24"><path d="M3 9v6h4l5 5V4L7 9H3zm13.6 3 2.7-2.7-1.4-1.4-2.7 2.7-2.7-2.7-1.4 1.4 2.7 2.7-2.7 2.7 1.4 1.4 2.7-2.7 2.7 2.7 1.4-1.4-2.7-2.7z"/></svg>' +
    '<svg class="on" viewBox="0 0 24 24"><path d="M3 9v6h4l5 5V4L7 9H3zm13.5 3A4.5 4.5 0 0 0 14 8v8a4.5 4.5 0 0 0 2.5-4zM14 3.2v2.1a7 7 0 0 1 0 13.4v2.1a9 9 0 0 0 0-17.6z"/></svg>';
  const bar = document.createElement('div');
  bar.className = 'bar';
  bar.innerHTML = '<div class="track"><div class="done"></div></div>';
  const mark = document.createElement('div');
  mark.className = 'paused-mark';
  const preview = document.createElement('div');
  preview.className = 'preview';
  preview.append(document.createElement('span'));
  const live = document.createElement('div');
  live.className = 'live-mark';
  live.textContent = 'LIVE';
  if (entry.live) el.classList.add('live');
  el.append(video, info, mark, live, sound, preview, bar);
  const item = { el, video, sound, bar, time, index, done: bar.querySelector('.done') };

  video.addEventListener('playing', () => {
    log('playing', index);
    if (!view || view.index !== index) return;
    const now = performance.now();
    if (view.startup === null) view.startup = now - view.since;
    if (view.waitingSince !== null) { view.stalled += now - view.waitingSince; view.waitingSince = null; }
  });
  video.addEventListener('waiting', () => {
    if (video.currentTime > 0) log('waiting', index);
    if (view && view.index === index && view.startup !== null && view.waitingSince === null) { view.rebuffers++; view.waitingSince = performance.now(); }
  });
  video.addEventListener('error', () => { if (view && view.index === index) view.error = `media_${video.error ? video.error.code : 0}`; });
  // The picture's size is known at its metadata, and may change after (another rendition, a
  // turn the first frame applies): the element's own resize.
  video.addEventListener('loadedmetadata', () => layout(item));
  video.addEventListener('resize', () => layout(item));
  video.addEventListener('seeking', () => { const p = players.get(index); if (p) p.seeking(video.currentTime); });
  sound.addEventListener('click', e => { e.stopPropagation(); setSound(video.muted); });

  // A tap: sound on when muted, else pause or resume. A press held: paused until released.
  let press = null;
  el.addEventListener('pointerdown', e => {
    if (e.target.closest('.bar, .sound') || e.button !== 0) return;
    press = { x: e.clientX, y: e.clientY, held: false };
    press.timer = setTimeout(() => { if (press && !video.paused) { press.held = true; video.pause(); el.classList.add('paused'); } }, 400);
  });
  el.addEventListener('pointermove', e => {
    if (press && Math.hypot(e.clientX - press.x, e.clientY - press.y) > 12) { clearTimeout(press.timer); press = null; }
  });
  const release = tap => {
    if (!press) return;
    clearTimeout(press.timer);
    const held = press.held;
    press = null;
    if (held) { play(item); return; }
    if (!tap) return;
    if (video.muted) setSound(true); else togglePause(item);
  };
  el.addEventListener('pointerup', () => release(true));
  el.addEventListener('pointercancel', () => release(false));

  // Seeking on the bar: where it is pressed, and while dragged; the storyboard's picture of
  // the time under the pointer shows above it (hovering, or dragging).
  const timeAt = e => {
    const r = bar.getBoundingClientRect(), d = video.duration || entry.duration;
    return d > 0 ? Math.max(0, Math.min(d - 0.05, (e.clientX - r.left) / r.width * d)) : null;
  };
  const seekAt = e => { const t = timeAt(e); if (t !== null) video.currentTime = t; };
  const showPreview = e => {
    const t = timeAt(e), x = e.clientX;
    if (t === null) return;
    preview.wanted = true;
    storyboard(entry).then(cues => {
      if (!preview.wanted) return;
      const cue = cues.find(c => t >= c.start && t < c.end) || cues[cues.length - 1];
      if (!cue) return;
      Object.assign(preview.style, {
        display: 'block', width: `${cue.w}px`, height: `${cue.h}px`, backgroundImage: `url("${cue.url}")`,
        backgroundPosition: `-${cue.x}px -${cue.y}px`, left: `${Math.max(4, Math.min(innerWidth - cue.w - 8, x - cue.w / 2))}px`
      });
      preview.dataset.start = cue.start;
      preview.firstChild.textContent = clock(t);
    });
  };
  const hidePreview = () => { preview.wanted = false; preview.style.display = 'none'; };
  bar.addEventListener('pointerdown', e => { e.stopPropagation(); bar.setPointerCapture(e.pointerId); seekAt(e); showPreview(e); });
  bar.addEventListener('pointermove', e => { if (bar.hasPointerCapture(e.pointerId)) seekAt(e); if (e.pointerType === 'mouse' || bar.hasPointerCapture(e.pointerId)) showPreview(e); });
  bar.addEventListener('pointerup', e => { if (e.pointerType !== 'mouse') hidePreview(); });
  bar.addEventListener('pointerleave', e => { if (!bar.hasPointerCapture(e.pointerId)) hidePreview(); });
  return item;
}

// The bar and time of the video on screen, each frame.
function tick() {
  const item = items[current];
  if (item) {
    const v = item.video, d = v.duration || videos[current].duration;
    if (item.el.classList.contains('live')) {
      item.done.style.width = '100%';
      item.time.textContent = clock(v.currentTime);
    } else {
      item.done.style.width = d > 0 ? `${Math.min(100, v.currentTime / d * 100)}%` : '0';
      item.time.textContent = `${clock(v.currentTime)} / ${clock(d)}`;
    }
  }
  requestAnimationFrame(tick);
}

// Keys work from the start: they are read on the document, not the scrolled element.
document.addEventListener('keydown', e => {
  if (e.altKey || e.ctrlKey || e.metaKey || !videos.length) return;
  const item = items[current];
  switch (e.key) {
    case 'ArrowDown': case 'PageDown': case 'j': go(current + 1); break;
    case 'ArrowUp': case 'PageUp': case 'k': go(current - 1); break;
    case ' ': if (item) togglePause(item); break;
    case 'm': case 'M': setSound(!soundOn || (item && item.video.muted)); break;
    case 'ArrowRight': if (item) item.video.currentTime = Math.min((item.video.duration || 0) - 0.05, item.video.currentTime + 5); break;
    case 'ArrowLeft': if (item) item.video.currentTime = Math.max(0, item.video.currentTime - 5); break;
    default: return;
  }
  e.preventDefault();
});

// One wheel or trackpad gesture (with its inertia: events less than 200 ms apart) moves one video.
const wheel = { sum: 0, last: 0, moved: false };
feed.addEventListener('wheel', e => {
  e.preventDefault();
  const now = performance.now();
  if (now - wheel.last > 200) { wheel.sum = 0; wheel.moved = false; }
  wheel.last = now;
  if (wheel.moved) return;
  wheel.sum += e.deltaMode === 1 ? e.deltaY * 40 : e.deltaMode === 2 ? e.deltaY * feed.clientHeight : e.deltaY;
  if (Math.abs(wheel.sum) >= 30) { wheel.moved = true; go(current + Math.sign(wheel.sum)); }
}, { passive: false });

// A neighbour whose first segments are in (`prefetched`: paused on its first picture) starts
// playing (muted) the moment the feed moves towards it, so its pictures move in with the
// swipe; it takes over (sound, downloads) at a fifth of a screen. Its second picture shows at
// once, and it plays on from there once that seek is done (asked to play while seeking, a
// video waits): the first picture has been on screen all along, and a frame interval's wait
// for the second would hold the swipe back. Once the scrolling stops, a neighbour that did
// not take over is paused and rewound to its first picture.
function prime(index) {
  const item = items[index], p = players.get(index), v = item && item.video;
  if (!item || index === current || !p || !p.prefetched || !v.paused || item.priming) return;
  v.muted = true;
  const rate = p.tracks && p.tracks[0].rendition.frame_rate, second = p.start + 1 / rate + 0.001;
  if (!(rate > 0 && v.buffered.length && second < v.buffered.end(0))) { v.play().catch(() => {}); return; }
  item.priming = true;
  v.addEventListener('seeked', () => {
    const wanted = item.priming;
    item.priming = false;
    if (wanted && v.paused) v.play().catch(() => {});
  }, { once: true });
  v.currentTime = second;
}
let settling = 0;
function unprime() {
  for (const item of items) {
    if (item.index !== current && (!item.video.paused || item.priming)) {
      const p = players.get(item.index);
      item.priming = false;
      item.video.pause();
      item.video.currentTime = (p && p.start) || 0;
    }
  }
}

// A swipe commits early: once the feed has moved a fifth of a screen from the video on
// screen towards the next (or the one before), that one starts; moving back undoes it.
let lastTop = 0;
feed.addEventListener('scroll', () => {
  const h = feed.clientHeight, top = feed.scrollTop, direction = Math.sign(top - lastTop);
  lastTop = top;
  if (!h || current < 0) return;
  if (direction > 0 && top > current * h + 1) prime(current + 1);
  else if (direction < 0 && top < current * h - 1) prime(current - 1);
  clearTimeout(settling);
  settling = setTimeout(unprime, 150);
  if (direction > 0 && top - current * h > 0.2 * h) focusOn(current + 1);
  else if (direction < 0 && current * h - top > 0.2 * h) focusOn(current - 1);
}, { passive: true });

addEventListener('resize', () => { for (const item of items) layout(item); });

// The feed: carried by the page as the server sends it (`feed-doc`), else fetched.
const carried = document.getElementById('feed-doc');
(carried ? Promise.resolve(JSON.parse(carried.textContent)) : fetch('/feed.json').then(r => r.json())).then(doc => {
  videos = doc.videos;
  if (videos.length === 0) {
    feed.innerHTML = '<p id="empty">No videos yet. Upload one (<code>clipflow upload VIDEO --to clipflow --endpoint URL</code>, or any TUS client) and it appears here once it plays.</p>';
    return;
  }
  let wanted = (location.pathname.match(/^\/v\/([^/]+)$/) || [])[1] || '';
  try { wanted = decodeURIComponent(wanted); } catch {}
  let start = wanted ? videos.findIndex(v => String(v.id) === wanted) : 0;
  SourcePlayer.fetchEarly(videos[Math.max(start, 0)]);
  videos.forEach((entry, index) => {
    const item = build(entry, index);
    items.push(item);
    feed.append(item.el);
    layout(item);
  });
  if (start < 0) {
    start = 0;
    const notice = document.createElement('div');
    notice.id = 'notice';
    notice.textContent = `Video ${wanted} is not in the feed (not ready yet, or removed).`;
    document.body.append(notice);
    setTimeout(() => notice.remove(), 5000);
  }
  feed.scrollTop = start * feed.clientHeight;
  focusOn(start);
  feed.focus({ preventScroll: true });
  const observer = new IntersectionObserver(changes => {
    for (const change of changes) {
      if (change.isIntersecting && change.intersectionRatio >= 0.6) focusOn(Number(change.target.dataset.index));
    }
  }, { root: feed, threshold: [0.6] });
  for (const item of items) observer.observe(item.el);
  requestAnimationFrame(tick);
});
