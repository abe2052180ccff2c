// Adding a destination: a form with exactly the connector's fields (named as the create
// body names them), each field's problem shown beside it in the API's own words and
// nothing typed lost on an error. On success the new card opens at the top of the page
// with its setup ready to copy and Send a test under it (list.js pins it there).

import { ApiError, call } from './api.js';
import { $, el } from './dom.js';
import { actionError } from './errors.js';
import { eventList, field, showProblems } from './fields.js';
import { t } from './i18n.js';
import { app, isAdmin } from './state.js';

// targetFields are each connector's target fields, as the create body names them.
const targetFields = {
  eventbridge: ['bus_arn', 'role_arn'],
  kinesis: ['stream_arn', 'role_arn', 'kms_key_arn'],
  pubsub: ['project_id', 'topic_id'],
};
const optional = new Set(['kms_key_arn', 'id', 'events']);

// forms keeps each connector's form as the user left it: open or not, what was typed,
// the last refusal. Another page or a language switch loses none of it.
const forms = {};
/** @type {(card: import('./api.js').Card) => void} */
let onCreated = () => {};

function formOf(connector) {
  forms[connector] ??= { open: false, values: {}, error: null, key: '', sent: '' };
  return forms[connector];
}

// fieldNames are the form's fields: an operator names the account, an account's token
// adds to its own.
function fieldNames(connector) {
  return [...(isAdmin() ? ['account'] : []), ...targetFields[connector], 'id', 'events'];
}

// renderAdd draws the shown connector's form, as it was left, in the current language.
export function renderAdd() {
  const connector = app.connector;
  const form = $('add-form');
  if (!targetFields[connector]) return;
  const f = formOf(connector);
  $('add-open').hidden = f.open;
  form.hidden = !f.open;
  form.dataset.connector = connector;
  if (!f.open) {
    form.replaceChildren();
    return;
  }
  form.replaceChildren(
    el('h2', { class: 'form-title' }, t('addTitle', { connector: t(connector) })),
    el('p', { class: 'help' }, t('addExplain_' + connector)),
    el('div', { class: 'fields' }, fieldNames(connector).map((n) => field('add', n, { value: f.values[n] ?? '', optional: optional.has(n) }))),
    el('p', { class: 'error form-error', id: 'add-error', role: 'alert' }),
    el('div', { class: 'actions' },
      el('button', { type: 'submit', id: 'add-submit' }, t('addSubmit')),
      el('button', { type: 'button', id: 'add-cancel', class: 'secondary', onclick: () => close(connector) }, t('cancel'))));
  for (const input of form.querySelectorAll('input')) {
    input.addEventListener('input', () => { f.values[input.name] = input.value; });
  }
  if (f.error) showError(f);
}

function open() {
  formOf(app.connector).open = true;
  renderAdd();
  $('add-form').querySelector('input')?.focus();
}

// close hides the form; what was typed stays for the next time it opens.
function close(connector) {
  formOf(connector).open = false;
  renderAdd();
  $('add-open').focus();
}

async function submit(e) {
  e.preventDefault();
  const connector = app.connector;
  const f = formOf(connector);
  const form = $('add-form');
  const body = {};
  for (const n of fieldNames(connector)) {
    const v = (form.elements[n]?.value ?? '').trim();
    if (n === 'events') {
      const list = eventList(v);
      if (list.length) body.events = list;
    } else if (v) {
      body[n] = v;
    }
  }
  // One Idempotency-Key per body: a create whose answer was lost, sent again, answers
  // with the destination the first one made instead of making a second.
  const sent = JSON.stringify(body);
  if (sent !== f.sent) {
    f.key = newKey();
    f.sent = sent;
  }
  const button = $('add-submit');
  button.disabled = true;
  button.textContent = t('addAdding');
  let card;
  try {
    card = /** @type {import('./api.js').Card} */ (await call('POST', '/v1/connectors/' + connector + '/destinations', { body, extraHeaders: { 'Idempotency-Key': f.key } }));
  } catch (err) {
    f.error = err;
    button.disabled = false;
    button.textContent = t('addSubmit');
    if (app.connector === connector) showError(f);
    return;
  }
  forms[connector] = undefined; // made: the next one starts from an empty form
  if (app.connector !== connector) return;
  renderAdd();
  onCreated(card);
}

// showError shows a refusal: each field's problems beside it, in the API's words (a
// taken id is the id field's); the rest above the buttons.
function showError(f) {
  const err = f.error;
  const form = $('add-form');
  let problems = err instanceof ApiError ? err.fields : [];
  if (err instanceof ApiError && err.code === 'ALREADY_EXISTS') problems = [{ field: 'id', message: err.message }];
  const rest = showProblems(form, problems);
  const general = problems.length ? t('addNotMade') : actionError(err);
  $('add-error').replaceChildren(...[general, ...rest].map((line) => el('span', { class: 'line' }, line)));
}

function newKey() {
  const b = crypto.getRandomValues(new Uint8Array(16));
  return 'console-' + [...b].map((x) => x.toString(16).padStart(2, '0')).join('');
}

// resetAdd forgets every form: the next one signed in starts from empty ones.
export function resetAdd() {
  for (const k of Object.keys(forms)) delete forms[k];
}

// initAdd wires the form; created(card) shows a destination once it is made.
export function initAdd(created) {
  onCreated = created;
  $('add-open').addEventListener('click', open);
  $('add-form').addEventListener('submit', submit);
}
