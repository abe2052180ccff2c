// What surrounds the cards: the top bar (connectors, who is signed in, the live
// connection's state), the static words, the summary line and the pager.

import { $ } from './dom.js';
import { language, t } from './i18n.js';
import { app, isAdmin } from './state.js';

// renderChrome writes every static word in the current language.
export function renderChrome() {
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
    if (app.sessionEnds) {
      const ends = new Date(app.sessionEnds).toLocaleString(language(), { dateStyle: 'medium', timeStyle: 'short' });
      $('who').textContent += ' · ' + t('sessionEnds', { time: ends });
      $('who').dataset.sessionEnds = app.sessionEnds;
    } else {
      delete $('who').dataset.sessionEnds;
    }
  }
  updateLive();
}

// renderSummary counts the page's cards as they stand now (the list's summary, kept
// live by the cards' channels).
export function renderSummary() {
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

export function renderPager() {
  $('prev-page').disabled = app.tokens.length <= 1;
  $('next-page').disabled = !app.next;
  $('prev-page').parentElement.hidden = app.tokens.length <= 1 && !app.next;
}

// updateLive shows the page's worst connection state: reconnecting, then catching up.
export function updateLive() {
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
