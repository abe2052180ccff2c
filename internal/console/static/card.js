// A destination's card: where it stands (its channel keeps it live), its target and the
// setup its customer applies, ready to copy, its buttons, chart and attempt log.

import { call, destinationPath } from './api.js';
import { AttemptLog } from './attempts.js';
import { chartView, sum } from './chart.js';
import { renderSummary, updateLive } from './chrome.js';
import { askActivate, askDisable, askReplay } from './dialogs.js';
import { el, row } from './dom.js';
import { actionError } from './errors.js';
import { Follower } from './follow.js';
import { formatAge, formatNumber, formatTime, t } from './i18n.js';
import { askChange, askDelete } from './manage.js';
import { setupBlocks } from './setup.js';
import { app, isAdmin } from './state.js';

const chartEvery = 20000; // ms between two reads of a card's chart

export class CardView {
  // fresh: the destination was just added here; its card opens on its setup.
  constructor(card, { fresh = false } = {}) {
    this.card = card;
    this.fresh = fresh;
    // lag and replayable_from come on the destination calls' cards, not on snapshots
    // or channel events: kept from the last such card, refreshed after a change.
    this.extra = { lag: card.lag ?? null, replayable_from: card.replayable_from ?? null };
    this.root = el('article', { class: 'card', 'data-id': card.id });
    this.testOutcome = null; // {outcome, message} of the last «Send a test»
    this.notice = ''; // the last action's answer or error
    this.setupTab = ''; // the setup's tab last chosen ('' the first)
    this.noticeKind = '';
    this.log = new AttemptLog(this);
    this.chart = null;
    this.refreshTimer = null;
    this.firstSnapshot = null;
    this.follower = new Follower({
      channel: 'destination:' + card.id,
      onSnapshot: (c) => {
        if (this.firstSnapshot === null) this.firstSnapshot = c.sequence;
        this.card = c;
        this.renderState();
      },
      onApply: (ev, c) => {
        if (c) this.card = c;
        this.renderState();
        if (this.log.open && (ev.type.startsWith('delivery.') || ev.type === 'message.expired' ||
          ev.type === 'destination.replayed')) this.log.load(true);
        this.refreshSoon();
      },
      onDrop: () => { this.root.dataset.duplicatesDropped = String(this.follower.duplicatesDropped); },
      onState: (state, err) => {
        this.root.dataset.live = state;
        if (err) this.setNotice(actionError(err), 'error');
        this.renderState();
        updateLive();
      },
    });
    this.render();
  }

  path(action = '') { return destinationPath(this.card.connector, this.card.id, action); }

  setNotice(text, kind = '') {
    this.notice = text;
    this.noticeKind = kind;
  }

  // operatorLocked: our operators disabled it and this token is not theirs: pause and
  // activate would answer 403, so neither is offered.
  operatorLocked() {
    return !isAdmin() && this.card.disabled && this.card.disabled.by === 'operator';
  }

  render() {
    const c = this.card;
    this.stateBox = el('section', { class: 'state' });
    this.outcomeBox = el('p', { class: 'outcome', role: 'status' });
    this.chartBox = el('figure', { class: 'chart' });
    const buttons = [
      el('button', { type: 'button', class: 'test', onclick: () => this.sendTest() }, t('sendTest')),
      el('button', { type: 'button', class: 'pause', onclick: () => this.act('pause') }, t('pause')),
      el('button', { type: 'button', class: 'activate', onclick: () => askActivate(this) }, t('activate')),
      el('button', { type: 'button', class: 'replay', onclick: () => askReplay(this, '') }, t('replay')),
    ];
    if (isAdmin()) {
      buttons.push(el('button', { type: 'button', class: 'disable danger', onclick: () => askDisable(this) }, t('disable')));
    }
    // What the config file defines is changed there (card.managed_by): no Change, no Delete.
    if (c.managed_by === 'api') {
      buttons.push(el('button', { type: 'button', class: 'change', onclick: () => askChange(this) }, t('change')),
        el('button', { type: 'button', class: 'delete danger', onclick: () => askDelete(this) }, t('delete')));
    }
    const header = el('header', {},
      el('h2', { tabindex: '-1' }, c.id),
      el('span', { class: 'badge status' }),
      el('span', { class: 'badge live-state' }));
    const target = el('dl', { class: 'target' }, targetRows(c));
    const actions = el('div', { class: 'actions' }, buttons);
    // The setup's tabs end with Send a test: the card's own button right after them on a
    // card just added, a second one at the foot of the setup on the others.
    const setupTest = this.fresh ? null
      : el('button', { type: 'button', class: 'setup-test', onclick: () => this.sendTest() }, t('sendTest'));
    const setup = el('section', { class: 'setup' }, setupBlocks(c, this, setupTest));
    this.root.classList.toggle('fresh', this.fresh);
    // A card just added opens on what to set up, Send a test right under it: the whole
    // setup on one screen. Its state, chart and log follow.
    this.root.replaceChildren(...(this.fresh
      ? [header, el('p', { class: 'fresh-intro' }, t('freshIntro_' + c.connector)), target, setup, actions, this.outcomeBox,
        this.stateBox, this.chartBox, this.log.element()]
      : [header, target, this.stateBox, this.chartBox, actions, this.outcomeBox, setup, this.log.element()]));
    this.renderState();
    this.renderChart();
    if (this.log.open) this.log.render();
  }

  // renderState redraws what the channel changes, and the data-* a test reads.
  renderState() {
    const c = this.card;
    const f = this.follower;
    const d = this.root.dataset;
    d.status = c.status;
    d.sequence = String(c.sequence);
    d.consecutiveFailures = String(c.consecutive_failures);
    d.applied = String(f.applied);
    d.snapshots = String(f.snapshots);
    d.duplicatesDropped = String(f.duplicatesDropped);
    if (this.firstSnapshot !== null) d.firstSnapshot = String(this.firstSnapshot);
    d.lastFailure = c.last_failure ? c.last_failure.event_id : '';
    d.lastDelivery = c.last_delivery ? c.last_delivery.event_id : '';
    d.failing = c.failing ? 'true' : 'false';
    const lag = this.extra.lag;
    d.lagEvents = lag ? String(lag.events) : '';
    d.inFlight = c.in_flight == null ? '' : String(c.in_flight);
    d.maxRate = c.max_rate == null ? '' : String(c.max_rate);
    const status = this.root.querySelector('.badge.status');
    // Pending for a security reason (the role lets a wrong ExternalId in) is refused,
    // not "being set up": the badge says so.
    const refused = c.status === 'pending' && !!(c.pending && c.pending.security);
    status.textContent = t(refused ? 'status_refused' : 'status_' + c.status);
    status.dataset.status = c.status;
    status.dataset.security = String(refused);
    const live = this.root.querySelector('.badge.live-state');
    live.textContent = t('live_' + (f.state || 'connecting'));
    live.dataset.state = f.state || 'connecting';

    const rows = [];
    let failures = String(c.consecutive_failures);
    if (c.status !== 'disabled' && c.consecutive_failures > 0) {
      failures = t('failuresLeft', { count: c.consecutive_failures, left: Math.max(0, app.disableAfter - c.consecutive_failures) });
    }
    rows.push(row(t('consecutiveFailures'), el('span', { class: 'failures' }, failures)));
    if (c.failing) {
      const fl = c.failing;
      rows.push(row(t('failing'), el('span', { class: 'failing-info' }, t('failingText', {
        count: fl.consecutive_failures, left: fl.rejections_left ?? Math.max(0, app.disableAfter - fl.consecutive_failures),
        message: fl.message || '' }))));
    }
    const lf = c.last_failure;
    rows.push(row(t('lastFailure'), lf
      ? el('span', { class: 'last-failure' }, el('strong', {}, t('class_' + lf.class)), ' — ', lf.message || '',
        el('small', {}, ' · ', formatTime(lf.at), lf.event_id ? [' · ', t('event'), ' ', lf.event_id] : null))
      : el('span', { class: 'last-failure' }, t('never'))));
    const ld = c.last_delivery;
    rows.push(row(t('lastDelivery'), ld
      ? el('span', { class: 'last-delivery' }, formatTime(ld.at), ld.event_id ? el('small', {}, ' · ', t('event'), ' ', ld.event_id) : null)
      : el('span', { class: 'last-delivery' }, t('never'))));
    rows.push(row(t('lag'), el('span', { class: 'lag' }, lagText(lag))));
    rows.push(...settingsRows(c));
    if (c.pending) {
      rows.push(row(t(c.pending.security ? 'pendingRefused' : 'pendingCheck'), el('span', { class: 'pending-info' }, c.pending.message || '',
        c.pending.next_check ? el('small', {}, ' · ', t('nextCheck'), ' ', formatTime(c.pending.next_check)) : null)));
    }
    if (c.disabled) {
      const by = c.disabled.by === 'operator' ? t('disabledByOperator') : t('disabledByRejections');
      rows.push(row(t('disabledSince'), el('span', { class: 'disabled-info', 'data-by': c.disabled.by || '' },
        t('disabledText', { at: formatTime(c.disabled.at), by, reason: c.disabled.reason || '' }),
        this.operatorLocked() ? el('strong', { class: 'operator-only' }, ' ', t('operatorOnly')) : null)));
    }
    if (this.extra.replayable_from) {
      rows.push(row(t('replayableFrom'), el('span', { class: 'replayable-from' }, formatTime(this.extra.replayable_from))));
    }
    this.stateBox.replaceChildren(el('dl', {}, rows));
    this.renderButtons();
    if (app.views.get(c.id) === this) renderSummary();

    this.outcomeBox.replaceChildren();
    if (this.testOutcome) {
      const o = this.testOutcome;
      this.outcomeBox.append(el('span', { class: 'test-outcome', 'data-outcome': o.outcome },
        t('testOutcome', { outcome: t('outcome_' + o.outcome) }), o.message && o.message !== o.outcome ? ' — ' + o.message : ''));
    }
    if (this.notice) this.outcomeBox.append(el('span', { class: 'notice', 'data-kind': this.noticeKind }, this.notice));
  }

  // renderButtons enables what this token may do now: nothing while the relay is down;
  // no pause or activate on what our operators disabled, for an account token.
  renderButtons() {
    const c = this.card;
    const q = (s) => this.root.querySelector(s);
    const locked = this.operatorLocked();
    q('.pause').hidden = locked;
    q('.activate').hidden = locked;
    q('.pause').disabled = app.down || c.status !== 'active';
    q('.activate').disabled = app.down || c.status === 'active';
    q('.test').disabled = app.down || q('.test').dataset.busy === 'true';
    if (q('.setup-test')) q('.setup-test').disabled = q('.test').disabled;
    q('.replay').disabled = app.down;
    for (const b of this.root.querySelectorAll('.actions .disable, .actions .change, .actions .delete')) b.disabled = app.down;
    for (const b of this.root.querySelectorAll('.attempts button')) b.disabled = app.down || (b.classList.contains('retry') && c.status !== 'active');
  }

  // refreshSoon reads the card (its lag) again 2 s after a change, and the chart at
  // most every 20 s: a busy page of 50 cards stays a few calls a second.
  refreshSoon() {
    if (this.refreshTimer) return;
    this.refreshTimer = setTimeout(async () => {
      this.refreshTimer = null;
      if (app.views.get(this.card.id) !== this) return;
      try {
        const c = /** @type {import('./api.js').Card} */ (await call('GET', this.path()));
        this.extra = { lag: c.lag ?? null, replayable_from: c.replayable_from ?? null };
        this.renderState();
      } catch { /* the next change tries again */ }
      const wait = (this.chartAt || 0) + chartEvery - Date.now();
      if (wait <= 0) this.loadChart();
      else if (!this.chartTimer) {
        this.chartTimer = setTimeout(() => {
          this.chartTimer = null;
          if (app.views.get(this.card.id) === this) this.loadChart();
        }, wait);
      }
    }, 2000);
  }

  // takeCard keeps the lag and replayable_from of a card an action answered.
  /** @param {import('./api.js').Card | import('./api.js').ChangedCard | import('./api.js').ReplayedCard} c */
  takeCard(c) {
    if (c && c.id === this.card.id) this.extra = { lag: c.lag ?? null, replayable_from: c.replayable_from ?? null };
  }

  // takeDefinition keeps what a change answered that no channel event carries (the
  // target, the setup), on the card the follower applies events to as well.
  /** @param {import('./api.js').Card} c */
  takeDefinition(c) {
    if (!c || c.id !== this.card.id) return;
    for (const card of new Set([this.card, this.follower.card].filter(Boolean))) {
      for (const k of ['target', 'setup', 'external_id', 'managed_by', 'created_at', 'events', 'in_flight', 'max_rate']) card[k] = c[k];
    }
    this.takeCard(c);
  }

  async sendTest() {
    const b = this.root.querySelector('.test');
    const again = this.root.querySelector('.setup-test');
    b.dataset.busy = 'true';
    b.disabled = true;
    b.textContent = t('sending');
    if (again) again.textContent = t('sending');
    this.testOutcome = null;
    this.setNotice('');
    try {
      this.testOutcome = /** @type {import('./api.js').TestResult} */ (await call('POST', this.path('test')));
    } catch (err) {
      this.setNotice(actionError(err), 'error');
    }
    b.dataset.busy = 'false';
    b.textContent = t('sendTest');
    if (again) again.textContent = t('sendTest');
    this.renderState();
  }

  // act pauses or activates; the channel brings the new state, the answer only says it worked.
  async act(action, body, done = '') {
    this.setNotice('');
    try {
      this.takeCard(await call('POST', this.path(action), body === undefined ? {} : { body }));
      if (done) this.setNotice(done, 'ok');
    } catch (err) {
      this.setNotice(actionError(err), 'error');
    }
    this.renderState();
  }

  async loadChart() {
    this.chartAt = Date.now();
    try {
      this.chart = /** @type {import('./api.js').Minutes} */ (await call('GET', this.path('minutes')));
    } catch {
      return; // the chart is a picture: a card without it is still whole
    }
    this.renderChart();
  }

  renderChart() {
    const box = this.chartBox;
    if (!box) return;
    const m = this.chart;
    if (!m) { box.replaceChildren(); box.hidden = true; return; }
    box.hidden = false;
    box.replaceChildren(...chartView(m));
    box.dataset.delivered = String(sum(m.delivered));
    box.dataset.failed = String(sum(m.failed));
  }
}

// settingsRows are the destination's window and rate cap; none on a card from a relay
// too old to send them (during an upgrade).
function settingsRows(c) {
  if (c.in_flight == null) return [];
  return [
    row(t('inFlight'), el('span', { class: 'in-flight' }, t('inFlightValue', { n: formatNumber(c.in_flight) }))),
    row(t('maxRate'), el('span', { class: 'max-rate' },
      c.max_rate == null ? t('maxRateNone') : t('maxRateValue', { rate: formatNumber(c.max_rate) }))),
  ];
}

// lagText words a card's lag: caught up, or how many wait and since when.
function lagText(lag) {
  if (!lag) return t('lagUnknown');
  if (!lag.events) return t('lagCaughtUp');
  return t('lagEvents', { events: lag.events, at: formatTime(lag.oldest_undelivered_at), age: formatAge(lag.oldest_undelivered_age_seconds) });
}

const targetLabels = {
  bus_arn: 'busArn', stream_arn: 'streamArn', kms_key_arn: 'kmsKeyArn', role_arn: 'roleArn',
  project_id: 'projectId', topic_id: 'topicId',
};

function targetRows(c) {
  const rows = [row(t('account'), c.account)];
  for (const [k, label] of Object.entries(targetLabels)) {
    if (c.target && c.target[k]) rows.push(row(t(label), el('code', {}, c.target[k])));
  }
  if (c.managed_by === 'config') rows.push(row(t('managedBy'), el('span', { class: 'managed' }, t('managedByConfig'))));
  return rows;
}
