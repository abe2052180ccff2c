// A card's dialogs: each says what an action will do before anything is sent (activate
// with or without what was missed, replay counted first, retry one message, disable
// with its cascade), and the card then says what happened.

import { call } from './api.js';
import { $, el } from './dom.js';
import { actionError } from './errors.js';
import { formatTime, t } from './i18n.js';
import { connectors } from './state.js';

// openDialog shows the action dialog: a title, a body, and a confirmation that runs
// onConfirm only when chosen, once the dialog closed. With onSubmit instead, the dialog
// stays open while it runs and closes only when it answers true (a change the API
// refused stays on screen as typed, its problems beside its fields).
export function openDialog({ title, body, confirm, confirmDisabled = false, danger = false, onConfirm = undefined, onSubmit = undefined }) {
  const dialog = $('action-dialog');
  const button = $('action-confirm');
  $('action-title').textContent = title;
  $('action-body').replaceChildren(...body.flat().filter(Boolean));
  $('action-result').textContent = '';
  $('action-result').dataset.events = '';
  button.textContent = confirm;
  button.disabled = confirmDisabled;
  button.classList.toggle('danger', danger);
  $('action-cancel').textContent = t('cancel');
  $('action-form').onsubmit = onSubmit ? async (e) => {
    if (e.submitter && e.submitter.value !== 'confirm') return; // Cancel closes it
    e.preventDefault();
    button.disabled = true;
    let done = false;
    try {
      done = await onSubmit();
    } finally {
      button.disabled = false;
    }
    if (done) dialog.close('confirm');
  } : null;
  dialog.returnValue = '';
  dialog.onclose = () => { if (dialog.returnValue === 'confirm' && onConfirm) onConfirm(); };
  dialog.showModal();
}

// askActivate: a paused or disabled destination missed what arrived meanwhile; the
// dialog asks whether to send it, with how many events that is.
export async function askActivate(v) {
  const c = v.card;
  if (c.status !== 'paused' && c.status !== 'disabled') {
    v.act('activate');
    return;
  }
  // What was missed arrived while nothing changed on the card: read its lag now.
  try {
    v.takeCard(/** @type {import('./api.js').Card} */ (await call('GET', v.path())));
  } catch (err) {
    v.setNotice(actionError(err), 'error');
    v.renderState();
    return;
  }
  const since = c.status === 'disabled' ? 'since_disabled' : 'since_paused';
  const lag = v.extra.lag;
  const missed = lag ? t('activateMissed', { events: lag.events }) : t('activateMissedUnknown');
  const choice = (value, label, checked) => el('label', { class: 'choice' },
    el('input', { type: 'radio', name: 'activate-kind', value, checked }), ' ', label);
  openDialog({
    title: t('activateTitle', { id: c.id }),
    body: [choice('missed', missed, true), choice('new', t('activateNew'), false)],
    confirm: t('activateConfirm'),
    onConfirm: () => {
      const kind = document.querySelector('input[name="activate-kind"]:checked')?.value;
      if (kind === 'missed') v.act('activate', { replay: since }, t('activatedMissed'));
      else v.act('activate', undefined, t('activatedNew'));
    },
  });
}

// askReplay asks for a point (a time, or an event: afterEvent from the attempt log),
// counts what the replay would send (a dry run), and replays only once confirmed.
export function askReplay(v, afterEvent) {
  const c = v.card;
  let counted = null; // the point the shown count is for
  const fromInput = el('input', { type: 'datetime-local', id: 'replay-from', step: '1' });
  const afterInput = el('input', { type: 'text', id: 'replay-after', value: afterEvent || '', spellcheck: 'false' });
  const kindFrom = el('input', { type: 'radio', name: 'replay-kind', value: 'from', checked: !afterEvent });
  const kindAfter = el('input', { type: 'radio', name: 'replay-kind', value: 'after', checked: !!afterEvent });
  const countButton = el('button', { type: 'button', id: 'replay-count' }, t('replayCount'));
  const point = () => {
    if (kindAfter.checked) return afterInput.value.trim() ? { after_event: afterInput.value.trim() } : null;
    if (!fromInput.value) return null;
    const d = new Date(fromInput.value);
    return Number.isNaN(d.getTime()) ? null : { from: d.toISOString() };
  };
  const reset = () => {
    counted = null;
    $('action-result').textContent = '';
    $('action-result').dataset.events = '';
    $('action-confirm').disabled = true;
    $('action-confirm').textContent = t('replayConfirmAny');
  };
  for (const i of [fromInput, afterInput, kindFrom, kindAfter]) i.addEventListener('input', reset);
  fromInput.addEventListener('focus', () => { kindFrom.checked = true; reset(); });
  afterInput.addEventListener('focus', () => { kindAfter.checked = true; reset(); });
  countButton.addEventListener('click', async () => {
    const p = point();
    const result = $('action-result');
    if (!p) { result.textContent = t('replayNeedsPoint'); return; }
    countButton.disabled = true;
    result.textContent = t('replayCounting');
    try {
      const dry = /** @type {import('./api.js').ReplayDryRun} */ (await call('POST', v.path('replay'), { body: { ...p, dry_run: true } }));
      counted = p;
      let text;
      if (dry.events === null || dry.events === undefined) text = t('replayWillSendUnknown');
      else if (dry.events === 0) text = t('replayWillSendNone');
      else text = t('replayWillSend', { events: dry.events, first: formatTime(dry.first_at), last: formatTime(dry.last_at) });
      if (dry.pending) text += ' ' + t('replayWaits');
      result.textContent = text;
      result.dataset.events = dry.events === null || dry.events === undefined ? '' : String(dry.events);
      $('action-confirm').disabled = false;
      $('action-confirm').textContent = dry.events > 0 ? t('replayConfirm', { events: dry.events }) : t('replayConfirmAny');
      counted.events = dry.events;
      counted.pending = dry.pending;
    } catch (err) {
      result.textContent = actionError(err);
    }
    countButton.disabled = false;
  });
  openDialog({
    title: t('replayTitle', { id: c.id }),
    body: [
      el('p', { class: 'help' }, t('replayExplain')),
      el('label', { class: 'choice' }, kindFrom, ' ', t('replayFrom'), ' ', fromInput),
      el('label', { class: 'choice' }, kindAfter, ' ', t('replayAfter'), ' ', afterInput),
      countButton,
    ],
    confirm: t('replayConfirmAny'),
    confirmDisabled: true,
    onConfirm: async () => {
      if (!counted) return;
      const { events, pending, ...body } = counted;
      v.setNotice('');
      try {
        const res = /** @type {import('./api.js').ReplayedCard} */ (await call('POST', v.path('replay'), { body }));
        v.takeCard(res);
        v.setNotice(res.replay && res.replay.pending ? t('replayDonePending') : t('replayDone', { events: events ?? '?' }), 'ok');
      } catch (err) {
        v.setNotice(actionError(err), 'error');
      }
      v.renderState();
    },
  });
}

export function askRetry(v, r) {
  openDialog({
    title: t('retryTitle', { n: r.n }),
    body: [el('p', {}, t('retryExplain', { event: r.event_id }))],
    confirm: t('retryConfirm'),
    onConfirm: async () => {
      v.setNotice('');
      try {
        const res = /** @type {import('./api.js').RetryQueued} */ (await call('POST', v.path('attempts/' + r.n + '/retry')));
        v.setNotice(t('retryDone', { n: r.n, attempt: res.attempt }), 'ok');
      } catch (err) {
        v.setNotice(actionError(err), 'error');
      }
      v.renderState();
    },
  });
}

// askDisable shows what a disable takes with it (the account's destinations in the
// same AWS account or Google Cloud project, as the dispatcher cascades) before it is done.
export async function askDisable(v) {
  const scope = cloudScope(v.card);
  let all = [v.card];
  if (scope) {
    const query = { account: v.card.account, page_size: '200' };
    const lists = await Promise.all(connectors.map((c) => call('GET', '/v1/connectors/' + c + '/destinations', { query })
      .then((l) => l.destinations, () => [])));
    all = [v.card, ...lists.flat().filter((o) => o.id !== v.card.id && o.account === v.card.account && cloudScope(o) === scope)];
  }
  $('disable-title').textContent = t('disableTitle', { id: v.card.id });
  $('disable-explain').textContent = all.length > 1 ? t('disableCascade', { scope }) : t('disableOnlyThis');
  $('disable-list').replaceChildren(...all.map((o) => el('li', { 'data-id': o.id }, o.id + ' (' + t(o.connector) + ')')));
  $('disable-reason').value = '';
  const dialog = $('disable-dialog');
  dialog.returnValue = '';
  dialog.onclose = async () => {
    if (dialog.returnValue !== 'confirm') return;
    try {
      const reason = $('disable-reason').value.trim();
      const res = /** @type {import('./api.js').DisableResult} */ (await call('POST', v.path('disable'), { body: reason ? { reason } : {} }));
      v.setNotice(t('disabledIds', { ids: res.disabled.join(', ') }), 'ok');
    } catch (err) {
      v.setNotice(actionError(err), 'error');
    }
    v.renderState();
  };
  dialog.showModal();
}

// cloudScope is the dispatcher's cascade scope (destination.CloudScope): the AWS account
// of the role, or the Google Cloud project.
function cloudScope(c) {
  if (c.connector === 'pubsub') return c.target.project_id ? 'gcp:' + c.target.project_id : '';
  const m = /^arn:[^:]+:iam::(\d{12}):/.exec((c.target && c.target.role_arn) || '');
  return m ? 'aws:' + m[1] : '';
}
