// Calls to the operator API on this page's own origin. The token lives in
// sessionStorage (this tab only, gone when it closes) and travels only in the
// Authorization header, never in a URL.

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
export async function call(method, path, { query, body, signal, extraHeaders } = {}) {
  let url = path;
  if (query) url += '?' + new URLSearchParams(query).toString();
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
