// The console's words in English and Spanish (words-en.js, words-es.js), and how they
// are chosen and filled in. The language is the browser's first one we speak, unless the
// user chose another with the switch (kept in localStorage: it is not a secret).

import { ApiError } from './api.js';
import { app } from './state.js';
import en from './words-en.js';
import es from './words-es.js';

const words = { en, es };

export const languages = Object.keys(words);

// pickLanguage returns the saved choice, else the browser's first language we speak.
export function pickLanguage() {
  const saved = localStorage.getItem('relay.lang');
  if (saved && words[saved]) return saved;
  for (const l of navigator.languages || [navigator.language || 'en']) {
    const base = String(l).toLowerCase().split('-')[0];
    if (words[base]) return base;
  }
  return 'en';
}

let current = pickLanguage();

export function language() { return current; }

// setLanguage switches to lang; save keeps it as the user's choice for the next visits
// (only the switch saves: the browser's language is read afresh each time otherwise).
export function setLanguage(lang, save = false) {
  if (!words[lang]) return;
  current = lang;
  if (save) localStorage.setItem('relay.lang', lang);
  document.documentElement.lang = lang;
}

// t returns the word for key in the current language, with {name} filled from vars.
export function t(key, vars = {}) {
  const s = words[current][key] ?? words.en[key] ?? key;
  return s.replace(/\{(\w+)\}/g, (_, k) => String(vars[k] ?? ''));
}

// formatTime shows an RFC 3339 time in the user's language and zone.
export function formatTime(at) {
  if (at === null || at === undefined || at === '') return '';
  const d = new Date(at);
  if (Number.isNaN(d.getTime())) return String(at);
  return d.toLocaleString(current);
}

// formatAge words a duration in seconds, roughly: "40 s", "3 min", "2 h", "4 d".
export function formatAge(seconds) {
  const s = Math.max(0, Math.round(Number(seconds) || 0));
  if (s < 90) return t('ago_s', { n: s });
  if (s < 5400) return t('ago_m', { n: Math.round(s / 60) });
  if (s < 172800) return t('ago_h', { n: Math.round(s / 3600) });
  return t('ago_d', { n: Math.round(s / 86400) });
}

// actionError words an action's refusal. An action this scope may not take is 403
// FORBIDDEN by the contract; the API has answered ACCESS_REVOKED for some (an account
// token's disable): both are a refusal of this action, shown with the API's reason,
// not a sign-out.
export function actionError(err) {
  // fetch throws a TypeError when no answer came (the relay is down or unreachable);
  // a proxy in front answers 502, 503 or 504 without the API's JSON.
  if (!(err instanceof ApiError) || /^HTTP_50[234]$/.test(err.code)) return t('unreachable');
  // A console session that ended (signed out in another tab, revoked, expired): the
  // API's sentence says which and what to do.
  if (err.status === 403 && err.code === 'ACCESS_REVOKED' && app.sessionEnds) return t('sessionRefused', { message: err.message });
  if (err instanceof ApiError && err.status === 403 && (err.code === 'FORBIDDEN' || err.code === 'ACCESS_REVOKED')) {
    return t('notAllowed', { message: err.message });
  }
  return t('actionFailed', { code: err.code || '', message: err.message });
}
