// The console: sign-in, one page per connector, one live card per destination.
// Everything is built with DOM calls, never by parsing markup, so nothing a card holds can
// run as markup.

import { ApiError, call, clearToken, destinationPath, setToken, token } from './api.js';
import { Follower, follow } from './follow.js';
import { formatTime, language, setLanguage, t } from './i18n.js';

const connectors = ['eventbridge', 'kinesis', 'pubsub'];
const attemptsPage = 10;

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

async function showConnector(connector) {
  stopPage();
  app.connector = connector;
  $('signin').hidden = true;
  $('page').hidden = false;
  $('nav').hidden = false;
  $('signout').hidden = false;
  $('page').dataset.connector = connector;
  $('page').dataset.ready = 'false';
  renderChrome();
  $('page-note').textContent = t('loading');
  let list;
  try {
    list = await call('GET', '/v1/connectors/' + connector + '/destinations');
  } catch (err) {
    if (err instanceof ApiError && (err.status === 401 || err.code === 'ACCESS_REVOKED')) {
      signOut();
      $('signin-error').textContent = t('signInFailed', { message: err.message });
      return;
    }
    $('page-note').textContent = t('actionFailed', { code: err.code || '', message: err.message });
    return;
  }
  if (app.connector !== connector) return; // another page was chosen meanwhile
  $('page-note').textContent = list.destinations.length ? '' : t('noDestinations');
  for (const card of list.destinations) {
    const v = new CardView(card);
    app.views.set(card.id, v);
    $('cards').append(v.root);
  }
  // One stream carries every card's channel: a browser holds six connections to a host.
  app.live = follow([...app.views.values()].map((v) => v.follower));
  $('page').dataset.ready = 'true';
  updateLive();
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
}

// ---- a card ----

class CardView {
  constructor(card) {
    this.card = card;
    this.root = el('article', { class: 'card', 'data-id': card.id });
    this.testOutcome = null; // {outcome, message} of the last «Send a test»
    this.notice = ''; // the last action's answer or error
    this.attempts = { open: false, rows: [], next: null, loaded: false };
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
        if (this.attempts.open && ev.type.startsWith('delivery.')) this.loadAttempts(true);
      },
      onDrop: () => { this.root.dataset.duplicatesDropped = String(this.follower.duplicatesDropped); },
      onState: (state, err) => {
        this.root.dataset.live = state;
        if (err) this.notice = t('actionFailed', { code: err.code || '', message: err.message });
        this.renderState();
        updateLive();
      },
    });
    this.render();
  }

  path(action = '') { return destinationPath(this.card.connector, this.card.id, action); }

  render() {
    const c = this.card;
    this.stateBox = el('section', { class: 'state' });
    this.outcomeBox = el('p', { class: 'outcome', role: 'status' });
    this.attemptsBox = el('div', { class: 'attempts-body' });
    const details = el('details', { class: 'attempts' }, el('summary', {}, t('attempts')), this.attemptsBox);
    details.open = this.attempts.open;
    details.addEventListener('toggle', () => {
      this.attempts.open = details.open;
      if (details.open) this.loadAttempts(true);
    });
    const buttons = [
      el('button', { type: 'button', class: 'test', onclick: () => this.sendTest() }, t('sendTest')),
      el('button', { type: 'button', class: 'pause', onclick: () => this.act('pause') }, t('pause')),
      el('button', { type: 'button', class: 'activate', onclick: () => this.act('activate') }, t('activate')),
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
      el('div', { class: 'actions' }, buttons),
      this.outcomeBox,
      el('section', { class: 'setup' }, setupBlocks(c)),
      details,
    );
    this.renderState();
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
    const lf = c.last_failure;
    rows.push(row(t('lastFailure'), lf
      ? el('span', { class: 'last-failure' }, el('strong', {}, t('class_' + lf.class)), ' — ', lf.message,
        el('small', {}, ' · ', formatTime(lf.at), ' · ', t('event'), ' ', lf.event_id))
      : el('span', { class: 'last-failure' }, t('never'))));
    const ld = c.last_delivery;
    rows.push(row(t('lastDelivery'), ld
      ? el('span', { class: 'last-delivery' }, formatTime(ld.at), el('small', {}, ' · ', t('event'), ' ', ld.event_id))
      : el('span', { class: 'last-delivery' }, t('never'))));
    if (c.pending) {
      rows.push(row(t(c.pending.security ? 'pendingRefused' : 'pendingCheck'), el('span', { class: 'pending-info' }, c.pending.message,
        el('small', {}, ' · ', t('nextCheck'), ' ', formatTime(c.pending.next_check)))));
    }
    if (c.disabled) {
      rows.push(row(t('disabledSince'), el('span', { class: 'disabled-info' }, formatTime(c.disabled.at), ' — ', c.disabled.reason)));
    }
    this.stateBox.replaceChildren(el('dl', {}, rows));
    this.root.querySelector('.pause').disabled = c.status !== 'active';
    this.root.querySelector('.activate').disabled = c.status === 'active';

    this.outcomeBox.replaceChildren();
    if (this.testOutcome) {
      const o = this.testOutcome;
      this.outcomeBox.append(el('span', { class: 'test-outcome', 'data-outcome': o.outcome },
        t('testOutcome', { outcome: t('outcome_' + o.outcome) }), o.message && o.message !== o.outcome ? ' — ' + o.message : ''));
    }
    if (this.notice) this.outcomeBox.append(el('span', { class: 'notice' }, this.notice));
  }

  async sendTest() {
    const b = this.root.querySelector('.test');
    b.disabled = true;
    b.textContent = t('sending');
    this.testOutcome = null;
    this.notice = '';
    try {
      this.testOutcome = await call('POST', this.path('test'));
    } catch (err) {
      this.notice = t('actionFailed', { code: err.code || '', message: err.message });
    }
    b.disabled = false;
    b.textContent = t('sendTest');
    this.renderState();
  }

  // act pauses or activates; the channel brings the new state, the answer only says it worked.
  async act(action) {
    this.notice = '';
    try {
      await call('POST', this.path(action));
    } catch (err) {
      this.notice = actionError(err);
    }
    this.renderState();
  }

  // askDisable shows what a disable takes with it (the account's destinations in the
  // same AWS account or Google Cloud project, as the dispatcher cascades) before it is done.
  async askDisable() {
    const scope = cloudScope(this.card);
    let all = [this.card];
    if (scope) {
      const lists = await Promise.all(connectors.map((c) => call('GET', '/v1/connectors/' + c + '/destinations')
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
        this.notice = t('disabledIds', { ids: res.disabled.join(', ') });
      } catch (err) {
        this.notice = actionError(err);
      }
      this.renderState();
    };
    dialog.showModal();
  }

  async loadAttempts(first) {
    const query = { limit: String(attemptsPage) };
    if (!first && this.attempts.next !== null) query.before = String(this.attempts.next);
    try {
      const page = await call('GET', this.path('attempts'), { query });
      this.attempts.rows = first ? page.attempts : [...this.attempts.rows, ...page.attempts];
      this.attempts.next = page.next;
      this.attempts.loaded = true;
    } catch (err) {
      this.notice = t('actionFailed', { code: err.code || '', message: err.message });
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
    const head = el('tr', {}, el('th', {}, t('at')), el('th', {}, t('outcome')), el('th', {}, t('eventId')), el('th', {}, t('message')));
    const body = a.rows.map((r) => el('tr', { 'data-n': r.n, 'data-outcome': r.outcome },
      el('td', {}, formatTime(r.at)), el('td', {}, t('outcome_' + r.outcome)), el('td', { class: 'mono' }, r.event_id), el('td', {}, r.message || '')));
    this.attemptsBox.replaceChildren(
      el('table', {}, el('thead', {}, head), el('tbody', {}, body)),
      a.next !== null ? el('button', { type: 'button', class: 'older', onclick: () => this.loadAttempts(false) }, t('older')) : null,
    );
  }
}

// actionError words an action's refusal. An action this scope may not take is 403
// FORBIDDEN by the contract; the API has answered ACCESS_REVOKED for some (an account
// token's disable): both are a refusal of this action, shown with the API's reason,
// not a sign-out.
function actionError(err) {
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
  window.addEventListener('hashchange', route);
  renderChrome();
  if (!token()) {
    showSignIn();
    return;
  }
  signIn(token()).then(route, (err) => showSignIn(t('signInFailed', { message: err.message })));
}

init();
