// lockscope HTML report. Everything comes from the JSON data element;
// names are only ever set as text (textContent), never as markup.
(function () {
  'use strict';
  var D = JSON.parse(document.getElementById('lockscope-data').textContent);
  var R = D.report;
  var app = document.getElementById('app');
  var COL = { wait: '#d33', hold: '#37c', blocked: '#999', unlock: '#a5c' };
  var CATS = ['wait', 'hold', 'blocked', 'unlock'];
  var BG = '#ffffff';
  // More hand-off arrows than this in view are a green smear that hides
  // the spans: then only the hovered row's are drawn.
  var MAX_ARROWS = 200;

  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    if (attrs) for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function ms(ns) {
    if (ns >= 1e9) return (ns / 1e9).toFixed(3) + ' s';
    if (ns >= 1e6) return (ns / 1e6).toFixed(3) + ' ms';
    if (ns >= 1e3) return (ns / 1e3).toFixed(3) + ' us';
    return Math.round(ns) + ' ns';
  }
  function pct(x) { return (100 * x).toFixed(1) + '%'; }
  // Counts with thousands separators, as the text report writes them.
  function cnt(n) { return Number(n).toLocaleString('en-US'); }
  // Time-axis ticks at round values: the step is 1, 2 or 5 times a power
  // of ten (about `n` ticks in view), written in the unit the step needs.
  function tickStep(span, n) {
    var raw = span / n, p = Math.pow(10, Math.floor(Math.log10(raw))), m = raw / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
  }
  function tickLabel(t, step) {
    var u = step >= 1e9 ? [1e9, ' s'] : step >= 1e6 ? [1e6, ' ms'] : step >= 1e3 ? [1e3, ' us'] : [1, ' ns'];
    var dec = Math.max(0, Math.ceil(-Math.log10(step / u[0]) - 1e-9));
    return (t / u[0]).toFixed(dec) + u[1];
  }
  var tip = el('div', { id: 'tip' });
  document.body.appendChild(tip);
  function showTip(text, x, y) {
    tip.textContent = text;
    tip.style.display = 'block';
    tip.style.left = Math.min(x + 14, innerWidth - 300) + 'px';
    tip.style.top = (y + 14) + 'px';
  }
  function hideTip() { tip.style.display = 'none'; }

  // ---- header ----
  app.appendChild(el('h1', null, 'lockscope: ' + R.command));
  app.appendChild(el('div', { 'class': 'muted' }, 'recorded ' + ms(R.duration_ns) + ', ' +
    cnt(R.events) + ' events' + (R.lost_events ? ', ' + cnt(R.lost_events) + ' lost' : '') +
    ', total lock wait ' + ms(R.total_wait_ns)));
  (R.warnings || []).forEach(function (w) {
    app.appendChild(el('p', { 'class': 'warning' }, 'WARNING: ' + w));
  });
  var labels = Object.keys(R.labels || {}).map(function (k) { return k + '=' + R.labels[k]; });
  if (labels.length) app.appendChild(el('div', { 'class': 'muted', id: 'labels' }, 'labels: ' + labels.join(', ')));
  app.appendChild(el('p', { 'class': 'verdict', id: 'verdict' }, R.verdict));

  // ---- timeline ----
  app.appendChild(el('h2', null, 'Timeline'));
  var legend = el('div', { 'class': 'legend' });
  CATS.forEach(function (c) {
    var s = el('span'); s.style.background = COL[c]; legend.appendChild(s);
    legend.appendChild(document.createTextNode(c));
  });
  legend.appendChild(document.createTextNode('   (wheel: zoom, drag: pan, double-click: whole run; ' +
    'arrows: hand-offs, the hovered row\'s when over ' + MAX_ARROWS + ' are in view) '));
  var rowSel = el('select', { id: 'row-order' });
  rowSel.appendChild(el('option', { value: 'start' }, 'rows: by process, then start'));
  rowSel.appendChild(el('option', { value: 'wait' }, 'rows: most lock wait first'));
  legend.appendChild(rowSel);
  var reset = el('button', null, 'whole run');
  legend.appendChild(reset);
  app.appendChild(legend);
  var ROW = 18, TOP = 22, LABEL = 170;
  var cv = el('canvas', { id: 'timeline' });
  app.appendChild(cv);
  var ctx = cv.getContext('2d');
  var nT = D.threads.length;
  var v0 = 0, v1 = D.duration_ns;
  // Spans per thread, sorted by start (the data is).
  var spansOf = D.threads.map(function () { return []; });
  D.spans.forEach(function (s) { spansOf[s[0]].push(s); });
  // Display order of the rows: order[row] is a thread index, rowOf its
  // inverse. By process, then by when the thread first did anything (the
  // order a reader follows a run in); or by lock wait, most first.
  var order = D.threads.map(function (_, i) { return i; }), rowOf = order.slice();
  function firstBin(ti) {
    var f = Infinity;
    D.heat[ti].forEach(function (bins) { if (bins.length) f = Math.min(f, bins[0][0]); });
    return f;
  }
  function waitOf(ti) { var w = 0; D.heat[ti][0].forEach(function (b) { w += b[1]; }); return w; }
  function sortRows(mode) {
    var k = D.threads.map(function (_, ti) { return mode === 'wait' ? -waitOf(ti) : firstBin(ti); });
    order.sort(function (a, b) {
      var pa = D.threads[a].pid || 0, pb = D.threads[b].pid || 0;
      if (mode !== 'wait' && pa !== pb) return pa - pb;
      return (k[a] - k[b]) || (D.threads[a].tid - D.threads[b].tid);
    });
    order.forEach(function (ti, row) { rowOf[ti] = row; });
  }
  sortRows('start');
  var hoverRow = -1;
  function kindCat(k) { return k === 'wait' ? 'wait' : (k === 'hold' || k === 'GPU work') ? 'hold' : k === 'unlock' ? 'unlock' : 'blocked'; }

  function size() {
    cv.width = Math.max(600, (app.clientWidth || 1000) - 4);
    cv.height = TOP + ROW * nT + 6;
  }
  function xOf(t) { return LABEL + (t - v0) * (cv.width - LABEL) / (v1 - v0); }
  function draw() {
    var W = cv.width - LABEL;
    ctx.fillStyle = BG; ctx.fillRect(0, 0, cv.width, cv.height);
    var scale = W / (v1 - v0);
    // time axis
    ctx.fillStyle = '#444'; ctx.font = '11px sans-serif';
    var step = tickStep(v1 - v0, 8);
    for (var t = Math.ceil(v0 / step) * step; t <= v1; t += step) {
      var x = xOf(t);
      ctx.fillRect(x, TOP - 4, 1, 4);
      ctx.fillText(tickLabel(t, step), Math.min(x + 2, cv.width - 60), 11);
    }
    var cols = [new Float64Array(W), new Float64Array(W), new Float64Array(W), new Float64Array(W)];
    for (var ti = 0; ti < nT; ti++) {
      var y = TOP + rowOf[ti] * ROW;
      ctx.fillStyle = rowOf[ti] % 2 ? '#f7f7f7' : '#fdfdfd';
      ctx.fillRect(LABEL, y, W, ROW - 1);
      ctx.fillStyle = '#222';
      var th = D.threads[ti];
      ctx.fillText((th.name + ' (' + th.tid + ')').slice(0, 28), 2, y + 13);
      // Pre-aggregated bins, decimated per pixel column: each column
      // gets the share of its time in each category.
      for (var c = 0; c < 4; c++) {
        var col = cols[c]; col.fill(0);
        var bins = D.heat[ti][c];
        for (var k = 0; k < bins.length; k++) {
          var b0 = bins[k][0] * D.bin_ns, b1 = b0 + D.bin_ns;
          if (b1 < v0 || b0 > v1) continue;
          var dens = bins[k][1] / D.bin_ns;
          var x0 = (Math.max(b0, v0) - v0) * scale, x1 = (Math.min(b1, v1) - v0) * scale;
          for (var px = Math.floor(x0); px < Math.min(W, Math.ceil(x1)); px++) {
            var ov = Math.min(x1, px + 1) - Math.max(x0, px);
            if (ov > 0) col[px] += dens * ov;
          }
        }
      }
      for (var p = 0; p < W; p++) {
        var best = -1, bv = 0.02;
        // Wait first: it is what the page is about.
        for (var c2 = 0; c2 < 4; c2++) if (cols[c2][p] > bv) { bv = cols[c2][p] * (c2 === 0 ? 4 : 1); best = c2; }
        if (best < 0) continue;
        ctx.globalAlpha = Math.min(1, 0.35 + cols[best][p]);
        ctx.fillStyle = COL[CATS[best]];
        var h = best === 1 ? ROW - 9 : ROW - 3;
        ctx.fillRect(LABEL + p, y + (ROW - 1 - h), 1, h);
      }
      ctx.globalAlpha = 1;
      // The longest spans, individually, once they are wide enough.
      var ss = spansOf[ti];
      for (var j = 0; j < ss.length; j++) {
        var s = ss[j];
        if (s[3] < v0 || s[2] > v1) continue;
        var xa = xOf(s[2]), xb = xOf(s[3]);
        if (xb - xa < 2) continue;
        var cc = kindCat(s[1]);
        ctx.fillStyle = COL[cc];
        var hh = cc === 'hold' ? ROW - 9 : ROW - 3;
        ctx.fillRect(Math.max(LABEL, xa), y + (ROW - 1 - hh), Math.min(xb, cv.width) - Math.max(LABEL, xa), hh);
      }
    }
    // Hand-off arrows: release -> the acquisition it let in. All of them
    // when few are in view; else only the hovered row's.
    ctx.strokeStyle = '#090'; ctx.fillStyle = '#090'; ctx.lineWidth = 1;
    var inView = 0;
    for (var a0 = 0; a0 < D.handoffs.length && inView <= MAX_ARROWS; a0++) {
      var h0 = D.handoffs[a0];
      if (!(h0[3] < v0 || h0[1] > v1)) inView++;
    }
    var onlyTi = inView <= MAX_ARROWS ? -1 : hoverRow >= 0 ? order[hoverRow] : -2;
    var drawn = 0;
    for (var a = 0; a < D.handoffs.length && drawn < MAX_ARROWS && onlyTi !== -2; a++) {
      var ho = D.handoffs[a];
      if (ho[3] < v0 || ho[1] > v1) continue;
      if (onlyTi >= 0 && ho[0] !== onlyTi && ho[2] !== onlyTi) continue;
      var fx = xOf(ho[1]), fy = TOP + rowOf[ho[0]] * ROW + ROW / 2, tx = xOf(ho[3]), ty = TOP + rowOf[ho[2]] * ROW + ROW / 2;
      ctx.beginPath(); ctx.moveTo(fx, fy); ctx.lineTo(tx, ty); ctx.stroke();
      ctx.beginPath(); ctx.moveTo(tx, ty); ctx.lineTo(tx - 4, ty + (ty > fy ? -6 : 6)); ctx.lineTo(tx + 4, ty + (ty > fy ? -6 : 6)); ctx.fill();
      drawn++;
    }
  }
  function spanAt(ti, t, tol) {
    var ss = spansOf[ti], best = null, rank = { wait: 0, 'cond wait': 1, barrier: 1, 'sem wait': 1, join: 1, unlock: 2, hold: 3 };
    for (var j = 0; j < ss.length; j++) {
      var s = ss[j];
      if (s[2] - tol <= t && t <= s[3] + tol) {
        if (!best || rank[s[1]] < rank[best[1]] || (rank[s[1]] === rank[best[1]] && s[3] - s[2] < best[3] - best[2])) best = s;
      }
    }
    return best;
  }
  function describe(ti, t, tol) {
    var th = D.threads[ti];
    var s = spanAt(ti, t, tol);
    if (s) {
      var lines = [s[1] + (s[4] >= 0 ? ' ' + D.strings[s[4]] : '') + '  ' + ms(s[3] - s[2]),
        'thread ' + th.name + ' (tid ' + th.tid + ')',
        'at ' + D.strings[s[5]], 'from ' + ms(s[2]) + ' to ' + ms(s[3])];
      if (s[6] >= 0) lines.push('call path:\n  ' + D.strings[s[6]].split('\n').join('\n  '));
      return lines.join('\n');
    }
    var b = Math.floor(t / D.bin_ns), parts = [];
    for (var c = 0; c < 4; c++) {
      var bins = D.heat[ti][c];
      for (var k = 0; k < bins.length; k++) if (bins[k][0] === b) parts.push(CATS[c] + ' ' + pct(bins[k][1] / D.bin_ns));
    }
    return 'thread ' + th.name + ' (tid ' + th.tid + ') around ' + ms(t) + ': ' + (parts.length ? parts.join(', ') : 'free');
  }
  var drag = null;
  cv.addEventListener('mousemove', function (e) {
    var r = cv.getBoundingClientRect(), x = e.clientX - r.left, y = e.clientY - r.top;
    if (drag) {
      var dt = (drag.x - x) * (v1 - v0) / (cv.width - LABEL);
      var w = v1 - v0; v0 = Math.max(0, Math.min(D.duration_ns - w, drag.v0 + dt)); v1 = v0 + w;
      draw(); return;
    }
    var row = Math.floor((y - TOP) / ROW);
    var newHover = (row >= 0 && row < nT) ? row : -1;
    if (newHover !== hoverRow) { hoverRow = newHover; draw(); }
    if (x < LABEL || row < 0 || row >= nT) { hideTip(); return; }
    var ti = order[row];
    var t = v0 + (x - LABEL) * (v1 - v0) / (cv.width - LABEL);
    showTip(describe(ti, t, 2 * (v1 - v0) / (cv.width - LABEL)), e.clientX, e.clientY);
  });
  cv.addEventListener('mouseleave', function () { hideTip(); if (hoverRow >= 0) { hoverRow = -1; draw(); } });
  rowSel.addEventListener('change', function () { sortRows(rowSel.value); draw(); });
  cv.addEventListener('mousedown', function (e) { var r = cv.getBoundingClientRect(); drag = { x: e.clientX - r.left, v0: v0 }; });
  addEventListener('mouseup', function () { drag = null; });
  cv.addEventListener('wheel', function (e) {
    e.preventDefault();
    var r = cv.getBoundingClientRect(), x = e.clientX - r.left;
    var t = v0 + Math.max(0, x - LABEL) * (v1 - v0) / (cv.width - LABEL);
    var f = e.deltaY > 0 ? 1.25 : 0.8, w = Math.max(1000, (v1 - v0) * f);
    w = Math.min(w, D.duration_ns);
    v0 = Math.max(0, Math.min(D.duration_ns - w, t - (t - v0) * w / (v1 - v0))); v1 = v0 + w;
    draw();
  }, { passive: false });
  function whole() { v0 = 0; v1 = D.duration_ns; draw(); }
  cv.addEventListener('dblclick', whole);
  reset.addEventListener('click', whole);
  app.appendChild(el('div', { 'class': 'muted' }, cnt(D.spans.length) + ' longest of ' + cnt(D.spans_total) +
    ' spans shown individually; the rest as per-pixel shares of ' + ms(D.bin_ns) + ' bins'));

  // ---- flame graphs ----
  function flameGraph(title, whole, pick, id) {
    app.appendChild(el('h2', null, title));
    if (!whole.v) { app.appendChild(el('p', { 'class': 'muted' }, 'no lock wait')); return; }
    // One lock or all of them.
    var sel = el('select', { id: id + '-lock' });
    sel.appendChild(el('option', { value: '-1' }, 'all locks'));
    D.flame.per_lock.forEach(function (p, i) { sel.appendChild(el('option', { value: String(i) }, 'lock ' + p[0])); });
    app.appendChild(sel);
    var fc = el('canvas', { id: id }); app.appendChild(fc);
    var H = 17, root = whole, focus = root, boxes = [];
    function depth(n) { var d = 0; n.c.forEach(function (k) { d = Math.max(d, depth(k)); }); return d + 1; }
    var fx = fc.getContext('2d');
    function render() {
      fc.width = Math.max(600, (app.clientWidth || 1000) - 4); fc.height = depth(focus) * H + 2;
      fx.fillStyle = BG; fx.fillRect(0, 0, fc.width, fc.height); boxes = [];
      fx.font = '11px sans-serif';
      (function lay(n, x, w, d) {
        if (w < 0.5) return;
        var hue = n.n.indexOf('lock ') === 0 ? 0 : 20 + (n.n.length * 37) % 40;
        fx.fillStyle = 'hsl(' + hue + ',75%,' + (n === root ? 80 : 62) + '%)';
        fx.fillRect(x, d * H, Math.max(w - 1, 0.5), H - 1);
        boxes.push([x, d * H, w, n]);
        if (w > 30) { fx.fillStyle = '#000'; fx.save(); fx.beginPath(); fx.rect(x, d * H, w - 2, H); fx.clip(); fx.fillText(n.n, x + 3, d * H + 12); fx.restore(); }
        var cx = x;
        n.c.forEach(function (k) { var kw = w * k.v / n.v; lay(k, cx, kw, d + 1); cx += kw; });
      })(focus, 0, fc.width, 0);
    }
    function hit(e) {
      var r = fc.getBoundingClientRect(), x = e.clientX - r.left, y = e.clientY - r.top;
      for (var i = boxes.length - 1; i >= 0; i--) { var b = boxes[i]; if (x >= b[0] && x < b[0] + b[2] && y >= b[1] && y < b[1] + H) return b[3]; }
      return null;
    }
    fc.addEventListener('mousemove', function (e) {
      var n = hit(e);
      if (n) showTip(n.n + '\n' + ms(n.v) + ' (' + pct(n.v / whole.v) + ' of all lock wait)', e.clientX, e.clientY); else hideTip();
    });
    fc.addEventListener('mouseleave', hideTip);
    fc.addEventListener('click', function (e) { var n = hit(e); focus = (!n || n === focus) ? root : n; render(); });
    sel.addEventListener('change', function () {
      var i = Number(sel.value);
      root = i < 0 ? whole : D.flame.per_lock[i][pick];
      focus = root; render();
    });
    render();
  }
  flameGraph('Wait by waiter call path (click to zoom)', D.flame.waiters, 1, 'flame-waiters');
  flameGraph('Wait by holder call path: blame (click to zoom)', D.flame.holders, 2, 'flame-holders');

  // ---- tables ----
  // Number columns that are identifiers, written without separators.
  var ID_COL = /^(tid|pid|thread|process|id|line)$/i;
  function table(title, id, heads, rows, fmt) {
    app.appendChild(el('h2', null, title));
    var t = el('table', { id: id }), thead = el('tr');
    heads.forEach(function (h, i) {
      var th = el('th', { 'class': fmt[i] === 't' ? 't' : '' }, h);
      th.addEventListener('click', function () {
        var asc = th.getAttribute('data-asc') !== '1';
        th.setAttribute('data-asc', asc ? '1' : '0');
        rows.sort(function (a, b) { var x = a[i], y = b[i]; var r = (x === null || y === null) ? (x === null) - (y === null) : (typeof x === 'number') ? x - y : String(x).localeCompare(String(y)); return asc ? r : -r; });
        fill();
      });
      thead.appendChild(th);
    });
    t.appendChild(thead);
    var body = el('tbody'); t.appendChild(body);
    function fill() {
      body.textContent = '';
      rows.forEach(function (r) {
        var tr = el('tr');
        r.forEach(function (v, i) {
          var f = fmt[i], s = v === null ? '-' : f === 'ns' ? ms(v) : f === '%' ? pct(v) :
            (f === 'n' && typeof v === 'number' && !ID_COL.test(heads[i])) ? cnt(v) : String(v);
          tr.appendChild(el('td', { 'class': f === 't' ? 't' : '' }, s));
        });
        body.appendChild(tr);
      });
    }
    fill();
    app.appendChild(t);
  }
  table('Locks', 'locks', ['lock', 'kind', 'pid', 'acquisitions', 'contended', 'contended %', 'wait', 'max wait', 'hold', 'owner changes', 'top site'],
    R.locks, ['t', 't', 'n', 'n', 'n', '%', 'ns', 'ns', 'ns', 'n', 't']);
  app.appendChild(el('h2', null, 'Recommendations'));
  if (!R.recommendations.length) app.appendChild(el('p', { 'class': 'muted' }, 'none'));
  R.recommendations.forEach(function (x) {
    var d = el('div', { 'class': 'rec' });
    d.appendChild(el('b', null, x.lock + ': '));
    d.appendChild(document.createTextNode(x.advice));
    d.appendChild(el('div', { 'class': 'muted' }, x.evidence));
    if (x.command) { var c = el('div'); c.appendChild(document.createTextNode('try: ')); c.appendChild(el('code', null, x.command)); d.appendChild(c); }
    app.appendChild(d);
  });
  table('Threads', 'threads', ['thread', 'tid', 'lifetime', 'free', 'lock wait', 'holding', 'unlocking', 'blocked (cond, barrier, sem, join)'],
    R.threads, ['t', 'n', 'ns', 'ns', 'ns', 'ns', 'ns', 'ns']);
  table('Blame: waiter site x holder site', 'blame', ['lock', 'waiter site', 'holder site', 'wait', 'waits'],
    R.blame, ['t', 't', 't', 'ns', 'n']);
  // Every other section of the report, drawn alike (html/sections.rs).
  (R.sections || []).forEach(function (x) {
    if (x.heads.length) table(x.title, x.id, x.heads, x.rows, x.fmt);
    else app.appendChild(el('h2', { id: x.id }, x.title));
    x.lines.forEach(function (n) { app.appendChild(el('p', { 'class': 'muted' }, n)); });
  });
  R.notes.forEach(function (n) { app.appendChild(el('p', { 'class': 'muted' }, n)); });

  size(); draw();
  addEventListener('resize', function () { size(); draw(); });

  // ---- self-test (the browser test opens the page with #selftest) ----
  if (location.hash === '#selftest') {
    var out = { errors: window.__lockscopeErrors, scripts: document.scripts.length };
    var img = ctx.getImageData(LABEL, TOP, cv.width - LABEL, ROW * nT).data, painted = 0;
    for (var q = 0; q < img.length; q += 4) {
      var r0 = img[q], g0 = img[q + 1], b0 = img[q + 2];
      // Not the white background nor the grey row stripes.
      if (!(r0 > 240 && g0 > 240 && b0 > 240)) painted++;
    }
    out.painted = painted;
    // The whole run's time-axis labels (round values, one unit).
    var st = tickStep(D.duration_ns, 8), labels = [];
    for (var tt = 0; tt <= D.duration_ns; tt += st) labels.push(tickLabel(tt, st));
    out.ticks = labels;
    out.rows = order.slice();
    // Hover the longest wait span and read the tooltip.
    var longest = null;
    D.spans.forEach(function (s) { if (s[1] === 'wait' && (!longest || s[3] - s[2] > longest[3] - longest[2])) longest = s; });
    if (longest) {
      var rect = cv.getBoundingClientRect();
      var mx = (xOf(longest[2]) + xOf(longest[3])) / 2, my = TOP + rowOf[longest[0]] * ROW + ROW / 2;
      cv.dispatchEvent(new MouseEvent('mousemove', { clientX: rect.left + mx, clientY: rect.top + my, bubbles: true }));
      out.hover = tip.textContent;
      hideTip();
    }
    // Show one lock's flame graph.
    var fs = document.getElementById('flame-waiters-lock');
    if (fs && fs.options.length > 1) {
      fs.value = '0'; fs.dispatchEvent(new Event('change'));
      out.flame_lock = fs.options[1].textContent;
    }
    // Zoom in and out and time the redraws.
    var t0 = performance.now(), n = 0;
    for (var z = 0; z < 10; z++) { v0 = D.duration_ns * z / 40; v1 = v0 + D.duration_ns / 4; draw(); n++; }
    whole(); n++;
    out.ms_per_frame = (performance.now() - t0) / n;
    out.errors = window.__lockscopeErrors;
    var pre = el('pre', { id: 'selftest' }, JSON.stringify(out));
    document.body.appendChild(pre);
  }
})();
