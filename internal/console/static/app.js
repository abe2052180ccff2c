// The console: sign-in, one page per connector, one live card per destination.
// Everything is built with DOM calls, never by parsing markup, so nothing a card holds can
// run as markup.

import { ApiError, call, clearToken, destinationPath, setToken, token } from './api.js';
import { Follower, follow } from './follow.js';
import { formatAge, formatTime, language, setLanguage, t } from './i18n.js';

const connectors = ['eventbridge', 'kinesis', 'pubsub'];
const attemptsPage = 10;
const pageSize = 50; // cards a page shows (the list API's page_size)
const chartEvery = 20000; // ms between two reads of a card's chart

const $ = (id) => document.getElementById(id);

// el builds an element: attrs (class, dataset entries as data-*, on* listeners), children.
function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'class') e.className = v;
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

const app = {
  scope: '', // "admin" or "account:<id>"
  disableAfter: 20,
  connector: '',
  views: new Map(), // destination id → CardView of the page shown
  live: null, // what stops the page's live transport
  filters: { status: '', q: '', account: '' },
  tokens: [''], // page_token of each page seen so far; the last is the page shown
  next: null, // the shown page's next_page_token
  down: false, // the live connection is down: every action waits for it
  load: 0, // which page load is current (a newer one makes older answers moot)
};

const isAdmin = () => app.scope === 'admin';

// ---- sign-in ----

async function signIn(value) {
  setToken(value);
  try {
    const who = await call('GET', '/v1/whoami');
    app.scope = who.scope;
  } catch (err) {
    clearToken();
    throw err;
  }
  try {
    const s = await (await fetch('settings.json', { cache: 'no-store' })).json();
    if (s.disable_after > 0) app.disableAfter = s.disable_after;
  } catch { /* keep the default */ }
}

function signOut() {
  clearToken();
  app.scope = '';
  stopPage();
  showSignIn();
}

function showSignIn(message = '') {
  $('signin').hidden = false;
  $('page').hidden = true;
  $('nav').hidden = true;
  $('signout').hidden = true;
  $('live').hidden = true;
  $('who').textContent = '';
  $('signin-error').textContent = message;
  $('token').value = '';
  $('token').focus();
}

// ---- pages ----

function stopPage() {
  if (app.live) app.live.stop();
  app.live = null;
  app.views.clear();
  $('cards').replaceChildren();
}

function route() {
  if (!token() || !app.scope) return;
  const name = location.hash.replace(/^#\//, '');
  showConnector(connectors.includes(name) ? name : 'eventbridge');
}

function showConnector(connector) {
  app.connector = connector;
  app.tokens = [''];
  loadPage();
}

// loadPage shows the current page of the connector's cards under the filters.
async function loadPage() {
  stopPage();
  const connector = app.connector;
  const load = ++app.load;
  $('signin').hidden = true;
  $('page').hidden = false;
  $('nav').hidden = false;
  $('signout').hidden = false;
  $('account-filter').hidden = !isAdmin();
  $('page').dataset.connector = connector;
  $('page').dataset.ready = 'false';
  renderChrome();
  $('page-note').textContent = t('loading');
  $('summary').textContent = '';
  const query = { page_size: String(pageSize) };
  const token = app.tokens[app.tokens.length - 1];
  if (token) query.page_token = token;
  if (app.filters.status) query.status = app.filters.status;
  if (app.filters.q) query.q = app.filters.q;
  if (app.filters.account) query.account = app.filters.account;
  let list;
  try {
    list = await call('GET', '/v1/connectors/' + connector + '/destinations', { query });
  } catch (err) {
    if (err instanceof ApiError && (err.status === 401 || err.code === 'ACCESS_REVOKED')) {
      signOut();
      $('signin-error').textContent = t('signInFailed', { message: err.message });
      return;
    }
    $('page-note').textContent = actionError(err);
    return;
  }
  if (load !== app.load) return; // another page was chosen meanwhile
  app.next = list.next_page_token ?? null;
  const filtered = app.filters.status || app.filters.q || app.filters.account;
  $('page-note').textContent = list.destinations.length ? '' : t(filtered ? 'noMatch' : 'noDestinations');
  app.summary = list.summary || null;
  app.matched = list.matched ?? null;
  renderSummary();
  for (const card of list.destinations) {
    const v = new CardView(card);
    app.views.set(card.id, v);
    $('cards').append(v.root);
  }
  // One stream carries every card's channel: a browser holds six connections to a host.
  app.live = follow([...app.views.values()].map((v) => v.follower));
  renderPager();
  $('page').dataset.ready = 'true';
  // The browser's own clock: milliseconds from the navigation's start to a drawn page.
  $('page').dataset.readyAt = String(Math.round(performance.now()));
  updateLive();
  loadCharts([...app.views.values()], load);
}

// loadCharts fetches the cards' charts a few at a time, after the page is drawn.
async function loadCharts(views, load) {
  const queue = [...views];
  const worker = async () => {
    while (queue.length && load === app.load) await queue.shift().loadChart();
  };
  await Promise.all([worker(), worker(), worker()]);
}

// renderSummary counts the page's cards as they stand now (the list's summary, kept
// live by the cards' channels).
function renderSummary() {
  let s = app.summary;
  if (s && app.views.size) {
    s = { cards: 0, active: 0, failing: 0, disabled: 0, paused: 0, pending: 0 };
    for (const v of app.views.values()) {
      s.cards++;
      if (v.card.status in s) s[v.card.status]++;
      if (v.card.failing) s.failing++;
    }
  }
  const e = $('summary');
  if (!s) { e.textContent = ''; return; }
  let text = t('summary', { page: app.tokens.length, ...s });
  if (app.matched !== null && !app.filters.status) text += t('summaryMatched', { matched: app.matched });
  e.textContent = text;
  for (const k of ['cards', 'active', 'failing', 'disabled', 'paused', 'pending']) e.dataset[k] = String(s[k] ?? 0);
}

function renderPager() {
  $('prev-page').disabled = app.tokens.length <= 1;
  $('next-page').disabled = !app.next;
  $('prev-page').parentElement.hidden = app.tokens.length <= 1 && !app.next;
}

// renderChrome writes every static word in the current language.
function renderChrome() {
  document.title = t('title');
  for (const e of document.querySelectorAll('[data-i18n]')) e.textContent = t(e.dataset.i18n);
  for (const a of document.querySelectorAll('#nav a')) {
    a.textContent = t(a.dataset.connector);
    a.classList.toggle('current', a.dataset.connector === app.connector);
  }
  $('page-title').textContent = app.connector ? t(app.connector) : '';
  $('lang').value = language();
  renderSummary();
  if (app.scope) {
    const scope = isAdmin() ? t('scopeAdmin') : t('scopeAccount', { account: app.scope.replace(/^account:/, '') });
    $('who').textContent = t('signedInAs', { scope });
  }
  updateLive();
}

// updateLive shows the page's worst connection state: reconnecting, then catching up.
function updateLive() {
  const states = [...app.views.values()].map((v) => v.follower.state);
  let state = 'live';
  for (const s of ['stopped', 'reconnecting', 'connecting', 'catching-up']) {
    if (states.includes(s)) { state = s; break; }
  }
  const e = $('live');
  e.hidden = states.length === 0;
  e.dataset.state = state;
  e.textContent = t('live_' + state);
  // While the relay does not answer, no action may start: each would fail.
  const down = states.length > 0 && state === 'reconnecting';
  if (down !== app.down) {
    app.down = down;
    document.body.dataset.down = String(down);
    for (const v of app.views.values()) v.renderButtons();
  }
}

// ---- a card ----

class CardView {
  constructor(card) {
    this.card = card;
    // lag and replayable_from come on the destination calls' cards, not on snapshots
    // or channel events: kept from the last such card, refreshed after a change.
    this.extra = { lag: card.lag ?? null, replayable_from: card.replayable_from ?? null };
    this.root = el('article', { class: 'card', 'data-id': card.id });
    this.testOutcome = null; // {outcome, message} of the last «Send a test»
    this.notice = ''; // the last action's answer or error
    this.noticeKind = '';
    this.attempts = { open: false, rows: [], next: null, loaded: false, shown: new Map() };
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
        if (this.attempts.open && (ev.type.startsWith('delivery.') || ev.type === 'message.expired' ||
          ev.type === 'destination.replayed')) this.loadAttempts(true);
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
    this.attemptsBox = el('div', { class: 'attempts-body' });
    this.chartBox = el('figure', { class: 'chart' });
    const details = el('details', { class: 'attempts' }, el('summary', {}, t('attempts')), this.attemptsBox);
    details.open = this.attempts.open;
    details.addEventListener('toggle', () => {
      this.attempts.open = details.open;
      if (details.open) this.loadAttempts(true);
    });
    const buttons = [
      el('button', { type: 'button', class: 'test', onclick: () => this.sendTest() }, t('sendTest')),
      el('button', { type: 'button', class: 'pause', onclick: () => this.act('pause') }, t('pause')),
      el('button', { type: 'button', class: 'activate', onclick: () => this.askActivate() }, t('activate')),
      el('button', { type: 'button', class: 'replay', onclick: () => this.askReplay('') }, t('replay')),
    ];
    if (isAdmin()) {
      buttons.push(el('button', { type: 'button', class: 'disable danger', onclick: () => this.askDisable() }, t('disable')));
    }
    this.root.replaceChildren(
      el('header', {},
        el('h2', {}, c.id),
        el('span', { class: 'badge status' }),
        el('span', { class: 'badge live-state' })),
      el('dl', { class: 'target' }, targetRows(c)),
      this.stateBox,
      this.chartBox,
      el('div', { class: 'actions' }, buttons),
      this.outcomeBox,
      el('section', { class: 'setup' }, setupBlocks(c)),
      details,
    );
    this.renderState();
    this.renderChart();
    if (this.attempts.open) this.renderAttempts();
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
    q('.replay').disabled = app.down;
    if (q('.disable')) q('.disable').disabled = app.down;
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
        const c = await call('GET', this.path());
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
  takeCard(c) {
    if (c && c.id === this.card.id) this.extra = { lag: c.lag ?? null, replayable_from: c.replayable_from ?? null };
  }

  async sendTest() {
    const b = this.root.querySelector('.test');
    b.dataset.busy = 'true';
    b.disabled = true;
    b.textContent = t('sending');
    this.testOutcome = null;
    this.setNotice('');
    try {
      this.testOutcome = await call('POST', this.path('test'));
    } catch (err) {
      this.setNotice(actionError(err), 'error');
    }
    b.dataset.busy = 'false';
    b.textContent = t('sendTest');
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

  // askActivate: a paused or disabled destination missed what arrived meanwhile; the
  // dialog asks whether to send it, with how many events that is.
  async askActivate() {
    const c = this.card;
    if (c.status !== 'paused' && c.status !== 'disabled') {
      this.act('activate');
      return;
    }
    // What was missed arrived while nothing changed on the card: read its lag now.
    try {
      this.takeCard(await call('GET', this.path()));
    } catch (err) {
      this.setNotice(actionError(err), 'error');
      this.renderState();
      return;
    }
    const since = c.status === 'disabled' ? 'since_disabled' : 'since_paused';
    const lag = this.extra.lag;
    const missed = lag ? t('activateMissed', { events: lag.events }) : t('activateMissedUnknown');
    const choice = (value, label, checked) => el('label', { class: 'choice' },
      el('input', { type: 'radio', name: 'activate-kind', value, checked }), ' ', label);
    openDialog({
      title: t('activateTitle', { id: c.id }),
      body: [choice('missed', missed, true), choice('new', t('activateNew'), false)],
      confirm: t('activateConfirm'),
      onConfirm: () => {
        const kind = document.querySelector('input[name="activate-kind"]:checked')?.value;
        if (kind === 'missed') this.act('activate', { replay: since }, t('activatedMissed'));
        else this.act('activate', undefined, t('activatedNew'));
      },
    });
  }

  // askReplay asks for a point (a time, or an event: afterEvent from the attempt log),
  // counts what the replay would send (a dry run), and replays only once confirmed.
  askReplay(afterEvent) {
    const c = this.card;
    let counted = null; // the point the shown count is for
    const fromInput = el('input', { type: 'datetime-local', id: 'replay-from', step: '1' });
    const afterInput = el('input', { type: 'text', id: 'replay-after', value: afterEvent || '', spellcheck: 'false' });
    const kindFrom = el('input', { type: 'radio', name: 'replay-kind', value: 'from', checked: !afterEvent });
    const kindAfter = el('input', { type: 'radio', name: 'replay-kind', value: 'after', checked: !!afterEvent });
    const countButton = el('button', { type: 'button', id: 'replay-count' }, t('replayCount'));
    const point = () => {
      if (kindAfter.checked) return afterInput.value.trim() ? { after_event: afterInput.value.trim() } : null;
      if (!fromInput.value) return null;
      const d = new Date(fromInput.value);
      return Number.isNaN(d.getTime()) ? null : { from: d.toISOString() };
    };
    const reset = () => {
      counted = null;
      $('action-result').textContent = '';
      $('action-result').dataset.events = '';
      $('action-confirm').disabled = true;
      $('action-confirm').textContent = t('replayConfirmAny');
    };
    for (const i of [fromInput, afterInput, kindFrom, kindAfter]) i.addEventListener('input', reset);
    fromInput.addEventListener('focus', () => { kindFrom.checked = true; reset(); });
    afterInput.addEventListener('focus', () => { kindAfter.checked = true; reset(); });
    countButton.addEventListener('click', async () => {
      const p = point();
      const result = $('action-result');
      if (!p) { result.textContent = t('replayNeedsPoint'); return; }
      countButton.disabled = true;
      result.textContent = t('replayCounting');
      try {
        const dry = await call('POST', this.path('replay'), { body: { ...p, dry_run: true } });
        counted = p;
        let text;
        if (dry.events === null || dry.events === undefined) text = t('replayWillSendUnknown');
        else if (dry.events === 0) text = t('replayWillSendNone');
        else text = t('replayWillSend', { events: dry.events, first: formatTime(dry.first_at), last: formatTime(dry.last_at) });
        if (dry.pending) text += ' ' + t('replayWaits');
        result.textContent = text;
        result.dataset.events = dry.events === null || dry.events === undefined ? '' : String(dry.events);
        $('action-confirm').disabled = false;
        $('action-confirm').textContent = dry.events > 0 ? t('replayConfirm', { events: dry.events }) : t('replayConfirmAny');
        counted.events = dry.events;
        counted.pending = dry.pending;
      } catch (err) {
        result.textContent = actionError(err);
      }
      countButton.disabled = false;
    });
    openDialog({
      title: t('replayTitle', { id: c.id }),
      body: [
        el('p', { class: 'help' }, t('replayExplain')),
        el('label', { class: 'choice' }, kindFrom, ' ', t('replayFrom'), ' ', fromInput),
        el('label', { class: 'choice' }, kindAfter, ' ', t('replayAfter'), ' ', afterInput),
        countButton,
      ],
      confirm: t('replayConfirmAny'),
      confirmDisabled: true,
      onConfirm: async () => {
        if (!counted) return;
        const { events, pending, ...body } = counted;
        this.setNotice('');
        try {
          const res = await call('POST', this.path('replay'), { body });
          this.takeCard(res);
          this.setNotice(res.replay && res.replay.pending ? t('replayDonePending') : t('replayDone', { events: events ?? '?' }), 'ok');
        } catch (err) {
          this.setNotice(actionError(err), 'error');
        }
        this.renderState();
      },
    });
  }

  askRetry(r) {
    openDialog({
      title: t('retryTitle', { n: r.n }),
      body: [el('p', {}, t('retryExplain', { event: r.event_id }))],
      confirm: t('retryConfirm'),
      onConfirm: async () => {
        this.setNotice('');
        try {
          const res = await call('POST', this.path('attempts/' + r.n + '/retry'));
          this.setNotice(t('retryDone', { n: r.n, attempt: res.attempt }), 'ok');
        } catch (err) {
          this.setNotice(actionError(err), 'error');
        }
        this.renderState();
      },
    });
  }

  // askDisable shows what a disable takes with it (the account's destinations in the
  // same AWS account or Google Cloud project, as the dispatcher cascades) before it is done.
  async askDisable() {
    const scope = cloudScope(this.card);
    let all = [this.card];
    if (scope) {
      const query = { account: this.card.account, page_size: '200' };
      const lists = await Promise.all(connectors.map((c) => call('GET', '/v1/connectors/' + c + '/destinations', { query })
        .then((l) => l.destinations, () => [])));
      all = [this.card, ...lists.flat().filter((o) => o.id !== this.card.id && o.account === this.card.account && cloudScope(o) === scope)];
    }
    $('disable-title').textContent = t('disableTitle', { id: this.card.id });
    $('disable-explain').textContent = all.length > 1 ? t('disableCascade', { scope }) : t('disableOnlyThis');
    $('disable-list').replaceChildren(...all.map((o) => el('li', { 'data-id': o.id }, o.id + ' (' + t(o.connector) + ')')));
    $('disable-reason').value = '';
    const dialog = $('disable-dialog');
    dialog.returnValue = '';
    dialog.onclose = async () => {
      if (dialog.returnValue !== 'confirm') return;
      try {
        const reason = $('disable-reason').value.trim();
        const res = await call('POST', this.path('disable'), { body: reason ? { reason } : {} });
        this.setNotice(t('disabledIds', { ids: res.disabled.join(', ') }), 'ok');
      } catch (err) {
        this.setNotice(actionError(err), 'error');
      }
      this.renderState();
    };
    dialog.showModal();
  }

  async loadAttempts(first) {
    const query = { limit: String(attemptsPage) };
    if (!first && this.attempts.next !== null) query.before = String(this.attempts.next);
    if (first && this.attempts.rows.length > attemptsPage) query.limit = String(this.attempts.rows.length);
    try {
      const page = await call('GET', this.path('attempts'), { query });
      this.attempts.rows = first ? page.attempts : [...this.attempts.rows, ...page.attempts];
      this.attempts.next = page.next ?? null;
      this.attempts.loaded = true;
    } catch (err) {
      this.setNotice(actionError(err), 'error');
      this.renderState();
    }
    this.renderAttempts();
  }

  renderAttempts() {
    const a = this.attempts;
    if (!a.loaded) return;
    if (a.rows.length === 0) {
      this.attemptsBox.replaceChildren(el('p', { class: 'help' }, t('attemptsEmpty')));
      return;
    }
    const head = el('tr', {}, el('th', {}, t('at')), el('th', {}, t('outcome')), el('th', {}, t('eventId')),
      el('th', {}, t('message')));
    const body = [];
    for (const r of a.rows) {
      const retryable = ['rejected', 'expired', 'delivered'].includes(r.outcome) && r.event_id && !r.event_id.startsWith('relay.test.');
      const buttons = [
        el('button', { type: 'button', class: 'show small', onclick: () => this.toggleDetail(r) }, t('show')),
        retryable && r.outcome !== 'delivered'
          ? el('button', { type: 'button', class: 'retry small', onclick: () => this.askRetry(r) }, t('retry')) : null,
        retryable ? el('button', { type: 'button', class: 'replay-after small', onclick: () => this.askReplay(r.event_id) }, t('replayAfterThis')) : null,
      ];
      body.push(el('tr', { class: 'attempt', 'data-n': r.n, 'data-outcome': r.outcome, 'data-event': r.event_id || '' },
        el('td', {}, formatTime(r.at)), el('td', {}, t('outcome_' + r.outcome)), el('td', { class: 'mono' }, r.event_id || ''),
        el('td', { class: 'message' }, r.message || '', el('div', { class: 'row-actions' }, buttons))));
      if (a.shown.has(r.n)) body.push(el('tr', { class: 'detail', 'data-n': r.n }, el('td', { colspan: '4' }, detailView(a.shown.get(r.n)))));
    }
    // replaceChildren would write a null as the text "null": only elements go in.
    const parts = [el('table', {}, el('thead', {}, head), el('tbody', {}, body))];
    if (a.next !== null) parts.push(el('button', { type: 'button', class: 'older', onclick: () => this.loadAttempts(false) }, t('older')));
    this.attemptsBox.replaceChildren(...parts);
    this.renderButtons();
  }

  async toggleDetail(r) {
    const shown = this.attempts.shown;
    if (shown.has(r.n)) {
      shown.delete(r.n);
    } else {
      try {
        shown.set(r.n, await call('GET', this.path('attempts/' + r.n)));
      } catch (err) {
        this.setNotice(actionError(err), 'error');
        this.renderState();
        return;
      }
    }
    this.renderAttempts();
  }

  async loadChart() {
    this.chartAt = Date.now();
    try {
      this.chart = await call('GET', this.path('minutes'));
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

function sum(v) { return (v || []).reduce((a, b) => a + b, 0); }

// lagText words a card's lag: caught up, or how many wait and since when.
function lagText(lag) {
  if (!lag) return t('lagUnknown');
  if (!lag.events) return t('lagCaughtUp');
  return t('lagEvents', { events: lag.events, at: formatTime(lag.oldest_undelivered_at), age: formatAge(lag.oldest_undelivered_age_seconds) });
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

// chartView draws deliveries and failures per minute over the last 24 hours as an
// inline SVG (no library): one bar per minute that had any, failures over deliveries.
function chartView(m) {
  const n = m.delivered.length;
  const h = 40;
  const top = Math.max(1, ...m.delivered, ...m.failed);
  const bars = (values) => {
    let d = '';
    values.forEach((v, i) => { if (v > 0) d += 'M' + (i + 0.5) + ' ' + h + 'V' + (h - Math.max(1, (v / top) * h)).toFixed(2); });
    return d;
  };
  // An <svg> the HTML parser made (index.html's template): its namespace is SVG's.
  const svg = $('chart-svg').content.firstElementChild.cloneNode(false);
  const svgNS = svg.namespaceURI;
  svg.setAttribute('viewBox', '0 0 ' + n + ' ' + h);
  svg.setAttribute('aria-label', t('chartTitle') + ': ' + t('chartTotals', { delivered: sum(m.delivered), failed: sum(m.failed) }));
  for (const [cls, values] of [['delivered', m.delivered], ['failed', m.failed]]) {
    const p = document.createElementNS(svgNS, 'path');
    p.setAttribute('class', cls);
    p.setAttribute('d', bars(values) || 'M0 ' + h);
    svg.append(p);
  }
  const base = document.createElementNS(svgNS, 'path');
  base.setAttribute('class', 'base');
  base.setAttribute('d', 'M0 ' + (h - 0.5) + 'H' + n);
  svg.append(base);
  return [
    el('figcaption', {}, el('strong', {}, t('chartTitle')), ' · ',
      el('span', { class: 'totals' }, t('chartTotals', { delivered: sum(m.delivered), failed: sum(m.failed) }))),
    svg,
    el('div', { class: 'axis' }, el('span', {}, t('chart24h')), el('span', {}, t('chartNow'))),
  ];
}

// openDialog shows the action dialog: a title, a body, and a confirmation that runs
// onConfirm only when chosen.
function openDialog({ title, body, confirm, confirmDisabled = false, onConfirm }) {
  const dialog = $('action-dialog');
  $('action-title').textContent = title;
  $('action-body').replaceChildren(...body.flat().filter(Boolean));
  $('action-result').textContent = '';
  $('action-result').dataset.events = '';
  $('action-confirm').textContent = confirm;
  $('action-confirm').disabled = confirmDisabled;
  $('action-cancel').textContent = t('cancel');
  dialog.returnValue = '';
  dialog.onclose = () => { if (dialog.returnValue === 'confirm') onConfirm(); };
  dialog.showModal();
}

// actionError words an action's refusal. An action this scope may not take is 403
// FORBIDDEN by the contract; the API has answered ACCESS_REVOKED for some (an account
// token's disable): both are a refusal of this action, shown with the API's reason,
// not a sign-out.
function actionError(err) {
  // fetch throws a TypeError when no answer came (the relay is down or unreachable);
  // a proxy in front answers 502, 503 or 504 without the API's JSON.
  if (!(err instanceof ApiError) || /^HTTP_50[234]$/.test(err.code)) return t('unreachable');
  if (err instanceof ApiError && err.status === 403 && (err.code === 'FORBIDDEN' || err.code === 'ACCESS_REVOKED')) {
    return t('notAllowed', { message: err.message });
  }
  return t('actionFailed', { code: err.code || '', message: err.message });
}

function row(label, value) {
  return [el('dt', {}, label), el('dd', {}, value)];
}

// copyable is a value with a Copy button that copies exactly the text shown.
function copyable(text, name, block = false) {
  const value = el(block ? 'pre' : 'code', { class: 'copy-value', 'data-copy': name }, text);
  const button = el('button', { type: 'button', class: 'copy', 'data-copy': name }, t('copy'));
  button.addEventListener('click', () => copy(text, button, value));
  return el('div', { class: block ? 'copyable block' : 'copyable' }, value, button);
}

async function copy(text, button, value) {
  let ok = false;
  try {
    await navigator.clipboard.writeText(text);
    ok = true;
  } catch {
    // No clipboard API (an insecure origin, a denied permission): select it for Ctrl+C.
    const range = document.createRange();
    range.selectNodeContents(value);
    const sel = getSelection();
    sel.removeAllRanges();
    sel.addRange(range);
    ok = document.execCommand && document.execCommand('copy');
  }
  button.textContent = ok ? t('copied') : t('copyFailed');
  button.dataset.copied = ok ? 'true' : 'false';
  setTimeout(() => { button.textContent = t('copy'); }, 2000);
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
  return rows;
}

function setupBlocks(c) {
  const s = c.setup || {};
  const json = (v) => JSON.stringify(v, null, 2);
  if (c.connector === 'pubsub') {
    return [
      el('h3', {}, t('serviceAccount')), copyable(s.service_account || '', 'service-account'),
      el('h3', {}, t('commands')),
      (s.commands || []).map((cmd, i) => copyable(cmd, 'command-' + (i + 1), true)),
    ];
  }
  return [
    el('h3', {}, t('externalId')), copyable(c.external_id || '', 'external-id'),
    el('h3', {}, t('ourRole')), copyable(s.principal_arn || '', 'principal-arn'),
    el('h3', {}, t('trustPolicy')), copyable(json(s.trust_policy), 'trust-policy', true),
    el('h3', {}, t('permissionsPolicy')), copyable(json(s.permissions_policy), 'permissions-policy', true),
    el('h3', {}, t('kmsStatement')),
    s.kms_statement ? copyable(json(s.kms_statement), 'kms-statement', true) : el('p', { class: 'help' }, t('noKms')),
  ];
}

// cloudScope is the dispatcher's cascade scope (destination.CloudScope): the AWS account
// of the role, or the Google Cloud project.
function cloudScope(c) {
  if (c.connector === 'pubsub') return c.target.project_id ? 'gcp:' + c.target.project_id : '';
  const m = /^arn:[^:]+:iam::(\d{12}):/.exec((c.target && c.target.role_arn) || '');
  return m ? 'aws:' + m[1] : '';
}

// ---- start ----

function init() {
  setLanguage(language());
  $('lang').addEventListener('change', () => {
    setLanguage($('lang').value, true);
    renderChrome();
    for (const v of app.views.values()) v.render();
  });
  $('signin').addEventListener('submit', async (e) => {
    e.preventDefault();
    const value = $('token').value.trim();
    if (!value) return;
    try {
      await signIn(value);
    } catch (err) {
      showSignIn(t('signInFailed', { message: err.message }));
      return;
    }
    $('token').value = '';
    if (!location.hash) location.hash = '#/eventbridge';
    else route();
  });
  $('signout').addEventListener('click', signOut);
  let searchTimer = null;
  const filtersChanged = () => {
    app.filters = { status: $('filter-status').value, q: $('search').value.trim(), account: $('filter-account').value.trim() };
    app.tokens = [''];
    loadPage();
  };
  $('filter-status').addEventListener('change', filtersChanged);
  for (const id of ['search', 'filter-account']) {
    $(id).addEventListener('input', () => {
      clearTimeout(searchTimer);
      searchTimer = setTimeout(filtersChanged, 250);
    });
  }
  $('toolbar').addEventListener('submit', (e) => { e.preventDefault(); clearTimeout(searchTimer); filtersChanged(); });
  $('next-page').addEventListener('click', () => {
    if (!app.next) return;
    app.tokens.push(app.next);
    loadPage();
  });
  $('prev-page').addEventListener('click', () => {
    if (app.tokens.length <= 1) return;
    app.tokens.pop();
    loadPage();
  });
  window.addEventListener('hashchange', route);
  renderChrome();
  if (!token()) {
    showSignIn();
    return;
  }
  signIn(token()).then(route, (err) => showSignIn(t('signInFailed', { message: err.message })));
}

init();
