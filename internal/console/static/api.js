// Calls to the operator API on this page's own origin. The token lives in
// sessionStorage (this tab only, gone when it closes) and travels only in the
// Authorization header, never in a URL.

// The answers' and bodies' types, generated from the API's OpenAPI document
// (api/openapi.yaml) into ../types/openapi.d.ts; tsc checks the modules against them
// (internal/console's TestTheModulesTypeCheckAgainstTheAPIDocument). The page itself
// has no build step: these are comments to the browser.
/** @typedef {import('../types/openapi').components['schemas']} Schemas */
/** @typedef {Schemas['Card']} Card */
/** @typedef {Schemas['ChangedCard']} ChangedCard */
/** @typedef {Schemas['ReplayedCard']} ReplayedCard */
/** @typedef {Schemas['ReplayDryRun']} ReplayDryRun */
/** @typedef {Schemas['DestinationList']} DestinationList */
/** @typedef {Schemas['DestinationCreate']} DestinationCreate */
/** @typedef {Schemas['DestinationChange']} DestinationChange */
/** @typedef {Schemas['DestinationDeleted']} DestinationDeleted */
/** @typedef {Schemas['DisableResult']} DisableResult */
/** @typedef {Schemas['TestResult']} TestResult */
/** @typedef {Schemas['AttemptPage']} AttemptPage */
/** @typedef {Schemas['AttemptDetail']} AttemptDetail */
/** @typedef {Schemas['RetryQueued']} RetryQueued */
/** @typedef {Schemas['Minutes']} Minutes */
/** @typedef {Schemas['Snapshot']} Snapshot */
/** @typedef {Schemas['EventPage']} EventPage */
/** @typedef {Schemas['ChannelEvent']} ChannelEvent */
/** @typedef {Schemas['WhoAmI']} WhoAmI */
/** @typedef {Schemas['Session']} Session */
/** @typedef {Schemas['Error']} ErrorBody */

const tokenKey = 'relay.token';

export function token() { return sessionStorage.getItem(tokenKey) || ''; }
export function setToken(v) { sessionStorage.setItem(tokenKey, v); }
export function clearToken() { sessionStorage.removeItem(tokenKey); }

// ApiError is the API's {"error":{"code","message","fields"}} with its HTTP status;
// fields, on a create or change with problems, is [{field, message}, …].
export class ApiError extends Error {
  constructor(status, code, message, fields = []) {
    super(message);
    this.status = status;
    this.code = code;
    this.fields = fields;
  }
}

export async function errorOf(resp) {
  let code = 'HTTP_' + resp.status;
  let message = resp.statusText;
  let fields = [];
  try {
    const body = await resp.json();
    if (body && body.error) {
      ({ code, message } = body.error);
      if (Array.isArray(body.error.fields)) fields = body.error.fields;
    }
  } catch { /* not JSON: keep the status */ }
  return new ApiError(resp.status, code, message, fields);
}

export function headers(extra = {}) {
  return { Authorization: 'Bearer ' + token(), ...extra };
}

// call sends one request and returns the decoded JSON answer, or throws an ApiError.
/**
 * @param {string} method
 * @param {string} path
 * @param {{query?: Record<string, string>, body?: any, signal?: AbortSignal, extraHeaders?: Record<string, string>}} [options]
 * @returns {Promise<any>} the answer, as the document's schema of the route says (a caller casts it)
 */
export async function call(method, path, { query, body, signal, extraHeaders } = {}) {
  let url = path;
  if (query) url += '?' + new URLSearchParams(query).toString();
  /** @type {RequestInit & {headers: Record<string, string>}} */
  const init = { method, headers: headers(extraHeaders), cache: 'no-store', signal };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers['Content-Type'] = 'application/json';
  }
  const resp = await fetch(url, init);
  if (!resp.ok) throw await errorOf(resp);
  if (resp.status === 204) return null; // no body (a sign-out)
  return resp.json();
}

export function destinationPath(connector, id, action = '') {
  let p = '/v1/connectors/' + encodeURIComponent(connector) + '/destinations/' + encodeURIComponent(id);
  if (action) p += '/' + action;
  return p;
}

export function channelPath(channel, action) {
  return '/v1/streams/' + encodeURIComponent(channel) + '/' + action;
}
