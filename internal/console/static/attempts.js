// A card's attempt log: its pages, newest first, each line's Show (what the bus received
// and its answer), Retry and Replay after this.

import { call } from './api.js';
import { askReplay, askRetry } from './dialogs.js';
import { el, row } from './dom.js';
import { actionError } from './errors.js';
import { formatTime, t } from './i18n.js';

const attemptsPage = 10;

export class AttemptLog {
  constructor(view) {
    this.view = view; // the CardView it belongs to
    this.open = false;
    this.rows = [];
    this.next = null;
    this.loaded = false;
    this.shown = new Map(); // n → the attempt's detail, for each line opened
    this.box = null;
  }

  // element builds the log's <details> (again, on a language switch), keeping what it holds.
  element() {
    this.box = el('div', { class: 'attempts-body' });
    const details = el('details', { class: 'attempts' }, el('summary', {}, t('attempts')), this.box);
    details.open = this.open;
    details.addEventListener('toggle', () => {
      this.open = details.open;
      if (details.open) this.load(true);
    });
    return details;
  }

  async load(first) {
    const v = this.view;
    const query = { limit: String(attemptsPage) };
    if (!first && this.next !== null) query.before = String(this.next);
    if (first && this.rows.length > attemptsPage) query.limit = String(this.rows.length);
    try {
      const page = /** @type {import('./api.js').AttemptPage} */ (await call('GET', v.path('attempts'), { query }));
      this.rows = first ? page.attempts : [...this.rows, ...page.attempts];
      this.next = page.next ?? null;
      this.loaded = true;
    } catch (err) {
      v.setNotice(actionError(err), 'error');
      v.renderState();
    }
    this.render();
  }

  render() {
    const v = this.view;
    if (!this.loaded) return;
    if (this.rows.length === 0) {
      this.box.replaceChildren(el('p', { class: 'help' }, t('attemptsEmpty')));
      return;
    }
    const head = el('tr', {}, el('th', {}, t('at')), el('th', {}, t('outcome')), el('th', {}, t('eventId')),
      el('th', {}, t('message')));
    const body = [];
    for (const r of this.rows) {
      const retryable = ['rejected', 'expired', 'delivered'].includes(r.outcome) && r.event_id && !r.event_id.startsWith('relay.test.');
      const buttons = [
        el('button', { type: 'button', class: 'show small', onclick: () => this.toggleDetail(r) }, t('show')),
        retryable && r.outcome !== 'delivered'
          ? el('button', { type: 'button', class: 'retry small', onclick: () => askRetry(v, r) }, t('retry')) : null,
        retryable ? el('button', { type: 'button', class: 'replay-after small', onclick: () => askReplay(v, r.event_id) }, t('replayAfterThis')) : null,
      ];
      body.push(el('tr', { class: 'attempt', 'data-n': r.n, 'data-outcome': r.outcome, 'data-event': r.event_id || '' },
        el('td', {}, formatTime(r.at)), el('td', {}, t('outcome_' + r.outcome)), el('td', { class: 'mono' }, r.event_id || ''),
        el('td', { class: 'message' }, r.message || '', el('div', { class: 'row-actions' }, buttons))));
      if (this.shown.has(r.n)) body.push(el('tr', { class: 'detail', 'data-n': r.n }, el('td', { colspan: '4' }, detailView(this.shown.get(r.n)))));
    }
    // replaceChildren would write a null as the text "null": only elements go in.
    const parts = [el('table', {}, el('thead', {}, head), el('tbody', {}, body))];
    if (this.next !== null) parts.push(el('button', { type: 'button', class: 'older', onclick: () => this.load(false) }, t('older')));
    this.box.replaceChildren(...parts);
    v.renderButtons();
  }

  async toggleDetail(r) {
    const v = this.view;
    if (this.shown.has(r.n)) {
      this.shown.delete(r.n);
    } else {
      try {
        this.shown.set(r.n, /** @type {import('./api.js').AttemptDetail} */ (await call('GET', v.path('attempts/' + r.n))));
      } catch (err) {
        v.setNotice(actionError(err), 'error');
        v.renderState();
        return;
      }
    }
    this.render();
  }
}

// detailView shows an attempt's detail: the message as the bus received it, and its answer.
function detailView(d) {
  const s = d.sent;
  const rows = [];
  const pre = (text, name) => el('pre', { class: 'sent-value', 'data-sent': name }, prettyJSON(text));
  if (s && s.eventbridge) {
    const e = s.eventbridge;
    rows.push(row(t('sentBus'), el('code', {}, e.event_bus_name)), row(t('sentSource'), el('code', {}, e.source)),
      row(t('sentDetailType'), el('code', {}, e.detail_type)), row(t('sentDetail'), pre(e.detail, 'detail')));
  } else if (s && s.kinesis) {
    const k = s.kinesis;
    rows.push(row(t('sentStream'), el('code', {}, k.stream_arn)), row(t('sentPartitionKey'), el('code', { 'data-sent': 'partition-key' }, k.partition_key)),
      row(t('sentData'), pre(k.data, 'data')));
  } else if (s && s.pubsub) {
    const p = s.pubsub;
    rows.push(row(t('sentTopic'), el('code', {}, p.topic)), row(t('sentOrderingKey'), el('code', { 'data-sent': 'ordering-key' }, p.ordering_key || '')),
      row(t('sentData'), pre(p.data, 'data')), row(t('sentAttributes'), pre(JSON.stringify(p.attributes || {}), 'attributes')));
  } else {
    rows.push(row(t('detailTitle'), el('span', { class: 'help' }, d.sent_note || t('detailNone'))));
  }
  const ans = d.answer || {};
  rows.push(row(t('detailAnswer'), el('span', { class: 'answer', 'data-outcome': ans.outcome || '' },
    el('strong', {}, t('outcome_' + ans.outcome)), ans.message ? ' — ' + ans.message : '')));
  return el('dl', { class: 'detail-view' }, rows);
}

function prettyJSON(text) {
  try { return JSON.stringify(JSON.parse(text), null, 2); } catch { return String(text ?? ''); }
}
