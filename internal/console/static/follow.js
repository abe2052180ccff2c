// Follower follows one destination:<id> channel the way contracts/api.md says a client
// must (internal/stream/client.go is the same client in Go): subscribe first and buffer;
// load the snapshot; drop buffered events at or below its sequence; apply the rest in
// sequence order, dropping duplicates by id and sequence; on a gap hold what came early
// and replay from the cursor; a pointer is a gap; on 410 CURSOR_EXPIRED,
// resync.required or too many held events load a new snapshot. After a reconnection of
// any length it holds what a follower that never left holds, with no event applied twice.
//
// The browser's own SSE client cannot send an Authorization header, so the stream is
// read with fetch() and a ReadableStream, and the token never goes into a URL.

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

export class Follower {
  // opts: channel, onSnapshot(card), onApply(event, card|null), onDrop(event) for a
  // duplicate, onState(state, error).
  // States: connecting, live, reconnecting, catching-up, stopped.
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
    this.abort = null;
    this.state = '';
  }

  start() {
    this.setState('connecting');
    this.run();
  }

  stop() {
    this.stopped = true;
    if (this.abort) this.abort.abort();
  }

  setState(state, error = null) {
    if (this.state === state && !error) return;
    this.state = state;
    if (this.opts.onState) this.opts.onState(state, error);
  }

  async run() {
    let wait = minBackoff;
    while (!this.stopped) {
      let connected = false;
      try {
        connected = await this.session();
      } catch (err) {
        if (this.stopped) return;
        if (err && err.connected) connected = true;
        if (permanent(err)) {
          this.setState('stopped', err);
          return;
        }
      }
      if (this.stopped) return;
      if (connected) wait = minBackoff;
      this.setState('reconnecting');
      await sleep(wait / 2 + Math.random() * (wait / 2));
      wait = Math.min(2 * wait, maxBackoff);
    }
  }

  // session is one subscription; it returns or throws when the stream ends.
  async session() {
    this.abort = new AbortController();
    const signal = this.abort.signal;
    const h = headers({ Accept: 'text/event-stream' });
    if (!this.needSnapshot) h['Last-Event-ID'] = String(this.cursor); // resume after what is applied
    const resp = await fetch(channelPath(this.opts.channel, 'subscribe'), { headers: h, cache: 'no-store', signal });
    if (!resp.ok) throw await errorOf(resp);
    const frames = new FrameQueue(resp.body, this.abort);
    // Held events came on the old connection; the new one sends them again.
    this.held.clear();
    try {
      // The stream is open and buffering in frames: the snapshot loaded now cannot miss
      // an event between the two.
      if (this.needSnapshot) await this.resnapshot();
      else await this.catchUp(); // whatever happened while we were away, from the store
      this.setState('live');
      for (;;) {
        const f = await frames.next();
        if (f === null) throw Object.assign(new Error('subscription ended'), { connected: true });
        await this.handle(f);
      }
    } catch (err) {
      this.abort.abort();
      if (err && typeof err === 'object') err.connected = true;
      throw err;
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
        page = await call('GET', channelPath(this.opts.channel, 'events'),
          { query: { after: String(this.cursor), limit: String(replayLimit) }, signal: this.abort.signal });
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
      // Every event carries the card's state fields: replace ours with them.
      const s = d.state;
      Object.assign(this.card, {
        status: s.status, consecutive_failures: s.consecutive_failures, last_failure: s.last_failure,
        last_delivery: s.last_delivery, disabled: s.disabled, sequence: ev.sequence,
      });
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
    const snap = await call('GET', channelPath(this.opts.channel, 'snapshot'), { signal: this.abort.signal });
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

// FrameQueue reads text/event-stream off a fetch body as it arrives and buffers the
// frames until next() takes them; next() gives null once the stream has ended.
class FrameQueue {
  constructor(body, abort) {
    this.frames = [];
    this.waiter = null;
    this.ended = false;
    this.pump(body.getReader(), abort);
  }

  push(f) {
    this.frames.push(f);
    if (this.waiter) { this.waiter(); this.waiter = null; }
  }

  async next() {
    while (this.frames.length === 0 && !this.ended) {
      await new Promise((resolve) => { this.waiter = resolve; });
    }
    return this.frames.length ? this.frames.shift() : null;
  }

  async pump(reader, abort) {
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
            if (f.data.length) this.push({ id: f.id, event: f.event, data: f.data.join('\n') });
            f = { id: '', event: '', data: [] };
          } else if (line.startsWith(keepAlivePrefix)) {
            this.push({ keepAlive: line.slice(keepAlivePrefix.length) });
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
    this.ended = true;
    if (this.waiter) { this.waiter(); this.waiter = null; }
  }
}
