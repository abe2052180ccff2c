// Sign-in: the token typed in is checked with the API and kept in this tab only
// (api.js); signing out forgets it and takes the page away.

import { resetAdd } from './add.js';
import { call, clearToken, setToken } from './api.js';
import { $ } from './dom.js';
import { app, stopPage } from './state.js';

export async function signIn(value) {
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

export function signOut() {
  clearToken();
  app.scope = '';
  stopPage();
  resetAdd(); // what was typed is not the next one's
  showSignIn();
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
