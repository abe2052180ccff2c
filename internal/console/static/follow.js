// Follower follows one destination:<id> channel the way contracts/api.md says a client
// must (internal/stream/client.go is the same client in Go): subscribe first and buffer;
// load the snapshot; drop buffered events at or below its sequence; apply the rest in
// sequence order, dropping duplicates by id and sequence; on a gap hold what came early
// and replay from the cursor; a pointer is a gap; on 410 CURSOR_EXPIRED,
// resync.required or too many held events load a new snapshot. After a reconnection of
// any length it holds what a follower that never left holds, with no event applied twice.
//
// The live transport is shared: a browser opens at most six HTTP/1.1 connections to a
// host, so one stream per card would stall a page of more than a handful of cards (and
// every call queued behind them). Live carries up to maxChannels followers' channels on
// one GET /v1/streams/subscribe?channel=… and hands each follower its own frames; the
// follower logic is the same as on a stream of its own, the transport only makes news
// arrive sooner. The browser's own SSE client cannot send an Authorization header, so
// the stream is read with fetch() and a ReadableStream, and the token never goes into a URL.

import { ApiError, call, channelPath, errorOf, headers } from './api.js';

const resyncType = 'resync.required';
const pointerType = 'relay-pointer/1';
const keepAlivePrefix = ': keep-alive ';
const idleTimeout = 60000; // the server sends a keep-alive well within this
const minBackoff = 100;
const maxBackoff = 5000;
const maxHeld = 1000;
const replayLimit = 1000;
const rememberedIds = 2000;
// stateFields are the card fields a channel event's state may name (stream.CardState).
const stateFields = ['status', 'consecutive_failures', 'last_failure', 'last_delivery', 'disabled', 'failing', 'pending'];
const maxChannels = 100; // api.MaxMultiplexChannels: channels on one subscription

export class Follower {
  // opts: channel, onSnapshot(card), onApply(event, card|null), onDrop(event) for a
  // duplicate, onState(state, error).
  // States: connecting, live, reconnecting, catching-up, stopped. A Live runs it.
  constructor(opts) {
    this.opts = opts;
    this.card = null;
    this.cursor = 0; // sequence of the last event applied (or the snapshot's)
    this.needSnapshot = true;
    this.held = new Map(); // early events by sequence
    this.appliedIds = new Set(); // recent applied event ids, for the id half of dedup
    this.applied = 0; // events applied since the page opened
    this.snapshots = 0;
    this.duplicatesDropped = 0;
    this.stopped = false;
    this.signal = null; // the current stream's: its end aborts our calls
    this.state = '';
  }

  // stop ends it quietly: the page that owned it is gone.
  stop() { this.stopped = true; }

  setState(state, error = null) {
    if (this.state === state && !error) return;
    this.state = state;
    if (this.opts.onState) this.opts.onState(state, error);
  }

  // resumeAt is this channel as the transport names it: after the cursor, when the
  // follower holds a state to resume, else from the channel's current sequence.
  resumeAt() {
    return this.needSnapshot ? this.opts.channel : this.opts.channel + ' ' + this.cursor;
  }

  // follow runs while one stream is open; frames is this channel's queue on it, which
  // has buffered since the stream opened, so the snapshot loaded now cannot miss an
  // event between the two. It returns when the stream ends or the follower stops.
  async follow(frames, signal) {
    this.signal = signal;
    this.held.clear(); // held events came on the old stream; the new one sends them again
    // A snapshot, or whatever happened while we were away, from the store.
    const setUp = () => (this.needSnapshot ? this.resnapshot() : this.catchUp());
    if (!await this.attempt(setUp, setUp)) return;
    this.setState('live');
    for (;;) {
      const f = await frames.next();
      if (f === null || signal.aborted || this.stopped) return;
      // A replay that failed leaves the cursor where it was: replay from it again.
      if (!await this.attempt(() => this.handle(f), setUp)) return;
    }
  }

  // attempt runs first and, while a passing failure (a network error, a 5xx) stops it,
  // retry after a growing wait, on the same stream: its frames keep buffering meanwhile.
  // It is false when the stream ended or the follower stopped for good: a refusal of
  // the token or the channel cannot be retried away.
  async attempt(first, retry) {
    let wait = minBackoff;
    for (let run = first; ; run = retry) {
      try {
        await run();
        return true;
      } catch (err) {
        if (this.stopped || this.signal.aborted) return false;
        if (permanent(err)) {
          this.stopped = true;
          this.setState('stopped', err);
          return false;
        }
        this.setState('reconnecting');
        await sleep(wait / 2 + Math.random() * (wait / 2));
        wait = Math.min(2 * wait, maxBackoff);
        if (this.stopped || this.signal.aborted) return false;
      }
    }
  }

  // check asks the API whether this follower may still follow its channel, after the
  // transport was refused: the refusal names no channel, and one refused channel must
  // not stop the others.
  async check() {
    try {
      await call('GET', channelPath(this.opts.channel, 'events'), { query: { after: '0', limit: '1' } });
    } catch (err) {
      if (permanent(err)) {
        this.stopped = true;
        this.setState('stopped', err);
      }
    }
  }

  async handle(f) {
    if (f.keepAlive !== undefined) {
      // The stream passed an event we never got: replay it rather than wait.
      if (Number(f.keepAlive) > this.cursor) await this.catchUp();
      return;
    }
    if (f.event === pointerType) {
      let p;
      try { p = JSON.parse(f.data); } catch { return; }
      if (p.sequence > this.cursor) await this.catchUp(); // too large to broadcast: replay it
      return;
    }
    let ev;
    try { ev = JSON.parse(f.data); } catch { return; }
    if (!ev || !(ev.sequence > 0)) return;
    if (ev.sequence <= this.cursor || this.appliedIds.has(ev.id)) {
      this.duplicatesDropped++;
      if (this.opts.onDrop) this.opts.onDrop(ev);
      return;
    }
    if (ev.sequence === this.cursor + 1) {
      await this.apply(ev);
      await this.drainHeld();
      return;
    }
    if (this.held.has(ev.sequence)) return;
    this.held.set(ev.sequence, ev);
    if (this.held.size > maxHeld) {
      await this.resnapshot();
      return;
    }
    await this.catchUp(); // a gap: the stored events fill it
  }

  // catchUp replays from the cursor to the channel's end, then applies what was held.
  async catchUp() {
    this.setState('catching-up');
    for (;;) {
      let page;
      try {
        page = /** @type {import('./api.js').EventPage} */ (await call('GET', channelPath(this.opts.channel, 'events'),
          { query: { after: String(this.cursor), limit: String(replayLimit) }, signal: this.signal }));
      } catch (err) {
        if (err instanceof ApiError && err.status === 410) {
          await this.resnapshot(); // older than retention: start over
          return;
        }
        throw err;
      }
      for (const ev of page.events) {
        if (ev.sequence <= this.cursor) continue;
        if (ev.sequence !== this.cursor + 1) { // trimmed under our feet
          await this.resnapshot();
          return;
        }
        await this.apply(ev);
      }
      if (!page.more || page.events.length === 0) break;
    }
    await this.drainHeld();
    this.setState('live');
  }

  async drainHeld() {
    for (;;) {
      for (const seq of this.held.keys()) if (seq <= this.cursor) this.held.delete(seq);
      const ev = this.held.get(this.cursor + 1);
      if (!ev) return;
      this.held.delete(ev.sequence);
      await this.apply(ev);
    }
  }

  // apply applies the event that follows the cursor.
  async apply(ev) {
    if (ev.type === resyncType) {
      await this.resnapshot();
      return;
    }
    const d = ev.data || {};
    let changed = null;
    if (d.destination && d.state && this.card && d.destination === this.card.id) {
      // An event's state names the card fields it changed (all of them, or a few):
      // set those, keep the others.
      for (const k of stateFields) {
        if (Object.hasOwn(d.state, k)) this.card[k] = d.state[k] ?? null;
      }
      this.card.sequence = ev.sequence;
      changed = this.card;
    }
    this.cursor = ev.sequence;
    this.applied++;
    this.appliedIds.add(ev.id);
    if (this.appliedIds.size > rememberedIds) this.appliedIds.delete(this.appliedIds.values().next().value);
    if (this.opts.onApply) this.opts.onApply(ev, changed);
  }

  // resnapshot loads a new snapshot and starts over from its sequence.
  async resnapshot() {
    this.needSnapshot = true; // until it loads: a reconnection starts afresh
    const snap = /** @type {import('./api.js').Snapshot} */ (await call('GET', channelPath(this.opts.channel, 'snapshot'), { signal: this.signal }));
    this.card = snap.data.destination;
    this.cursor = snap.sequence;
    this.needSnapshot = false;
    this.snapshots++;
    if (this.opts.onSnapshot) this.opts.onSnapshot(this.card);
    await this.drainHeld();
  }
}

// permanent: the API refused the token or the channel; retrying cannot fix it.
function permanent(err) {
  return err instanceof ApiError && [400, 401, 403, 404].includes(err.status);
}

function sleep(ms) { return new Promise((resolve) => setTimeout(resolve, ms)); }

// follow starts the followers on as few streams as the API allows and returns what
// stops them all.
export function follow(followers) {
  const lives = [];
  for (let i = 0; i < followers.length; i += maxChannels) {
    const live = new Live(followers.slice(i, i + maxChannels));
    live.start();
    lives.push(live);
  }
  return { stop() { for (const l of lives) l.stop(); } };
}

// Live is one multiplexed subscription carrying several followers' channels. Each frame
// names its channel (`id: <channel> <sequence>`, `: keep-alive <channel> <sequence>`)
// and goes to that follower's queue. When the stream ends every follower waits for the
// next one, which resumes each channel after its own cursor.
export class Live {
  constructor(followers) {
    this.followers = followers;
    this.stopped = false;
    this.abort = null;
  }

  start() {
    for (const f of this.followers) f.setState('connecting');
    this.run();
  }

  stop() {
    this.stopped = true;
    for (const f of this.followers) f.stop();
    if (this.abort) this.abort.abort();
  }

  async run() {
    let wait = minBackoff;
    while (!this.stopped) {
      const group = this.followers.filter((f) => !f.stopped);
      if (group.length === 0) return;
      let connected = false;
      try {
        connected = await this.session(group);
      } catch (err) {
        if (this.stopped) return;
        if (permanent(err)) {
          // Which channel was refused? Each follower asks for its own; the refused ones
          // stop, and the next stream carries the others.
          await Promise.all(group.map((f) => f.check()));
        }
      }
      if (this.stopped) return;
      if (connected) wait = minBackoff;
      for (const f of group) if (!f.stopped) f.setState('reconnecting');
      await sleep(wait / 2 + Math.random() * (wait / 2));
      wait = Math.min(2 * wait, maxBackoff);
    }
  }

  // session is one stream: it returns true once it ended after it opened, or throws
  // when it could not open.
  async session(group) {
    this.abort = new AbortController();
    const abort = this.abort;
    const query = new URLSearchParams();
    for (const f of group) query.append('channel', f.resumeAt());
    const resp = await fetch('/v1/streams/subscribe?' + query.toString(),
      { headers: headers({ Accept: 'text/event-stream' }), cache: 'no-store', signal: abort.signal });
    if (!resp.ok) throw await errorOf(resp);
    const queues = new Map(); // channel → [follower, its queue]
    const runs = [];
    for (const f of group) {
      const q = new FrameQueue();
      queues.set(f.opts.channel, [f, q]);
      runs.push(f.follow(q, abort.signal));
    }
    await readStream(resp.body, abort, (channel, frame) => {
      const [f, q] = queues.get(channel) || [];
      if (q && !f.stopped) q.push(frame);
    });
    abort.abort(); // the followers' calls on this stream end with it
    for (const [, q] of queues.values()) q.end();
    await Promise.all(runs);
    return true;
  }
}

// FrameQueue buffers one channel's frames until next() takes them; next() gives null
// once the stream has ended.
class FrameQueue {
  constructor() {
    this.frames = [];
    this.waiter = null;
    this.ended = false;
  }

  push(f) {
    this.frames.push(f);
    this.wake();
  }

  end() {
    this.ended = true;
    this.wake();
  }

  wake() {
    if (this.waiter) { this.waiter(); this.waiter = null; }
  }

  async next() {
    while (this.frames.length === 0 && !this.ended) {
      await new Promise((resolve) => { this.waiter = resolve; });
    }
    return this.frames.length && !this.ended ? this.frames.shift() : null;
  }
}

// splitNamed splits "<channel> <rest>" (channel names hold no space).
function splitNamed(v) {
  const i = v.indexOf(' ');
  return i < 0 ? [v, ''] : [v.slice(0, i), v.slice(i + 1)];
}

// readStream reads a multiplexed text/event-stream off a fetch body as it arrives and
// hands each frame to deliver(channel, frame) — {id: sequence, event, data} or
// {keepAlive: sequence} — until the stream ends, breaks or stays idle too long.
async function readStream(body, abort, deliver) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  let f = { id: '', event: '', data: [] };
  let idle = setTimeout(() => abort.abort(), idleTimeout);
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      clearTimeout(idle);
      idle = setTimeout(() => abort.abort(), idleTimeout);
      buf += decoder.decode(value, { stream: true });
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl).replace(/\r$/, '');
        buf = buf.slice(nl + 1);
        if (line === '') {
          if (f.data.length) {
            const [channel, seq] = splitNamed(f.id);
            deliver(channel, { id: seq, event: f.event, data: f.data.join('\n') });
          }
          f = { id: '', event: '', data: [] };
        } else if (line.startsWith(keepAlivePrefix)) {
          const [channel, seq] = splitNamed(line.slice(keepAlivePrefix.length));
          deliver(channel, { keepAlive: seq });
        } else if (!line.startsWith(':')) {
          const i = line.indexOf(':');
          const field = i < 0 ? line : line.slice(0, i);
          let value = i < 0 ? '' : line.slice(i + 1);
          if (value.startsWith(' ')) value = value.slice(1);
          if (field === 'id') f.id = value;
          else if (field === 'event') f.event = value;
          else if (field === 'data') f.data.push(value);
        }
      }
    }
  } catch { /* aborted or the connection broke: the stream ended */ }
  clearTimeout(idle);
}
