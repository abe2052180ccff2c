// Building the page. Everything is built with DOM calls, never by parsing markup, so
// nothing a card holds can run as markup.

import { t } from './i18n.js';

export const $ = (id) => document.getElementById(id);

// el builds an element: attrs (class, dataset entries as data-*, on* listeners), children.
export function el(tag, attrs = {}, ...children) {
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

// row is one label and value of a <dl>.
export function row(label, value) {
  return [el('dt', {}, label), el('dd', {}, value)];
}

// copyable is a value with a Copy button that copies exactly the text shown.
export function copyable(text, name, block = false) {
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
