// The page's shared state: who is signed in, the connector and page shown, its cards and
// their live transport. The other modules read and change this one object.

export const connectors = ['eventbridge', 'kinesis', 'pubsub'];

export const app = {
  scope: '', // "admin" or "account:<id>"
  sessionEnds: '', // a console session's end (RFC 3339), signed in by a link; '' for a token typed in
  disableAfter: 20,
  connector: '',
  views: new Map(), // destination id → CardView of the page shown
  live: null, // what stops the page's live transport
  filters: { status: '', q: '', account: '' },
  tokens: [''], // page_token of each page seen so far; the last is the page shown
  next: null, // the shown page's next_page_token
  down: false, // the live connection is down: every action waits for it
  load: 0, // which page load is current (a newer one makes older answers moot)
  fresh: null, // the card of the destination just added on this page: shown first
};

export const isAdmin = () => app.scope === 'admin';

// stopPage takes the shown page's cards away and stops their live transport.
export function stopPage() {
  if (app.live) app.live.stop();
  app.live = null;
  app.views.clear();
  document.getElementById('cards').replaceChildren();
}
