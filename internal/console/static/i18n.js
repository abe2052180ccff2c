// The console's words in English and Spanish (words-en.js, words-es.js), and how they
// are chosen and filled in. The language is the browser's first one we speak, unless the
// user chose another with the switch (kept in localStorage: it is not a secret).

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

// formatNumber shows a number in the user's language (2.5, 2,5).
export function formatNumber(n) {
  return Number(n).toLocaleString(current);
}

// formatAge words a duration in seconds, roughly: "40 s", "3 min", "2 h", "4 d".
export function formatAge(seconds) {
  const s = Math.max(0, Math.round(Number(seconds) || 0));
  if (s < 90) return t('ago_s', { n: s });
  if (s < 5400) return t('ago_m', { n: Math.round(s / 60) });
  if (s < 172800) return t('ago_h', { n: Math.round(s / 3600) });
  return t('ago_d', { n: Math.round(s / 86400) });
}
