// fenced console. Plain JavaScript, no dependencies. It talks to the node
// that served it through the public API only. Every name that comes from
// the cluster (key, holder, value, node id) is put into the page with
// textContent, never parsed as HTML.
'use strict';

(() => {
  const POLL_MS = 2000;      // cluster and keys refresh
  const PAGE = 50;           // keys per page
  const FEED_MAX = 300;      // events kept in the feed
  const TICK_MS = 250;       // countdown refresh

  const S = {
    token: '',               // the bearer token, in memory only
    needsToken: false,
    admin: false,
    started: false,
    prefix: '',
    pages: [''],             // the after= cursor of each page seen
    page: 0,
    next: '',
    keys: [],                // the page shown, with a local deadline each
    status: null,
    feedStream: null,
    keyStream: null,
    keyName: null,
    history: [],             // the key page's events
    pending: null,           // the key a confirm is about
    refreshSoon: null,
    origins: new Set(),      // other members' origins the page may fetch from
    grants: new Map(),       // the key page's live grants, by token
    reads: 0,                // reads of keys started
    changes: 0,              // changes heard on the streams
  };

  const $ = (id) => document.getElementById(id);

  // el makes an element whose text is text (never HTML).
  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }

  function td(text, cls) { return el('td', text, cls); }

  function headers(extra) {
    const h = Object.assign({}, extra || {});
    if (S.token) h.Authorization = 'Bearer ' + S.token;
    return h;
  }

  class HTTPError extends Error {
    constructor(status, body) {
      super((body && body.message) || ('HTTP ' + status));
      this.status = status;
      this.code = body && body.code;
    }
  }

  // api calls a route of the node that served the page (or of another
  // member, given its origin).
  async function api(path, opts) {
    opts = opts || {};
    const init = { method: opts.method || 'GET', cache: 'no-store', headers: headers(opts.body ? { 'Content-Type': 'application/json' } : {}) };
    if (opts.body) init.body = JSON.stringify(opts.body);
    if (opts.signal) init.signal = opts.signal;
    const r = await fetch((opts.origin || '') + path, init);
    let body = null;
    try { body = await r.json(); } catch (e) { body = null; }
    if (!r.ok) {
      const err = new HTTPError(r.status, body);
      if (r.status === 401 && !opts.origin) needLogin(err.message);
      if (!opts.origin) notLeader(r, err.code);
      throw err;
    }
    return body;
  }

  // notLeader explains a node that will not forward this identity's
  // requests to the leader (authentication on, and no TLS between the
  // nodes: a client's credentials never travel to another node), with a
  // link to the leader's own console. Any other answer clears it.
  function notLeader(r, code) {
    const n = $('notice');
    if (code !== 'not_leader') return;
    const addr = r.headers.get('X-Fenced-Leader');
    n.replaceChildren('This node does not forward signed-in requests to the leader (the nodes talk without TLS, and credentials never travel between nodes). ');
    if (addr) {
      const a = el('a', 'Open the console on the leader, ' + addr);
      a.href = location.protocol + '//' + addr + '/ui/';
      n.append(a, el('span', ' (the token is asked for again).'));
    }
    n.dataset.from = 'not_leader';
    n.hidden = false;
  }

  function showError(msg) { $('error').textContent = msg || ''; }

  // ---- tokens: epoch << 32 | seq, decimal text on the wire ----
  function splitToken(tok) {
    try {
      const t = BigInt(tok || '0');
      return { epoch: (t >> 32n).toString(), seq: (t & 0xffffffffn).toString() };
    } catch (e) {
      return { epoch: '?', seq: '?' };
    }
  }
  function tokText(tok) {
    const t = splitToken(tok);
    return 'epoch ' + t.epoch + ' seq ' + t.seq;
  }

  // ---- Go durations ("1m2.5s", "850ms") to milliseconds ----
  function durMs(d) {
    if (!d) return 0;
    const units = { h: 3600e3, m: 60e3, s: 1e3, ms: 1, us: 1e-3, 'µs': 1e-3, ns: 1e-6 };
    let ms = 0;
    const re = /([0-9.]+)(h|ms|m|s|us|µs|ns)/g;
    let m;
    while ((m = re.exec(d)) !== null) ms += parseFloat(m[1]) * units[m[2]];
    return ms;
  }
  function fmtMs(ms) {
    if (ms <= 0) return '0s';
    if (ms < 10e3) return (ms / 1e3).toFixed(1) + 's';
    if (ms < 3600e3) return Math.floor(ms / 60e3) + 'm' + String(Math.floor(ms / 1e3) % 60).padStart(2, '0') + 's';
    return Math.floor(ms / 3600e3) + 'h' + String(Math.floor(ms / 60e3) % 60).padStart(2, '0') + 'm';
  }

  // ---- sign in ----
  function needLogin(msg) {
    S.needsToken = true;
    stopStreams();
    $('main').hidden = true;
    $('login').hidden = false;
    $('login-error').textContent = S.token ? (msg || 'the token was refused') : '';
    setConn('signed out', 'down');
    $('token').focus();
  }

  async function login(ev) {
    ev.preventDefault();
    S.token = $('token').value.trim();
    $('token').value = '';
    $('login-error').textContent = '';
    await start();
  }

  function logout() {
    S.token = '';
    S.admin = false;
    S.started = false;
    stopStreams();
    $('logout').hidden = true;
    $('whoami').textContent = '';
    needLogin('');
  }

  // whoAmI finds whether the identity is an admin: the ACL check is an
  // admin-only route that changes nothing.
  async function whoAmI() {
    try {
      await api('/v1/acl/check', { method: 'POST', body: { identity: 'console', right: 'read', key: 'console' } });
      return true;
    } catch (e) {
      if (e.status === 401) throw e;
      return false;
    }
  }

  async function start() {
    let st;
    try {
      st = await api('/v1/cluster');
    } catch (e) {
      if (e.status !== 401) { showError('cannot read the cluster status: ' + e.message); setTimeout(start, POLL_MS); }
      return;
    }
    // With authentication off nobody needs a token; with it on, the
    // status route lets any identity in, so check a key route too.
    if (st.auth === 'on' && !S.token) { needLogin(''); return; }
    try {
      S.admin = await whoAmI();
      await api('/v1/keys?limit=1');
    } catch (e) {
      if (e.status !== 401) showError(e.message);
      if (e.status === 401 || e.status === 403) return;
    }
    $('login').hidden = true;
    $('main').hidden = false;
    $('logout').hidden = !S.token;
    $('whoami').textContent = st.auth === 'on' ? (S.admin ? 'admin' : 'client') : 'authentication off';
    document.body.classList.toggle('is-admin', S.admin);
    $('admin-cluster').hidden = !S.admin;
    if (S.started) return;
    S.started = true;
    S.origins = allowedOrigins();
    applyStatus(st);
    startFeed();
    route();
    pollCluster();
    pollKeys();
    setInterval(tick, TICK_MS);
  }

  // ---- cluster ----
  function setConn(text, cls) {
    const c = $('conn');
    c.textContent = text;
    c.className = 'pill' + (cls ? ' ' + cls : '');
  }

  function applyStatus(st) {
    S.status = st;
    $('node').textContent = 'node ' + st.id;
    $('cluster-id').textContent = st.cluster_id ? 'cluster ' + st.cluster_id : '';
  }

  async function pollCluster() {
    if (S.needsToken && !S.token) return;
    try {
      const st = await api('/v1/cluster');
      applyStatus(st);
      await renderMembers(st);
    } catch (e) {
      $('cluster-note').textContent = 'cannot read the status of this node: ' + e.message;
    }
    setTimeout(pollCluster, POLL_MS);
  }

  // allowedOrigins are the other members' API origins this page's
  // Content-Security-Policy lets it fetch from: the node writes those it
  // knew when it served the page into it. Fetching any other would be
  // refused.
  function allowedOrigins() {
    const m = document.querySelector('meta[name="fenced-connect"]');
    return new Set(((m && m.content) || '').split(' ').filter((o) => o.indexOf('://') > 0));
  }

  // memberStatus reads another member's own status from its API; the page
  // may reach it only when that node lets this origin read (--cors-origins).
  async function memberStatus(m) {
    if (!m.http_addr) return null;
    const origin = location.protocol + '//' + m.http_addr;
    if (!S.origins.has(origin)) return { error: 'not known when this page was loaded: reload it' };
    const ctl = new AbortController();
    const t = setTimeout(() => ctl.abort(), 1500);
    try {
      return await api('/v1/cluster', { origin: origin, signal: ctl.signal });
    } catch (e) {
      return { error: e.status ? e.message : 'unreachable from this page' };
    } finally {
      clearTimeout(t);
    }
  }

  async function renderMembers(st) {
    const members = (st.members || []).slice().sort((a, b) => a.id < b.id ? -1 : 1);
    const views = await Promise.all(members.map((m) => m.id === st.id ? st : memberStatus(m)));
    const body = $('members').tBodies[0];
    const rows = [];
    let unreachable = 0;
    members.forEach((m, i) => {
      const v = views[i] || { error: 'no HTTP address known' };
      const tr = el('tr');
      tr.dataset.node = m.id;
      const name = td(m.id + (m.id === st.id ? ' (this node)' : ''));
      tr.append(name, td(m.voter ? 'voter' : 'non-voter'), td(m.leader ? 'leader' : (v.state || 'follower').toLowerCase()));
      if (v.error) {
        unreachable++;
        tr.append(td('–'), td('–'), td('–'), td(v.error, 'health-bad'));
      } else {
        const healthy = v.leader_id && v.applied_index + 1000 >= st.commit_index;
        tr.append(td(v.term, 'mono'), td(v.commit_index, 'mono'), td(v.applied_index, 'mono'),
          td(healthy ? 'healthy' : (v.leader_id ? 'behind' : 'no leader'), healthy ? 'health-ok' : 'health-bad'));
      }
      rows.push(tr);
    });
    body.replaceChildren(...rows);
    $('cluster-note').textContent = unreachable
      ? 'Members this page cannot reach are shown without their own figures (a node lets this page read it when started with --cors-origins naming this origin).'
      : '';
    const sel = $('transfer-to');
    const keep = sel.value;
    sel.replaceChildren(el('option', 'any other voter'), ...members.filter((m) => m.voter && !m.leader).map((m) => {
      const o = el('option', m.id);
      o.value = m.id;
      return o;
    }));
    sel.options[0].value = '';
    if ([...sel.options].some((o) => o.value === keep)) sel.value = keep;
  }

  async function transfer() {
    const id = $('transfer-to').value;
    $('transfer-result').textContent = 'transferring…';
    try {
      const r = await api('/v1/cluster/transfer', { method: 'POST', body: id ? { id: id } : {} });
      $('transfer-result').textContent = 'leader now ' + (r.leader || 'unknown');
    } catch (e) {
      if (e.code !== 'outcome_unknown' && e.code !== 'unavailable') {
        $('transfer-result').textContent = 'refused: ' + e.message;
        return;
      }
      // Through a follower the answer is lost when the leader it was
      // forwarded to steps down: read who leads now.
      const before = S.status && S.status.leader_id;
      for (let i = 0; i < 10; i++) {
        await new Promise((res) => setTimeout(res, 500));
        try {
          const st = await api('/v1/cluster');
          if (st.leader_id && st.leader_id !== before) {
            $('transfer-result').textContent = 'leader now ' + st.leader_id + ' (the answer was lost: ' + e.message + ')';
            return;
          }
        } catch (e2) { /* try again */ }
      }
      $('transfer-result').textContent = 'outcome unknown: ' + e.message;
    }
  }

  // ---- keys ----
  function keysPath() {
    const q = new URLSearchParams({ limit: String(PAGE) });
    if (S.prefix) q.set('prefix', S.prefix);
    const after = S.pages[S.page];
    if (after) q.set('after', after);
    return '/v1/keys?' + q.toString();
  }

  // fresh reports whether a read of keys begun as read number seq, when
  // changes changes had been heard, may be shown: no later read began, and
  // none is due for a change heard since (a read that began before it
  // would undo what the change showed, until the next read).
  function fresh(seq, changes) {
    return seq === S.reads && (changes === S.changes || !S.refreshSoon);
  }

  async function loadKeys() {
    const seq = ++S.reads;
    const changes = S.changes;
    const r = await api(keysPath());
    if (!fresh(seq, changes)) return;
    const now = performance.now();
    S.keys = (r.keys || []).map((k) => Object.assign(k, {
      deadline: k.lease_remaining ? now + durMs(k.lease_remaining) : 0,
      delayUntil: k.lock_delay_remaining ? now + durMs(k.lock_delay_remaining) : 0,
    }));
    S.next = r.truncated ? r.next : '';
    $('notice').hidden = true; // the keys came: this node forwards, or leads
    renderKeys();
  }

  async function pollKeys() {
    if (S.keyName === null) {
      try { await loadKeys(); showError(''); } catch (e) { if (e.status !== 401) showError('keys: ' + e.message); }
    } else {
      try { await loadKey(); } catch (e) { if (e.status !== 401) showError('key: ' + e.message); }
    }
    setTimeout(pollKeys, POLL_MS);
  }

  // refreshSoon reloads the keys shortly after an event, once for a burst.
  function refreshSoon() {
    if (S.refreshSoon) return;
    S.refreshSoon = setTimeout(() => {
      S.refreshSoon = null;
      (S.keyName === null ? loadKeys() : loadKey()).catch(() => {});
    }, 150);
  }

  function keyLink(key) {
    const a = el('a', key, 'mono');
    a.href = '#/key/' + encodeURIComponent(key);
    return a;
  }

  function leaseCell(k) {
    const c = td('', 'mono lease');
    c.dataset.deadline = String(k.deadline || 0);
    c.textContent = k.state === 'held' && k.deadline ? fmtMs(k.deadline - performance.now()) : '–';
    return c;
  }

  // delayCell shows the grant's lock-delay, or the countdown of one in
  // force.
  function delayCell(k, tag) {
    const c = el(tag || 'td', k.lock_delay || '–', 'mono delay');
    c.dataset.until = String(k.delayUntil || 0);
    if (k.delayUntil) c.textContent = 'in force, ' + fmtMs(k.delayUntil - performance.now()) + ' left';
    return c;
  }

  // shaped reports whether k has live permits or shared grants: several
  // grants, each with its own holder, token and lease, that the key's page
  // lists.
  function shaped(k) { return (k.live || 0) > 0; }

  // shapeText is the hint of a key's shape: "2/3 permits", "shared ×4",
  // or "lock".
  function shapeText(k) {
    if (!shaped(k)) return 'lock';
    if (k.mode === 'shared') return 'shared ×' + k.live;
    return k.live + '/' + k.limit + ' permit' + (k.limit === 1 ? '' : 's');
  }

  function renderKeys() {
    const rows = S.keys.map((k) => {
      const tr = el('tr');
      tr.dataset.key = k.key;
      const name = td('', 'wrap');
      name.append(keyLink(k.key));
      const shape = td(shapeText(k), 'shape' + (shaped(k) ? ' shaped' : ' muted'));
      if (shaped(k)) {
        // Several grants: each has its own holder, token and lease, on
        // the key's page; the key is held while any is live.
        const many = el('a', k.live + (k.live === 1 ? ' holder' : ' holders'));
        many.href = '#/key/' + encodeURIComponent(k.key);
        const holder = td('', 'holder muted');
        holder.append(many);
        tr.append(name, shape, holder, td('–', 'mono epoch'), td('–', 'mono seq'), td('held', 'state st-held'),
          td('–', 'mono'), td('–', 'mono delay'), td((k.waiters || []).length, 'mono waiters'), td('', 'mono value'), td(''));
        return tr;
      }
      const t = splitToken(k.token);
      tr.append(name, shape, td(k.holder, 'mono holder'), td(t.epoch, 'mono epoch'), td(t.seq, 'mono seq'), td(k.state, 'state st-' + k.state),
        leaseCell(k), delayCell(k), td((k.waiters || []).length, 'mono waiters'), td(k.value || '', 'mono value'));
      const act = td('');
      if (S.admin && k.state === 'held') {
        const b = el('button', 'Force release', 'danger force');
        b.type = 'button';
        b.addEventListener('click', () => askForce(k));
        act.append(b);
      }
      tr.append(act);
      return tr;
    });
    $('keys').tBodies[0].replaceChildren(...rows);
    $('page-info').textContent = 'page ' + (S.page + 1) + (S.keys.length ? ', ' + S.keys.length + ' keys' : ', no keys') + (S.prefix ? ' under "' + S.prefix + '"' : '');
    $('next').disabled = !S.next;
    $('first').disabled = S.page === 0;
  }

  function tick() {
    const now = performance.now();
    document.querySelectorAll('td.lease').forEach((c) => {
      const d = Number(c.dataset.deadline);
      if (d) c.textContent = fmtMs(d - now);
    });
    document.querySelectorAll('.delay').forEach((c) => {
      const d = Number(c.dataset.until);
      if (d) c.textContent = d > now ? 'in force, ' + fmtMs(d - now) + ' left' : 'ended';
    });
  }

  // ---- forced release, with a confirmation ----
  function askForce(k) {
    S.pending = { key: k.key, token: k.token, holder: k.holder };
    $('confirm-text').textContent = 'End ' + k.holder + "'s grant of " + k.key + ' (' + tokText(k.token) + ')? The holder is not told; its next write carrying that token is refused.';
    $('confirm').hidden = false;
    $('confirm-no').focus();
  }

  async function force() {
    const p = S.pending;
    $('confirm').hidden = true;
    S.pending = null;
    if (!p) return;
    const rid = 'console-' + (crypto.randomUUID ? crypto.randomUUID() : String(Date.now()));
    try {
      await api('/v1/release', { method: 'POST', body: { key: p.key, token: p.token, force: true, request_id: rid } });
      showError('');
    } catch (e) {
      showError('forced release of ' + p.key + ' refused: ' + e.message);
    }
    refreshSoon();
  }

  // ---- server-sent events over fetch ----
  // EventSource cannot send an Authorization header, so the stream is read
  // with fetch and parsed here, with EventSource's rules: the last id seen
  // is sent back as Last-Event-ID when the stream reconnects, and the
  // server's retry: sets the wait before it does.
  function openStream(path, handlers, from) {
    const st = { lastId: from || '', retry: 1500, stopped: false, ctl: null };
    const run = async () => {
      while (!st.stopped) {
        st.ctl = new AbortController();
        const h = headers({ Accept: 'text/event-stream' });
        if (st.lastId) h['Last-Event-ID'] = st.lastId;
        try {
          const r = await fetch(path, { headers: h, cache: 'no-store', signal: st.ctl.signal });
          if (r.status === 401) { needLogin('the token was refused'); return; }
          if (r.status === 410 || r.status === 412) {
            // History this node no longer holds, or an id from before a
            // restore: say so and start again from the current state.
            let b = null;
            try { b = await r.json(); } catch (e) { b = null; }
            st.lastId = '';
            handlers.event('reset', { type: 'reset', reason: (b && b.code) || String(r.status) }, '');
            continue;
          }
          if (!r.ok || !r.body) {
            let b = null;
            try { b = await r.json(); } catch (e) { b = null; }
            notLeader(r, (b && b.code) || 'error');
            throw new Error('HTTP ' + r.status);
          }
          handlers.open();
          await readSSE(r.body, st, handlers);
        } catch (e) {
          if (st.stopped) return;
        }
        if (st.stopped) return;
        handlers.down();
        await new Promise((res) => setTimeout(res, st.retry));
      }
    };
    run();
    return st;
  }

  async function readSSE(body, st, handlers) {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '';
    let ev = { type: '', data: [], id: null };
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += value;
      let nl;
      while ((nl = buf.search(/\r\n|\r|\n/)) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + (buf[nl] === '\r' && buf[nl + 1] === '\n' ? 2 : 1));
        if (line === '') {
          if (ev.id !== null) st.lastId = ev.id;
          if (ev.data.length) {
            let data = null;
            try { data = JSON.parse(ev.data.join('\n')); } catch (e) { data = null; }
            if (data) {
              const type = ev.type || 'message';
              if (type === 'reset') st.lastId = ''; // resync: the next stream starts fresh
              handlers.event(type, data, ev.id);
            }
          }
          ev = { type: '', data: [], id: null };
          continue;
        }
        if (line[0] === ':') continue;
        const i = line.indexOf(':');
        const field = i < 0 ? line : line.slice(0, i);
        let val = i < 0 ? '' : line.slice(i + 1);
        if (val[0] === ' ') val = val.slice(1);
        if (field === 'event') ev.type = val;
        else if (field === 'data') ev.data.push(val);
        else if (field === 'id' && val.indexOf('\0') < 0) ev.id = val;
        else if (field === 'retry' && /^[0-9]+$/.test(val)) st.retry = Number(val);
      }
    }
  }

  function stopStreams() {
    for (const s of [S.feedStream, S.keyStream]) {
      if (s) { s.stopped = true; if (s.ctl) s.ctl.abort(); }
    }
    S.feedStream = null;
    S.keyStream = null;
  }

  // ---- the live feed ----
  const CHANGES = ['granted', 'renewed', 'released', 'force_released', 'expired', 'lock_delay_ended', 'handed_off', 'deleted'];

  function feedItem(type, ev) {
    const li = el('li', null, type === 'reset' ? 'reset' : '');
    li.dataset.type = type;
    li.dataset.index = String(ev.index || '');
    li.dataset.key = ev.key || '';
    li.append(el('span', type, 'ev ev-' + type), ' ');
    if (type === 'reset') {
      li.append(el('span', 'history lost (' + (ev.reason || 'reset') + '): resynced from the current state'));
      return li;
    }
    li.append(keyLink(ev.key), ' ');
    if (ev.limit) li.append(el('span', 'permit of ' + ev.limit, 'shape-tag'), ' ');
    else if (ev.mode === 'shared') li.append(el('span', 'shared', 'shape-tag'), ' ');
    if (ev.holder) li.append(el('span', ev.holder, 'mono holder'), ' ');
    if (ev.token && ev.token !== '0') li.append(el('span', tokText(ev.token), 'tok muted'));
    if (type === 'handed_off' && ev.prev_holder) li.append(' ', el('span', 'from ' + ev.prev_holder + ' (' + (ev.ended || 'ended') + ')', 'muted'));
    const meta = el('div', new Date().toLocaleTimeString() + ' · index ' + ev.index, 'muted');
    li.append(meta);
    return li;
  }

  function pushFeed(li) {
    const feed = $('feed');
    feed.prepend(li);
    while (feed.children.length > FEED_MAX) feed.lastElementChild.remove();
  }

  function startFeed() {
    S.feedStream = openStream('/v1/watch?progress=5s', {
      open: () => setConn('live', 'live'),
      down: () => setConn('reconnecting', 'down'),
      event: (type, ev) => {
        if (type === 'sync') { setConn('live', 'live'); $('feed-state').textContent = 'through index ' + ev.index; return; }
        if (type === 'unavailable') { setConn('node cannot serve: ' + (ev.reason || ''), 'down'); return; }
        if (type === 'reset') { pushFeed(feedItem('reset', ev)); return; }
        if (CHANGES.indexOf(type) < 0) return; // state: the current keys, shown by the table
        $('feed-state').textContent = 'through index ' + ev.index;
        pushFeed(feedItem(type, ev));
        S.changes++;
        refreshSoon();
      },
    });
  }

  // ---- a key's page ----
  function route() {
    const m = /^#\/key\/(.+)$/.exec(location.hash);
    if (S.keyStream) { S.keyStream.stopped = true; if (S.keyStream.ctl) S.keyStream.ctl.abort(); S.keyStream = null; }
    if (!m) {
      S.keyName = null;
      $('key-view').hidden = true;
      $('keys-view').hidden = false;
      loadKeys().catch(() => {});
      return;
    }
    let name;
    try { name = decodeURIComponent(m[1]); } catch (e) { location.hash = '#/'; return; }
    S.keyName = name;
    S.history = [];
    S.keySynced = false;
    delete $('key-view').dataset.synced;
    // Nothing of the key shown before shows until the key's first read.
    S.current = null;
    S.grants = new Map();
    $('key-detail').replaceChildren(el('dt', 'state'), el('dd', 'reading…', 'muted'));
    $('grants').tBodies[0].replaceChildren();
    $('key-waiters').replaceChildren();
    $('grants-none').hidden = true;
    $('waiters-none').hidden = true;
    $('keys-view').hidden = true;
    $('key-view').hidden = false;
    $('key-title').textContent = name;
    $('history-note').textContent = '';
    renderTimeline();
    loadKey().catch((e) => showError('key: ' + e.message));
    // From index 0: the whole history this node still holds; a 410 then
    // starts from the current state, and the page says so.
    const st = openStream('/v1/watch?progress=5s&key=' + encodeURIComponent(name), {
      open: () => {},
      down: () => {},
      event: (type, ev) => {
        if (type === 'sync') {
          // Every change up to here was sent: the changes after it
          // update the grants table one grant at a time (those before it
          // are history the key's reads already show).
          S.keySynced = true;
          $('key-view').dataset.synced = 'true';
          return;
        }
        if (type === 'reset') {
          S.history = [];
          S.keySynced = false;
          delete $('key-view').dataset.synced;
          $('history-note').textContent = 'Older history of this key is no longer held by this node; shown from its current state.';
          refreshSoon();
        } else if (type === 'state' || CHANGES.indexOf(type) >= 0) {
          S.history.push(Object.assign({ type: type, at: new Date() }, ev));
          if (type !== 'state') {
            S.changes++;
            if (S.keySynced) applyGrantEvent(type, ev);
            refreshSoon();
          }
        } else {
          return;
        }
        renderTimeline();
      },
    }, '0');
    S.keyStream = st;
  }

  async function loadKey() {
    const name = S.keyName;
    if (name === null) return;
    const seq = ++S.reads;
    const changes = S.changes;
    let k;
    try {
      k = await api('/v1/keys/' + encodeURIComponent(name));
    } catch (e) {
      if (e.status === 404) { if (name === S.keyName && fresh(seq, changes)) renderKey(name, null); return; }
      throw e;
    }
    if (name !== S.keyName || !fresh(seq, changes)) return;
    k.deadline = k.lease_remaining ? performance.now() + durMs(k.lease_remaining) : 0;
    renderKey(name, k);
  }

  // grantOf is one live grant as the key's page lists it: a permit, a
  // shared grant, or a lock's (exclusive) grant. k is a key's read, one of
  // its permits, or a watch event.
  function grantOf(k, mode) {
    return {
      token: String(k.token), holder: k.holder, mode: mode, ttl: k.ttl || '', value: k.value || '',
      deadline: k.lease_remaining ? performance.now() + durMs(k.lease_remaining) : (k.ttl ? performance.now() + durMs(k.ttl) : 0),
    };
  }

  // grantsOf returns a key's live grants, by token: its permits or shared
  // grants, or the lock's grant while it is held.
  function grantsOf(k) {
    const out = new Map();
    if (!k) return out;
    if (k.permits && k.permits.length) {
      const mode = k.mode === 'shared' ? 'shared' : 'permit';
      k.permits.forEach((p) => out.set(String(p.token), grantOf(p, mode)));
    } else if (k.state === 'held') {
      out.set(String(k.token), grantOf(k, 'exclusive'));
    }
    return out;
  }

  function renderKey(name, k) {
    S.current = k;
    S.grants = grantsOf(k);
    renderSummary();
    renderGrants();
    renderWaiters(k ? k.waiters || [] : []);
  }

  // renderSummary shows the key: a lock's grant, or the shape of a key
  // with live permits or shared grants (each of them is a row of the
  // grants table).
  function renderSummary() {
    const k = S.current;
    const dl = $('key-detail');
    const rows = [];
    const add = (label, value, cls) => { rows.push(el('dt', label), el('dd', value, cls)); };
    if (!k) {
      add('state', 'unknown to the cluster (never granted, or reclaimed)');
    } else if (shaped(k)) {
      if (k.mode === 'shared') {
        add('shape', 'shared: any number of shared grants at once, no exclusive one beside them', 'shape');
        add('live grants', String(k.live), 'mono live');
      } else {
        add('shape', 'semaphore of ' + k.limit + ' permit' + (k.limit === 1 ? '' : 's'), 'shape');
        add('live grants', k.live + ' of ' + k.limit, 'mono live');
      }
      add('state', 'held', 'st-held');
      add('last token', k.token + ' (' + tokText(k.token) + '), the highest granted', 'mono');
      add('index', k.index, 'mono');
    } else {
      const t = splitToken(k.token);
      add('shape', 'lock', 'shape');
      add('holder', k.holder, 'mono');
      add('token', k.token, 'mono');
      add('epoch', t.epoch, 'mono');
      add('seq', t.seq, 'mono');
      add('state', k.state, 'st-' + k.state);
      add('ttl', k.ttl, 'mono');
      const lease = el('dd', '–', 'mono lease');
      lease.dataset.deadline = String(k.state === 'held' ? k.deadline : 0);
      rows.push(el('dt', 'lease left'), lease);
      k.delayUntil = k.lock_delay_remaining ? performance.now() + durMs(k.lock_delay_remaining) : 0;
      rows.push(el('dt', 'lock-delay'), delayCell(k, 'dd'));
      add('value', k.value || '', 'mono value');
      add('index', k.index, 'mono');
    }
    dl.replaceChildren(...rows);
    tick2();
  }

  // renderGrants shows the live grants, one row per token in token order.
  // A grant's row is kept from one rendering to the next and only its
  // cells change, so a permit's grant, renewal or end adds, updates or
  // removes that permit's row and leaves the others be.
  function renderGrants() {
    const body = $('grants').tBodies[0];
    const have = new Map([...body.rows].map((tr) => [tr.dataset.token, tr]));
    const order = [...S.grants.values()].sort((a, b) => {
      const x = BigInt(a.token), y = BigInt(b.token);
      return x < y ? -1 : (x > y ? 1 : 0);
    });
    body.replaceChildren(...order.map((g) => {
      const tr = have.get(g.token) || grantRow(g);
      fillGrantRow(tr, g);
      return tr;
    }));
    $('grants').hidden = order.length === 0;
    $('grants-none').hidden = order.length > 0;
  }

  function grantRow(g) {
    const tr = el('tr');
    tr.dataset.token = g.token;
    const t = splitToken(g.token);
    tr.append(td('', 'mono holder'), td('', 'mode'), td(g.token, 'mono token'), td(t.epoch, 'mono epoch'), td(t.seq, 'mono seq'),
      td('', 'mono ttl'), td('', 'mono lease'), td('', 'mono value'));
    const act = td('');
    if (S.admin) {
      const b = el('button', 'Force release', 'danger force');
      b.type = 'button';
      b.addEventListener('click', () => askForce({ key: S.keyName, token: tr.dataset.token, holder: tr.querySelector('.holder').textContent }));
      act.append(b);
    }
    tr.append(act);
    return tr;
  }

  function fillGrantRow(tr, g) {
    const set = (sel, text) => { const c = tr.querySelector(sel); if (c.textContent !== text) c.textContent = text; };
    set('.holder', g.holder || '');
    set('.mode', g.mode);
    set('.ttl', g.ttl);
    set('.value', g.value);
    const lease = tr.querySelector('.lease');
    lease.dataset.deadline = String(g.deadline || 0);
    lease.textContent = g.deadline ? fmtMs(g.deadline - performance.now()) : '–';
  }

  function renderWaiters(waiters) {
    $('key-waiters').replaceChildren(...waiters.map((w) => el('li', w, 'mono')));
    $('waiters-none').hidden = waiters.length > 0;
  }

  // applyGrantEvent brings the grants table up to a change of the key the
  // page watches. A permit's or a shared grant's event (it carries the
  // key's limit, or mode shared) is about that grant alone; a lock's grant
  // replaces whatever was live. The next read of the key confirms it.
  function applyGrantEvent(type, ev) {
    const many = (ev.limit || 0) > 0 || ev.mode === 'shared';
    const mode = ev.mode === 'shared' ? 'shared' : (many ? 'permit' : 'exclusive');
    const tok = String(ev.token);
    switch (type) {
      case 'granted':
      case 'handed_off':
        if (!many) S.grants.clear();
        if (ev.prev_token) S.grants.delete(String(ev.prev_token));
        S.grants.set(tok, grantOf(ev, mode));
        break;
      case 'renewed':
        S.grants.set(tok, grantOf(ev, mode));
        break;
      case 'released': case 'force_released': case 'expired': case 'lock_delay_ended': case 'deleted':
        S.grants.delete(tok);
        break;
      default:
        return;
    }
    renderGrants();
    const k = S.current;
    if (many && k) {
      k.live = S.grants.size;
      k.limit = ev.limit || 0;
      k.mode = ev.mode || '';
      if (type === 'granted' || type === 'handed_off') k.token = tok;
      if (k.live > 0) renderSummary();
    }
  }

  function tick2() {
    const now = performance.now();
    document.querySelectorAll('dd.lease').forEach((c) => {
      const d = Number(c.dataset.deadline);
      c.textContent = d ? fmtMs(d - now) : '–';
    });
  }

  // holderClass gives each holder one of eight colours, the same each time.
  function holderClass(h) {
    let x = 0;
    for (let i = 0; i < h.length; i++) x = (x * 31 + h.charCodeAt(i)) >>> 0;
    return 'h' + (x % 8);
  }

  // grants folds the key's events into its grants, oldest first: each a
  // token and holder, with the steps that happened to it.
  function grants(events) {
    const out = [];
    const byTok = new Map();
    const grant = (tok, holder, how, at) => {
      let g = byTok.get(tok);
      if (!g) {
        g = { token: tok, holder: holder, steps: [] };
        byTok.set(tok, g);
        out.push(g);
      }
      if (how) g.steps.push(how);
      return g;
    };
    for (const ev of events) {
      const idx = ' @' + ev.index;
      switch (ev.type) {
        case 'state':
          if (ev.token && ev.token !== '0') grant(ev.token, ev.holder, ev.state + ' (current state)' + idx);
          break;
        case 'granted': grant(ev.token, ev.holder, 'granted' + idx); break;
        case 'renewed': grant(ev.token, ev.holder, 'renewed' + idx); break;
        case 'handed_off':
          if (ev.prev_token) grant(ev.prev_token, ev.prev_holder, (ev.ended || 'ended') + ', handed off' + idx);
          grant(ev.token, ev.holder, 'got it by handoff' + idx);
          break;
        case 'released': case 'force_released': case 'expired': case 'lock_delay_ended': case 'deleted':
          grant(ev.token, ev.holder, ev.type.replace(/_/g, ' ') + idx);
          break;
        default:
      }
    }
    return out;
  }

  function renderTimeline() {
    const items = grants(S.history).map((g) => {
      const li = el('li');
      li.dataset.token = g.token;
      li.append(el('span', '', 'bar ' + holderClass(g.holder || '')));
      const who = el('div');
      who.append(el('div', g.holder || '–', 'mono holder'), el('div', tokText(g.token), 'tok muted'));
      const steps = el('div', null, 'steps');
      g.steps.forEach((s) => steps.append(el('span', s, 'step')));
      li.append(who, steps);
      return li;
    });
    $('timeline').replaceChildren(...items);
  }

  // ---- wiring ----
  document.addEventListener('DOMContentLoaded', () => {
    $('login-form').addEventListener('submit', login);
    $('logout').addEventListener('click', logout);
    $('search').addEventListener('submit', (ev) => {
      ev.preventDefault();
      S.prefix = $('prefix').value;
      S.pages = [''];
      S.page = 0;
      if (location.hash.startsWith('#/key/')) location.hash = '#/';
      loadKeys().catch((e) => showError('keys: ' + e.message));
    });
    $('next').addEventListener('click', () => {
      if (!S.next) return;
      S.pages[S.page + 1] = S.next;
      S.page++;
      loadKeys().catch((e) => showError('keys: ' + e.message));
    });
    $('first').addEventListener('click', () => {
      S.page = 0;
      loadKeys().catch((e) => showError('keys: ' + e.message));
    });
    $('transfer').addEventListener('click', transfer);
    $('confirm-yes').addEventListener('click', force);
    $('confirm-no').addEventListener('click', () => { $('confirm').hidden = true; S.pending = null; });
    window.addEventListener('hashchange', () => { if (S.started) route(); });
    setInterval(tick2, TICK_MS);
    start();
  });
})();
