// The console: sign-in, one page per connector, one live card per destination. This
// module only starts the page and wires its controls; each part lives in its own:
//   session.js  sign-in and the token           list.js     a connector's page, filters, pager
//   add.js      the add form                     card.js     a destination's card
//   manage.js   change and delete                attempts.js a card's attempt log
//   dialogs.js  what an action asks first        chart.js    a card's 24-hour chart
//   chrome.js   top bar, summary line, pager     state.js    the page's shared state
//   dom.js      building elements, Copy          fields.js   form fields and their problems
//   api.js, follow.js, i18n.js (words-en.js, words-es.js): calls, channels, words

import { initAdd, renderAdd } from './add.js';
import { token } from './api.js';
import { renderChrome } from './chrome.js';
import { $ } from './dom.js';
import { language, setLanguage, t } from './i18n.js';
import { initList, route, showCreated } from './list.js';
import { linkCode, showSignIn, signIn, signInByLink, signOut } from './session.js';
import { app } from './state.js';

// byLink signs in with a sign-in link's code: the page opened on the link, or the link
// pasted into a tab the console already has open.
function byLink(code) {
  // Every bad code gets the API's one 401 (no oracle): said here in the page's language.
  signInByLink(code).then(() => { location.hash = '#/eventbridge'; },
    (err) => showSignIn(err.status === 401 ? t('linkNotValid') : t('linkFailed', { message: err.message })));
}

function init() {
  setLanguage(language());
  $('lang').addEventListener('change', () => {
    setLanguage($('lang').value, true);
    renderChrome();
    renderAdd();
    for (const v of app.views.values()) v.render();
  });
  $('signin').addEventListener('submit', async (e) => {
    e.preventDefault();
    const value = $('token').value.trim();
    if (!value) return;
    try {
      await signIn(value);
    } catch (err) {
      showSignIn(t('signInFailed', { message: err.message }));
      return;
    }
    $('token').value = '';
    if (!location.hash) location.hash = '#/eventbridge';
    else route();
  });
  $('signout').addEventListener('click', () => signOut(t('signedOut')));
  initList();
  initAdd(showCreated);
  window.addEventListener('hashchange', () => {
    const code = linkCode();
    if (code) byLink(code);
    else route();
  });
  renderChrome();
  const code = linkCode();
  if (code) {
    byLink(code);
    return;
  }
  if (!token()) {
    showSignIn();
    return;
  }
  signIn(token()).then(route, (err) => showSignIn(t('signInFailed', { message: err.message })));
}

init();
