// A connector's page: its cards, a page of them at a time, under the status, search and
// account filters, with one live transport for the page's cards; a destination just
// added first, whatever the filters and page.

import { renderAdd } from './add.js';
import { ApiError, call, token } from './api.js';
import { CardView } from './card.js';
import { renderChrome, renderPager, renderSummary, updateLive } from './chrome.js';
import { $ } from './dom.js';
import { actionError } from './errors.js';
import { follow } from './follow.js';
import { t } from './i18n.js';
import { signOut } from './session.js';
import { app, connectors, isAdmin, stopPage } from './state.js';

const pageSize = 50; // cards a page shows (the list API's page_size)

// route shows the connector the address names, once signed in.
export function route() {
  if (!token() || !app.scope) return;
  const name = location.hash.replace(/^#\//, '');
  showConnector(connectors.includes(name) ? name : 'eventbridge');
}

function showConnector(connector) {
  app.connector = connector;
  app.tokens = [''];
  app.fresh = null;
  loadPage();
}

// showCreated shows the page again with the destination just made at its top.
export function showCreated(card) {
  app.fresh = card;
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
  renderAdd();
  $('page-notice').textContent = '';
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
    list = /** @type {import('./api.js').DestinationList} */ (await call('GET', '/v1/connectors/' + connector + '/destinations', { query }));
  } catch (err) {
    if (err instanceof ApiError && (err.status === 401 || err.code === 'ACCESS_REVOKED')) {
      signOut(t('signInFailed', { message: err.message }));
      return;
    }
    $('page-note').textContent = actionError(err);
    return;
  }
  if (load !== app.load) return; // another page was chosen meanwhile
  app.next = list.next_page_token ?? null;
  let cards = list.destinations;
  const fresh = app.fresh && app.fresh.connector === connector ? app.fresh : null;
  if (fresh) cards = [cards.find((c) => c.id === fresh.id) || fresh, ...cards.filter((c) => c.id !== fresh.id)];
  const filtered = app.filters.status || app.filters.q || app.filters.account;
  $('page-note').textContent = cards.length ? '' : t(filtered ? 'noMatch' : 'noDestinations');
  app.summary = list.summary || null;
  app.matched = list.matched ?? null;
  renderSummary();
  for (const card of cards) {
    const v = new CardView(card, { fresh: !!fresh && card.id === fresh.id });
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
  if (fresh) app.views.get(fresh.id).root.querySelector('h2').focus();
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

// initList wires the filters and the pager: each change asks the API for that page.
export function initList() {
  let searchTimer = null;
  const filtersChanged = () => {
    app.filters = { status: $('filter-status').value, q: $('search').value.trim(), account: $('filter-account').value.trim() };
    app.tokens = [''];
    app.fresh = null;
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
    app.fresh = null;
    loadPage();
  });
  $('prev-page').addEventListener('click', () => {
    if (app.tokens.length <= 1) return;
    app.tokens.pop();
    app.fresh = null;
    loadPage();
  });
}
