// HTTP(S) requests on node:http and node:https. Node's fetch cannot be
// given a CA or a client certificate without undici's Agent, which Node
// does not export: node:https takes ca, cert and key directly, and its
// errors carry the TLS code that fetch hides behind "fetch failed".

import http from 'node:http';
import https from 'node:https';
import { isIP } from 'node:net';

/** The schemes an endpoint may name. */
export const SCHEMES = new Set(['http:', 'https:']);

// A bare endpoint: a host name, an IPv4 address or a bracketed IPv6 one, and
// an optional port. Anything else without "://" is more likely a mistyped
// URL ("htps:/host") than a host.
const HOST_PORT = /^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(?::[0-9]{1,5})?$/;

/**
 * The URL of an endpoint as given: "host:port" (https when tls) or an
 * http(s) URL; with tls an http URL becomes https, as the Go client's
 * WithTLS does. TypeError for anything else, naming it: a mistyped scheme
 * is never read as plain http.
 */
export function endpointURL(e, tls) {
  let text = e;
  const m = /^([^:/?#]*):\/\//.exec(e);
  if (m) {
    if (!SCHEMES.has(`${m[1].toLowerCase()}:`)) throw new TypeError(`endpoint ${JSON.stringify(e)}: unknown scheme ${JSON.stringify(m[1])} (use http:// or https://)`);
  } else if (HOST_PORT.test(e)) {
    text = `http://${e}`;
  } else {
    throw new TypeError(`endpoint ${JSON.stringify(e)} is neither host:port nor an http(s):// URL`);
  }
  let u;
  try { u = new URL(text); } catch { u = null; }
  if (!u || !u.hostname || u.search || u.hash || u.username || u.password) {
    throw new TypeError(`endpoint ${JSON.stringify(e)} is not a URL the client can reach (host, optional port and path)`);
  }
  if (tls && u.protocol === 'http:') u.protocol = 'https:';
  return `${u.protocol}//${u.host}${u.pathname}`.replace(/\/+$/, '');
}

// Codes of a connection that was never made: nothing was sent.
const NOT_CONNECTED = new Set(['ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH', 'EADDRNOTAVAIL', 'ENOTFOUND', 'EAI_AGAIN']);

// Codes of a TLS handshake that failed on this side (the server's
// certificate) or that the server refused (an alert): the server never read
// a request on that connection.
const TLS_VERIFY = new Set([
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE', 'UNABLE_TO_GET_ISSUER_CERT', 'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'SELF_SIGNED_CERT_IN_CHAIN', 'DEPTH_ZERO_SELF_SIGNED_CERT', 'CERT_HAS_EXPIRED', 'CERT_NOT_YET_VALID',
  'CERT_REVOKED', 'CERT_UNTRUSTED', 'CERT_REJECTED', 'CERT_SIGNATURE_FAILURE', 'INVALID_CA', 'INVALID_PURPOSE',
  'HOSTNAME_MISMATCH', 'ERR_TLS_CERT_ALTNAME_INVALID', 'ERR_TLS_HANDSHAKE_TIMEOUT',
]);

/** Whether code names a TLS failure. */
export function isTLSCode(code) {
  return typeof code === 'string' && (TLS_VERIFY.has(code) || code.startsWith('ERR_SSL_') || code.startsWith('ERR_TLS_'));
}

// What to do about the common TLS failures, in the caller's terms.
const HINTS = [
  [/ALERT_CERTIFICATE_REQUIRED|ALERT_HANDSHAKE_FAILURE/, 'the server requires a client certificate: pass cert and key'],
  [/ALERT_(BAD_CERTIFICATE|UNKNOWN_CA|CERTIFICATE_UNKNOWN|CERTIFICATE_EXPIRED|DECRYPT_ERROR)/, 'the server refused the client certificate'],
  [/^(UNABLE_TO_VERIFY_LEAF_SIGNATURE|UNABLE_TO_GET_ISSUER_CERT.*|SELF_SIGNED_CERT_IN_CHAIN|DEPTH_ZERO_SELF_SIGNED_CERT)$/, "the server's certificate is not signed by a CA the client trusts: pass ca"],
  [/ERR_TLS_CERT_ALTNAME_INVALID|HOSTNAME_MISMATCH/, "the server's certificate does not name this host"],
  [/CERT_HAS_EXPIRED|CERT_NOT_YET_VALID/, "the server's certificate is outside its validity"],
  [/WRONG_VERSION_NUMBER|HTTP_REQUEST/, 'the endpoint may be serving plain http'],
];

/** A transport failure: code is Node's (ECONNRESET, a TLS code...), sent
 * says whether the request may have reached the server. */
export class TransportError extends Error {
  constructor(endpoint, cause, sent) {
    const code = typeof cause?.code === 'string' ? cause.code : cause?.name ?? 'ERROR';
    super(`${endpoint}: ${describe(cause)}`, { cause });
    this.name = 'TransportError';
    this.code = code;
    this.sent = sent;
    this.tls = isTLSCode(code);
  }
}

/** A readable reason for a failed request: the TLS code and what it means,
 * or Node's code and message. */
export function describe(err) {
  let e = err;
  while (e && typeof e.code !== 'string' && e.cause) e = e.cause; // wrappers, and DOMException's numeric codes
  const code = typeof e?.code === 'string' ? e.code : undefined;
  // OpenSSL's text ("...:SSL routines:ssl3_read_bytes:tlsv13 alert
  // certificate required:../deps/...") reduced to its reason.
  const reason = /SSL routines:[^:]*:([^:]+)/.exec(e?.message ?? '')?.[1] ?? String(e?.message ?? e).split('\n')[0];
  if (isTLSCode(code)) {
    const hint = HINTS.find(([re]) => re.test(code))?.[1];
    return `TLS handshake failed: ${code} (${reason}${hint ? `; ${hint}` : ''})`;
  }
  if (e?.name === 'AbortError' && e.cause) return describe(e.cause);
  return code && !reason.includes(code) ? `${code}: ${reason}` : reason;
}

/**
 * Requests over one client's agents. tls: { ca, cert, key } as
 * node:https takes them (PEM strings or Buffers), or undefined.
 */
export class Transport {
  constructor(tls) {
    this.tls = tls;
    // Keep-alive agents: an idle socket is unreferenced, so it never keeps
    // the process alive.
    this.httpAgent = new http.Agent({ keepAlive: true });
    this.httpsAgent = new https.Agent({ keepAlive: true, ...(tls ?? {}) });
  }

  /**
   * Sends a request and resolves to the response once its head arrived;
   * the caller reads (or destroys) the body. Rejects with a TransportError.
   */
  open(url, { method = 'GET', headers = {}, body, signal } = {}) {
    const u = new URL(url);
    const secure = u.protocol === 'https:';
    const mod = secure ? https : http;
    return new Promise((resolve, reject) => {
      let connected = false;
      const h = { ...headers };
      if (body !== undefined) h['content-length'] = Buffer.byteLength(body);
      let req;
      try {
        req = mod.request(u, { method, headers: h, agent: secure ? this.httpsAgent : this.httpAgent, signal });
      } catch (err) {
        reject(new TransportError(u.origin, err, false));
        return;
      }
      req.on('socket', (s) => {
        // A reused socket is connected already; a new one after its
        // handshake.
        if (!s.connecting && (!secure || s.encrypted)) connected = true;
        s.once(secure ? 'secureConnect' : 'connect', () => { connected = true; });
      });
      req.on('error', (err) => {
        const code = err?.code ?? err?.cause?.code;
        // A refused handshake: the server read no request.
        const sent = connected && !NOT_CONNECTED.has(code) && !(isTLSCode(code) && /ALERT|HANDSHAKE/.test(code));
        reject(new TransportError(u.origin, err, sent));
      });
      req.on('response', resolve);
      req.end(body);
    });
  }

  /** Sends a request and reads its whole body as text. */
  async request(url, opts) {
    const res = await this.open(url, opts);
    const chunks = [];
    try {
      for await (const c of res) chunks.push(c);
    } catch (err) {
      throw new TransportError(new URL(url).origin, err, true);
    }
    return { status: res.statusCode, headers: res.headers, text: Buffer.concat(chunks).toString('utf8') };
  }

  /** Closes idle connections. */
  close() {
    this.httpAgent.destroy();
    this.httpsAgent.destroy();
  }
}

/**
 * Whether an endpoint URL names this machine (localhost or a loopback
 * address), where a bearer token in clear leaves no host.
 */
export function isLoopback(url) {
  const host = new URL(url).hostname.replace(/^\[|\]$/g, '');
  if (host === 'localhost') return true;
  if (isIP(host) === 4) return host.startsWith('127.');
  return isIP(host) === 6 && (host === '::1' || host === '0:0:0:0:0:0:0:1');
}
