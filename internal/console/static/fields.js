// Form fields that show their own problem: a label, the input, a hint, and beside the
// input the API's words when a create or change refused it (fields[] of its 400 answer).

import { el } from './dom.js';
import { t } from './i18n.js';

// field builds one field; name is the API body's (bus_arn), prefix keeps ids unique.
export function field(prefix, name, { value = '', optional = false, help = true } = {}) {
  const id = prefix + '-' + name;
  const input = el('input', {
    id, name, type: 'text', value, autocomplete: 'off', spellcheck: 'false', 'aria-describedby': (help ? id + '-help ' : '') + id + '-error',
  });
  return el('div', { class: 'field', 'data-field': name },
    el('label', { for: id }, t('field_' + name), optional ? el('span', { class: 'optional' }, ' ', t('optional')) : null),
    input,
    help ? el('p', { class: 'help', id: id + '-help' }, t('fieldHelp_' + name)) : null,
    el('p', { class: 'field-error', id: id + '-error', role: 'alert' }));
}

// fieldOf is the form field a problem's path names: "events[1]" is the events field.
const fieldOf = (path) => String(path || '').replace(/[[.].*$/, '');

export function clearProblems(box) {
  for (const f of box.querySelectorAll('.field')) setProblem(f, '');
}

// setProblem writes a field's problems beside it ('' clears them).
export function setProblem(f, text) {
  f.dataset.invalid = text ? 'true' : 'false';
  f.querySelector('.field-error').textContent = text;
  const input = f.querySelector('input[type="text"]');
  if (input) input.setAttribute('aria-invalid', text ? 'true' : 'false');
}

// showProblems writes each field problem of an API refusal beside its field in box (a
// field's several problems one after the other) and returns those no field of box
// shows, as "field: message". The values typed stay as they are.
export function showProblems(box, problems) {
  clearProblems(box);
  const fields = new Map([...box.querySelectorAll('.field')].map((f) => [f.dataset.field, f]));
  const byField = new Map();
  const rest = [];
  for (const p of problems) {
    const f = fields.get(fieldOf(p.field));
    if (!f) {
      rest.push(p.field + ': ' + p.message);
      continue;
    }
    byField.set(f, [...(byField.get(f) || []), p.message]);
  }
  for (const [f, messages] of byField) setProblem(f, messages.join(' '));
  const first = [...byField.keys()][0];
  if (first) first.querySelector('input[type="text"]')?.focus();
  return rest;
}

// eventList reads an events field: types separated by commas or spaces.
export function eventList(text) {
  return String(text).split(/[\s,]+/).filter(Boolean);
}
