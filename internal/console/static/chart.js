// A card's chart: deliveries and failures per minute over the last 24 hours.

import { $, el } from './dom.js';
import { t } from './i18n.js';

export function sum(v) { return (v || []).reduce((a, b) => a + b, 0); }

// chartView draws deliveries and failures per minute over the last 24 hours as an
// inline SVG (no library): one bar per minute that had any, failures over deliveries.
export function chartView(m) {
  const n = m.delivered.length;
  const h = 40;
  const top = Math.max(1, ...m.delivered, ...m.failed);
  const bars = (values) => {
    let d = '';
    values.forEach((v, i) => { if (v > 0) d += 'M' + (i + 0.5) + ' ' + h + 'V' + (h - Math.max(1, (v / top) * h)).toFixed(2); });
    return d;
  };
  // An <svg> the HTML parser made (index.html's template): its namespace is SVG's.
  const svg = $('chart-svg').content.firstElementChild.cloneNode(false);
  const svgNS = svg.namespaceURI;
  svg.setAttribute('viewBox', '0 0 ' + n + ' ' + h);
  svg.setAttribute('aria-label', t('chartTitle') + ': ' + t('chartTotals', { delivered: sum(m.delivered), failed: sum(m.failed) }));
  for (const [cls, values] of [['delivered', m.delivered], ['failed', m.failed]]) {
    const p = document.createElementNS(svgNS, 'path');
    p.setAttribute('class', cls);
    p.setAttribute('d', bars(values) || 'M0 ' + h);
    svg.append(p);
  }
  const base = document.createElementNS(svgNS, 'path');
  base.setAttribute('class', 'base');
  base.setAttribute('d', 'M0 ' + (h - 0.5) + 'H' + n);
  svg.append(base);
  return [
    el('figcaption', {}, el('strong', {}, t('chartTitle')), ' · ',
      el('span', { class: 'totals' }, t('chartTotals', { delivered: sum(m.delivered), failed: sum(m.failed) }))),
    svg,
    el('div', { class: 'axis' }, el('span', {}, t('chart24h')), el('span', {}, t('chartNow'))),
  ];
}
