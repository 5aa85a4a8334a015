// Go duration text, the form fenced sends and takes TTLs and waits in.

/** Go duration text for milliseconds. */
export function durationText(ms) {
  if (typeof ms === 'string') return ms;
  const n = Math.round(ms);
  return n % 1000 === 0 ? `${n / 1000}s` : `${n}ms`;
}

const UNITS = { ns: 1e-6, us: 1e-3, 'µs': 1e-3, ms: 1, s: 1000, m: 60000, h: 3600000 };

/** Milliseconds in Go duration text ("1m30s"); throws if it is not one. */
export function parseDuration(text) {
  let s = String(text);
  let sign = 1;
  if (s.startsWith('-')) { sign = -1; s = s.slice(1); }
  if (s === '0') return 0;
  const re = /^([0-9]+(?:\.[0-9]+)?)(ns|us|µs|ms|s|m|h)/;
  let total = 0;
  if (!s) throw new TypeError(`not a duration: ${text}`);
  while (s) {
    const m = re.exec(s);
    if (!m) throw new TypeError(`not a duration: ${text}`);
    total += Number(m[1]) * UNITS[m[2]];
    s = s.slice(m[0].length);
  }
  return sign * total;
}
