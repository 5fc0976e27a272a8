// Test helpers: a real Herald process (built from this repository), its CLI
// for tokens and publications, a TCP proxy that can cut connections, and
// waiting with timeouts. No mocks: every test talks to `herald serve`.

import { spawn, execFile } from 'node:child_process';
import { createHmac, randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import net from 'node:net';
import http from 'node:http';
import { HeraldClient } from '../herald.js';

const repoRoot = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** The HMAC secret every test server and token uses (32 bytes or more, as HS256 wants). */
export const SECRET = 'clientjs-test-secret-for-hs256-tokens';
/** The tenant of every test token. */
export const TENANT = 'acme';

const children = new Set();
process.on('exit', () => {
  for (const c of children) {
    try {
      process.kill(c.pid, 'SIGKILL');
    } catch {
      // gone already
    }
  }
});

let binary = null;

/**
 * heraldBinary returns the path of the herald binary: $HERALD_BIN when set
 * (scripts/test-js.sh builds it once), else one built now from the repo.
 */
export async function heraldBinary() {
  if (process.env.HERALD_BIN) return process.env.HERALD_BIN;
  if (!binary) {
    binary = (async () => {
      const dir = await mkdtemp(join(tmpdir(), 'herald-clientjs-bin-'));
      const out = join(dir, 'herald');
      await run('go', ['build', '-o', out, './cmd/herald'], { cwd: repoRoot, timeout: 300_000 });
      process.on('exit', () => rmSync(dir, { recursive: true, force: true }));
      return out;
    })();
  }
  return binary;
}

function run(cmd, args, opts = {}) {
  return new Promise((resolve, reject) => {
    execFile(cmd, args, { timeout: 20_000, ...opts }, (err, stdout, stderr) => {
      if (err) reject(new Error(`${cmd} ${args.join(' ')}: ${err.message}\n${stderr}`));
      else resolve(stdout.trim());
    });
  });
}

// Settings that make token revalidation fast enough for tests, passed
// when this build of `herald serve` has them (older builds close at exp).
const fastRevalidation = {
  'revalidate-interval': '250ms',
  'refresh-ahead': '1s',
  'expiry-grace': '250ms',
};

let serveFlags = null;

// optionalArgs returns the fastRevalidation flags `herald serve` knows.
async function optionalArgs(bin) {
  if (!serveFlags) {
    serveFlags = new Promise((resolve) => {
      execFile(bin, ['serve', '--help'], { timeout: 20_000 }, (_err, stdout, stderr) => {
        const help = `${stdout}\n${stderr}`;
        const args = [];
        for (const [name, value] of Object.entries(fastRevalidation)) {
          if (new RegExp(`^\\s+--?${name}\\b`, 'm').test(help)) args.push(`--${name}`, value);
        }
        resolve(args);
      });
    });
  }
  return serveFlags;
}

/** Herald is one `herald serve` process on its own data directory. */
export class Herald {
  /**
   * Starts a server on 127.0.0.1 (port 0 = any free one).
   * @param {{port?: number, args?: string[]}} [opts]
   */
  static async start(opts = {}) {
    const h = new Herald();
    h.bin = await heraldBinary();
    h.dataDir = await mkdtemp(join(tmpdir(), 'herald-clientjs-data-'));
    h.extraArgs = [...(await optionalArgs(h.bin)), ...(opts.args || [])];
    await h._spawn(opts.port || 0);
    return h;
  }

  async _spawn(port) {
    const args = [
      'serve',
      '--listen', `127.0.0.1:${port}`,
      '--jwt-hmac-secret', SECRET,
      '--data-dir', this.dataDir,
      '--outbox-poll-interval', '50ms',
      '--shutdown-reconnect-delay', '200ms',
      '--connect-attempts-per-ip', '-1',
      '--log-level', process.env.HERALD_LOG_LEVEL || 'warn',
      ...this.extraArgs,
    ];
    const child = spawn(this.bin, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    children.add(child);
    this.child = child;
    this.stderr = '';
    child.stderr.on('data', (b) => {
      this.stderr = (this.stderr + b).slice(-8000);
    });
    this.exited = new Promise((resolve) => child.on('exit', (code, signal) => {
      children.delete(child);
      resolve({ code, signal });
    }));
    const addr = await new Promise((resolve, reject) => {
      let out = '';
      const t = setTimeout(() => reject(new Error(`herald did not start in 15 s:\n${out}\n${this.stderr}`)), 15_000);
      child.stdout.on('data', (b) => {
        out += b;
        const m = /listening on http:\/\/(\S+)/.exec(out);
        if (m) {
          clearTimeout(t);
          resolve(m[1]);
        }
      });
      child.on('exit', (code) => {
        clearTimeout(t);
        reject(new Error(`herald exited (${code}) before listening:\n${out}\n${this.stderr}`));
      });
    });
    child.stdout.resume();
    this.addr = addr;
    this.port = Number(addr.slice(addr.lastIndexOf(':') + 1));
    this.url = `http://${addr}`;
  }

  /** Stops the server with SIGTERM (graceful: shutdown disconnects), or the signal given. */
  async stop(signal = 'SIGTERM') {
    if (!this.child || this.child.exitCode !== null || this.child.signalCode !== null) return;
    this.child.kill(signal);
    const t = setTimeout(() => this.child.kill('SIGKILL'), 10_000);
    await this.exited;
    clearTimeout(t);
  }

  /** Starts the server again on the same port and data directory. */
  async restart() {
    await this.stop();
    await this._spawn(this.port);
  }

  /** Stops the server and removes its data directory. */
  async destroy() {
    await this.stop();
    await rm(this.dataDir, { recursive: true, force: true });
  }

  /**
   * Mints a token with `herald token`.
   * channel makes a subscription token for exactly that channel.
   * @param {{sub?: string, subscribe?: string[], publish?: string[], ttl?: string, channel?: string}} [o]
   */
  token(o = {}) {
    const args = ['token', '--jwt-hmac-secret', SECRET, '--tenant', TENANT, '--sub', o.sub || 'u1', '--ttl', o.ttl || '1h'];
    if (o.channel) args.push('--channel', o.channel);
    for (const g of o.subscribe || []) args.push('--subscribe', g);
    for (const g of o.publish || []) args.push('--publish', g);
    return run(this.bin, args);
  }

  /**
   * Stages one notification with `herald publish` (same data directory,
   * so the running server's Worker dispatches it). Returns the message id.
   */
  publish(channel, data, o = {}) {
    const args = ['publish', '--data-dir', this.dataDir, '--log-level', 'warn', '--tenant', TENANT, '--channel', channel, '--type', o.type || 'order.updated', '--data', JSON.stringify(data)];
    if (o.id) args.push('--id', o.id);
    return run(this.bin, args);
  }
}

/**
 * mintToken signs a connection token in this process (HS256 with SECRET,
 * tenant TENANT), as an application's token endpoint would: faster than
 * `herald token` for a getToken called often, and able to mint one that
 * expired already. ttlSeconds may be negative; each token has a jti of
 * its own, so no two are the same.
 * @param {{sub?: string, subscribe?: string[], publish?: string[], ttlSeconds?: number}} [o]
 */
export function mintToken(o = {}) {
  const b64 = (v) => Buffer.from(JSON.stringify(v)).toString('base64url');
  const now = Math.floor(Date.now() / 1000);
  const ttl = o.ttlSeconds ?? 3600;
  const claims = { sub: o.sub || 'u1', jti: randomUUID(), iat: Math.min(now, now + ttl - 60), exp: now + ttl, herald: { tenant: TENANT, subscribe: o.subscribe || [], publish: o.publish || [] } };
  const body = `${b64({ alg: 'HS256', typ: 'JWT' })}.${b64(claims)}`;
  return `${body}.${createHmac('sha256', SECRET).update(body).digest('base64url')}`;
}

/**
 * republish stages a record again under the id of one already dispatched:
 * `herald outbox purge --state dispatched --older-than 0s` removes the
 * dispatched row, then `herald publish --id` stages it anew, so the channel
 * gets a true duplicate (same message id, new offset), as after an operator
 * replay or a lease lost mid-publish. Retries while the first copy is not
 * yet marked dispatched.
 */
export async function republish(h, channel, data, id) {
  return waitUntil(async () => {
    await run(h.bin, ['outbox', 'purge', '--data-dir', h.dataDir, '--log-level', 'warn', '--state', 'dispatched', '--older-than', '0s']);
    try {
      return await h.publish(channel, data, { id });
    } catch (e) {
      if (/UNIQUE/.test(e.message)) return false;
      throw e;
    }
  }, `re-staging ${id}`);
}

/**
 * TcpProxy forwards 127.0.0.1:<port> to a target port. cut() drops every
 * connection (the client sees the network fail); hold(true) also refuses
 * new ones until hold(false); freeze(true) keeps every byte from the
 * server until freeze(false) (the connections stay open, the server's
 * replies never come), then lets them through late.
 */
export class TcpProxy {
  static async start(targetPort) {
    const p = new TcpProxy();
    p.target = targetPort;
    p.sockets = new Set();
    p.held = false;
    p.frozen = false;
    p.late = [];
    p.server = net.createServer((c) => p._conn(c));
    await new Promise((resolve) => p.server.listen(0, '127.0.0.1', resolve));
    p.port = p.server.address().port;
    p.url = `http://127.0.0.1:${p.port}`;
    return p;
  }

  _conn(c) {
    if (this.held) {
      c.destroy();
      return;
    }
    const u = net.connect(this.target, '127.0.0.1');
    for (const s of [c, u]) {
      this.sockets.add(s);
      s.on('close', () => this.sockets.delete(s));
      s.on('error', () => {});
    }
    c.pipe(u);
    u.on('data', (b) => {
      if (this.frozen) this.late.push([c, b]);
      else c.write(b);
    });
    c.on('close', () => u.destroy());
    // A frozen network does not pass on the server's close either.
    u.on('close', () => (this.frozen ? this.late.push([c, null]) : c.destroy()));
  }

  /** Drops every open connection. */
  cut() {
    for (const s of this.sockets) s.destroy();
  }

  /** Withholds what the server sends while frozen; unfreezing sends it, late. */
  freeze(on) {
    this.frozen = on;
    if (on) return;
    for (const [c, b] of this.late.splice(0)) if (!c.destroyed) b ? c.write(b) : c.destroy();
  }

  /** Refuses new connections while held. */
  hold(on) {
    this.held = on;
  }

  close() {
    this.cut();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}

/**
 * HttpProxy is a reverse proxy on 127.0.0.1:<port> to a Herald, as a load
 * balancer in front of it would be; while notFound(path) holds for a
 * request's path it answers that request itself with its own 404 page
 * (text/html), as a proxy that does not route the path does.
 */
export class HttpProxy {
  static async start(target) {
    const p = new HttpProxy();
    p.notFound = () => false;
    p.server = http.createServer((req, res) => p._serve(req, res, target));
    await new Promise((resolve) => p.server.listen(0, '127.0.0.1', resolve));
    p.url = `http://127.0.0.1:${p.server.address().port}`;
    return p;
  }

  _serve(req, res, target) {
    if (this.notFound(new URL(req.url, 'http://x').pathname)) {
      res.writeHead(404, { 'Content-Type': 'text/html' });
      res.end('<html><body><h1>404 Not Found</h1></body></html>');
      return;
    }
    const up = http.request({ host: '127.0.0.1', port: target.port, method: req.method, path: req.url, headers: req.headers }, (r) => {
      res.writeHead(r.statusCode, r.headers);
      r.pipe(res);
    });
    up.on('error', () => res.destroy());
    res.on('close', () => up.destroy());
    req.pipe(up);
  }

  close() {
    this.server.closeAllConnections();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}

/** waitUntil polls cond every 10 ms until it is truthy, failing after ms. */
export async function waitUntil(cond, what, ms = 10_000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await cond();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** A fast backoff for tests against a real server. */
export const fastBackoff = { initialMs: 50, maxMs: 400, factor: 2, jitter: 'full', resetAfterMs: 2000 };

/**
 * recorder subscribes-side bookkeeping: publications, gaps, recoveries and
 * errors of one subscription, plus the handlers to pass to subscribe().
 */
export function recorder() {
  const r = { pubs: [], gaps: [], recovered: [], errors: [] };
  r.handlers = {
    onPublication: (p) => r.pubs.push(p),
    onGap: (g) => r.gaps.push(g),
    onRecovered: (x) => r.recovered.push(x),
    onError: (e) => r.errors.push(e),
  };
  return r;
}

/**
 * watch subscribes a Node client (SSE) straight to h, so a test knows when
 * publications made while another client is cut off are in the history.
 * The test closes it.
 */
export async function watch(t, h, token, channel) {
  const c = new HeraldClient({ url: h.url, transport: 'sse', backoff: fastBackoff, getToken: async () => token });
  t.after(() => c.close());
  const r = recorder();
  await c.subscribe(channel, r.handlers).ready;
  return r;
}

/** states records a client's onStateChange calls. */
export function stateLog() {
  const log = [];
  log.onStateChange = (s) => log.push(s);
  return log;
}
