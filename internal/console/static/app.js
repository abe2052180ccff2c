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
import { showSignIn, signIn, signOut } from './session.js';
import { app } from './state.js';

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
  $('signout').addEventListener('click', signOut);
  initList();
  initAdd(showCreated);
  window.addEventListener('hashchange', route);
  renderChrome();
  if (!token()) {
    showSignIn();
    return;
  }
  signIn(token()).then(route, (err) => showSignIn(t('signInFailed', { message: err.message })));
}

init();
