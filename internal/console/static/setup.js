// A card's setup: what the customer applies on their side, each part ready to copy. The
// ExternalId and our role (or our service account) first, then the same setup in the
// forms customers use, as tabs: the policies as JSON, a CloudFormation template,
// Terraform and the AWS CLI's commands (AWS); the gcloud commands and Terraform
// (Pub/Sub). Send a test comes right after them (the card's, or the step after the tabs).

import { copyable, el } from './dom.js';
import { t } from './i18n.js';

let tabsMade = 0; // ids for the tabs' aria-controls, unique on the page

// setupBlocks builds the setup of card c. view keeps the tab last chosen (view.setupTab)
// across re-renders; next, when given, is the Send a test button the tabs end with.
/** @param {import('./api.js').Card} c @param {{setupTab: string}} view @param {HTMLElement | null} next */
export function setupBlocks(c, view, next = null) {
  /** @type {import('./api.js').Card['setup']} */
  const s = c.setup || {};
  const json = (v) => JSON.stringify(v, null, 2);
  const part = (title, ...body) => el('div', { class: 'setup-part' }, el('h3', {}, title), ...body);
  const help = (key) => el('p', { class: 'help' }, t(key));
  let ids;
  let tabs;
  if (c.connector === 'pubsub') {
    ids = [part(t('serviceAccount'), copyable(s.service_account || '', 'service-account'))];
    tabs = [
      { name: 'gcloud', label: t('tabGcloud'), body: [
        part(t('commands'), (s.commands || []).map((cmd, i) => copyable(cmd, 'command-' + (i + 1), true)))] },
    ];
    if (s.terraform) {
      tabs.push({ name: 'terraform', label: t('tabTerraform'), body: [
        part(t('terraformPubSub'), help('terraformPubSubHelp'), copyable(s.terraform, 'terraform', true))] });
    }
  } else {
    ids = [
      part(t('externalId'), copyable(c.external_id || '', 'external-id')),
      part(t('ourRole'), copyable(s.principal_arn || '', 'principal-arn')),
    ];
    tabs = [{ name: 'policies', label: t('tabPolicies'), body: [
      part(t('trustPolicy'), copyable(json(s.trust_policy), 'trust-policy', true)),
      part(t('permissionsPolicy'), copyable(json(s.permissions_policy), 'permissions-policy', true)),
      part(t('kmsStatement'),
        s.kms_statement ? copyable(json(s.kms_statement), 'kms-statement', true) : el('p', { class: 'help' }, t('noKms'))),
    ] }];
    if (s.cloudformation) {
      tabs.push({ name: 'cloudformation', label: t('tabCloudFormation'), body: [
        part(t('cloudFormation'), help('cloudFormationHelp'), stackLinks(c, s.cloudformation, s.quick_create_url),
          copyable(s.cloudformation, 'cloudformation', true))] });
    }
    if (s.terraform) {
      tabs.push({ name: 'terraform', label: t('tabTerraform'), body: [
        part(t('terraform'), help('terraformHelp'), copyable(s.terraform, 'terraform', true))] });
    }
    if (s.aws_cli && s.aws_cli.length) {
      tabs.push({ name: 'aws-cli', label: t('tabAwsCli'), body: [
        part(t('awsCli'), help('awsCliHelp'), s.aws_cli.map((cmd, i) => copyable(cmd, 'aws-cli-' + (i + 1), true)))] });
    }
  }
  const out = [el('div', { class: 'setup-ids' }, ids), tabView(tabs, view)];
  if (next) out.push(el('p', { class: 'setup-next' }, el('span', {}, t('setupNext')), ' ', next));
  return out;
}

// tabView is a tab list over one panel per tab, the chosen one shown; the arrow keys
// move between tabs, as a tab list's do.
function tabView(tabs, view) {
  const base = 'setup-' + (++tabsMade);
  const chosen = tabs.some((x) => x.name === view.setupTab) ? view.setupTab : tabs[0].name;
  const buttons = [];
  const panels = [];
  const choose = (name, focus = false) => {
    view.setupTab = name;
    for (const b of buttons) {
      const on = b.dataset.tab === name;
      b.setAttribute('aria-selected', String(on));
      b.tabIndex = on ? 0 : -1;
      if (on && focus) b.focus();
    }
    for (const p of panels) p.hidden = p.dataset.tab !== name;
  };
  tabs.forEach((x, i) => {
    const b = el('button', { type: 'button', role: 'tab', class: 'setup-tab', id: base + '-tab-' + x.name,
      'data-tab': x.name, 'aria-controls': base + '-' + x.name, onclick: () => choose(x.name) }, x.label);
    b.addEventListener('keydown', (e) => {
      const step = { ArrowRight: 1, ArrowLeft: -1 }[e.key];
      if (!step) return;
      e.preventDefault();
      choose(tabs[(i + step + tabs.length) % tabs.length].name, true);
    });
    buttons.push(b);
    panels.push(el('div', { role: 'tabpanel', class: 'setup-panel', id: base + '-' + x.name, 'data-tab': x.name,
      'aria-labelledby': b.id }, x.body));
  });
  const box = el('div', { class: 'setup-tabs' },
    el('div', { role: 'tablist', class: 'setup-tablist', 'aria-label': t('setupTabs') }, buttons), panels);
  choose(chosen);
  return box;
}

// stackLinks is the way to the stack: a Launch stack link to CloudFormation's
// quick-create page in the customer's own AWS console, with this destination's values
// filled in, when the relay's operator published the template (identity.aws_template_url);
// otherwise the template to download, made in the page (a Blob).
function stackLinks(c, template, quickCreate) {
  if (isHTTPS(quickCreate)) {
    return el('p', { class: 'stack-links' },
      el('a', { class: 'launch-stack', href: quickCreate, target: '_blank', rel: 'noopener noreferrer' }, t('launchStack')),
      ' ', el('small', {}, t('launchStackHelp')));
  }
  const a = el('a', { class: 'download-template', href: '#', download: c.id + '-role.yaml' }, t('downloadTemplate'));
  // The object URL is made when the link is followed, and let go soon after: a page of
  // hundreds of cards holds none.
  a.addEventListener('click', () => {
    if (a.href.startsWith('blob:')) URL.revokeObjectURL(a.href);
    a.href = URL.createObjectURL(new Blob([template], { type: 'application/x-yaml' }));
    const made = a.href;
    setTimeout(() => { if (a.href === made) { URL.revokeObjectURL(made); a.href = '#'; } }, 60000);
  });
  return el('p', { class: 'stack-links' }, a, ' ', el('small', {}, t('downloadTemplateHelp')));
}

// isHTTPS: the link is an https URL (never javascript: or the like, whatever the card holds).
function isHTTPS(u) {
  if (typeof u !== 'string' || !u) return false;
  try {
    return new URL(u).protocol === 'https:';
  } catch {
    return false;
  }
}
