// How the page words an action the API refused or never answered: one sentence for the
// card or dialog that asked.

import { ApiError } from './api.js';
import { t } from './i18n.js';
import { app } from './state.js';

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
