// Changing and deleting a destination the API made (one the config file defines offers
// neither: card.js): change its role, KMS key, events filter, window or rate cap, each
// field's problem beside it; delete once its id is typed, saying what stops and whether a write was in
// flight when it did.

import { call } from './api.js';
import { renderSummary, updateLive } from './chrome.js';
import { openDialog } from './dialogs.js';
import { $, el } from './dom.js';
import { actionError } from './errors.js';
import { clearProblems, eventList, field, setProblem, showProblems } from './fields.js';
import { t } from './i18n.js';
import { app } from './state.js';

// changeable are the fields a change may set, by connector: the target never changes.
const changeable = { eventbridge: ['role_arn'], kinesis: ['role_arn', 'kms_key_arn'], pubsub: [] };

// settings are the delivery settings a change may set, named as the card and the body
// name them.
const settings = ['in_flight', 'max_rate'];

// shown is a setting as its field shows it: empty when the card has none.
const shown = (v) => (v === null || v === undefined ? '' : String(v));

// settingValue is what a setting's field sends: null when emptied (the relay's default
// window, no cap), the number typed (a decimal comma read as a point), else the text
// itself, which the API refuses in its own words beside the field.
function settingValue(text) {
  if (text === '') return null;
  const n = text.replace(/^(\d+),(\d+)$/, '$1.$2');
  return /^[-+]?\d+(\.\d+)?$/.test(n) ? Number(n) : text;
}

// askChange asks for a new role (and key), events filter, window or rate cap, and keeps
// the dialog open, as typed, while the API refuses the change.
export function askChange(v) {
  const c = v.card;
  const current = (n) => (c.target && c.target[n]) || '';
  const names = changeable[c.connector] || [];
  // The card does not carry the events filter: keep it, every event, or the types named.
  const only = el('input', { type: 'text', id: 'change-events', name: 'events', autocomplete: 'off', spellcheck: 'false',
    'aria-describedby': 'change-events-error' });
  const kind = (value, label, checked, ...extra) => el('label', { class: 'choice' },
    el('input', { type: 'radio', name: 'events-kind', value, checked }), ' ', label, ...extra);
  const events = el('fieldset', { class: 'field', 'data-field': 'events' },
    el('legend', {}, t('field_events')),
    kind('keep', t('eventsKeep'), true), kind('all', t('eventsAll'), false), kind('only', t('eventsOnly'), false, ' ', only),
    el('p', { class: 'field-error', id: 'change-events-error', role: 'alert' }));
  only.addEventListener('focus', () => { events.querySelector('input[value="only"]').checked = true; });
  const tuning = settings.map((n) => field('change', n, { value: shown(c[n]), optional: true }));
  for (const f of tuning) f.querySelector('input').setAttribute('inputmode', 'decimal');
  const box = el('div', { class: 'change-fields' },
    el('p', { class: 'help' }, t('changeExplain')),
    names.length ? el('p', { class: 'help' }, t('changeRoleNote')) : null,
    names.map((n) => field('change', n, { value: current(n), optional: n === 'kms_key_arn', help: false })),
    events, tuning);
  openDialog({
    title: t('changeTitle', { id: c.id }),
    body: [box],
    confirm: t('changeConfirm'),
    onSubmit: async () => {
      const result = $('action-result');
      result.textContent = '';
      clearProblems(box);
      const body = {};
      for (const n of names) {
        const value = box.querySelector('input[name="' + n + '"]').value.trim();
        if (value !== current(n)) body[n] = value;
      }
      for (const n of settings) {
        const text = box.querySelector('input[name="' + n + '"]').value.trim();
        if (text !== shown(c[n])) body[n] = settingValue(text);
      }
      const chosen = box.querySelector('input[name="events-kind"]:checked').value;
      if (chosen === 'all') body.events = [];
      if (chosen === 'only') {
        body.events = eventList(only.value);
        if (!body.events.length) {
          setProblem(events, t('eventsNeeded'));
          return false;
        }
      }
      if (Object.keys(body).length === 0) {
        result.textContent = t('changeNothing');
        return false;
      }
      try {
        v.takeDefinition(/** @type {import('./api.js').Card} */ (await call('PATCH', v.path(), { body })));
      } catch (err) {
        const rest = showProblems(box, err.fields || []);
        result.textContent = [err.fields && err.fields.length ? t('changeNotMade') : actionError(err), ...rest].join(' ');
        return false;
      }
      v.setNotice(t('changeDone'), 'ok');
      v.render();
      return true;
    },
  });
}

// askDelete names what stops and deletes only once the id is typed; the page then says
// whether a write was under way when it did (it may still land) and drops the card.
export function askDelete(v) {
  const c = v.card;
  const typed = el('input', { type: 'text', id: 'delete-typed', autocomplete: 'off', spellcheck: 'false' });
  openDialog({
    title: t('deleteTitle', { id: c.id }),
    body: [
      el('p', { class: 'delete-stops' }, t('deleteStops', { target: targetName(c) })),
      el('p', {}, t('deleteGone')),
      c.external_id ? el('p', {}, t('deleteExternalId')) : null,
      el('label', { for: 'delete-typed' }, t('deleteType', { id: c.id })),
      typed,
    ],
    confirm: t('deleteConfirm', { id: c.id }),
    confirmDisabled: true,
    danger: true,
    onConfirm: async () => {
      if (typed.value.trim() !== c.id) return;
      let res;
      try {
        res = /** @type {import('./api.js').DestinationDeleted} */ (await call('DELETE', v.path()));
      } catch (err) {
        v.setNotice(actionError(err), 'error');
        v.renderState();
        return;
      }
      removeCard(v);
      const notice = $('page-notice');
      notice.textContent = t(res.write_in_flight ? 'deletedInFlight' : 'deletedNoWrite', { id: c.id, target: targetName(c) });
      notice.dataset.deleted = c.id;
      notice.dataset.writeInFlight = String(!!res.write_in_flight);
    },
  });
  typed.addEventListener('input', () => { $('action-confirm').disabled = typed.value.trim() !== c.id; });
}

// targetName is where a destination writes: the bus, the stream or the topic.
function targetName(c) {
  const g = c.target || {};
  if (c.connector === 'pubsub') return 'projects/' + g.project_id + '/topics/' + g.topic_id;
  return g.bus_arn || g.stream_arn || '';
}

// removeCard takes a deleted destination's card off the page and stops following it.
function removeCard(v) {
  v.follower.stop();
  v.root.remove();
  app.views.delete(v.card.id);
  if (app.fresh && app.fresh.id === v.card.id) app.fresh = null;
  if (app.matched) app.matched--;
  if (app.views.size === 0) {
    app.summary = null;
    $('page-note').textContent = t('noDestinations');
  }
  renderSummary();
  updateLive();
}
