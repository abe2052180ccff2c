// Sign-in: a token typed in, or a sign-in link's code exchanged for a session, is
// checked with the API and kept in this tab only (api.js); signing out ends a session
// on every replica, forgets the token and takes the page away.

import { resetAdd } from './add.js';
import { call, clearToken, errorOf, setToken } from './api.js';
import { $ } from './dom.js';
import { t } from './i18n.js';
import { app, stopPage } from './state.js';

let expiry = 0; // the timer that signs a session out when it ends

export async function signIn(value) {
  setToken(value);
  try {
    const who = /** @type {import('./api.js').WhoAmI} */ (await call('GET', '/v1/whoami'));
    app.scope = who.scope;
    app.sessionEnds = who.session ? who.expires_at : '';
  } catch (err) {
    clearToken();
    throw err;
  }
  clearTimeout(expiry);
  if (app.sessionEnds) {
    // setTimeout holds at most ~24.8 days; a session is at most a week.
    expiry = setTimeout(() => signOut(t('sessionEnded')), Math.max(0, Date.parse(app.sessionEnds) - Date.now()));
  }
  try {
    const s = await (await fetch('settings.json', { cache: 'no-store' })).json();
    if (s.disable_after > 0) app.disableAfter = s.disable_after;
  } catch { /* keep the default */ }
}

// linkCode is the code of a sign-in link (<public url>/console/#code=<code>), or ''.
// It travels only in the fragment, which no browser sends to a server.
export function linkCode() {
  if (!location.hash.startsWith('#code=')) return '';
  const code = location.hash.slice('#code='.length);
  try {
    return decodeURIComponent(code) || '-';
  } catch {
    return code; // mangled: the relay refuses it like any code it never issued
  }
}

// signInByLink exchanges a link's single-use code for a session (POST /v1/sessions, no
// token), first taking the code out of the address bar and the history, whatever the
// answer: a code is worth nothing once tried.
export async function signInByLink(code) {
  history.replaceState(null, '', location.pathname + location.search);
  // A tab signed in already: that session ends first, whatever the link turns out to be.
  if (app.scope) await signOut();
  const resp = await fetch('/v1/sessions', {
    method: 'POST', cache: 'no-store', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ code }),
  });
  if (!resp.ok) throw await errorOf(resp);
  await signIn((await resp.json()).token);
}

// signOut ends a console session on the relay (every replica refuses its token from
// then on) and forgets the token here; message says why on the sign-in form.
export async function signOut(message = '') {
  clearTimeout(expiry);
  if (app.sessionEnds) {
    try {
      await call('DELETE', '/v1/sessions/current', { signal: AbortSignal.timeout(5000) });
    } catch { /* ended already, or the relay is away: the token is forgotten here all the same */ }
  }
  clearToken();
  app.scope = '';
  app.sessionEnds = '';
  stopPage();
  resetAdd(); // what was typed is not the next one's
  showSignIn(typeof message === 'string' ? message : '');
}

export function showSignIn(message = '') {
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
