// A small application server for the example page (index.html,
// orders.js), with no dependencies: it keeps orders in memory, serves them
// as authoritative state (GET /api/orders), mints the page's Herald token
// (GET /api/token), and on each change (POST /api/orders/<id> with
// {"status": …}) bumps the order's version and publishes it on the channel
// "orders" through Herald's WebSocket (a real application would stage it
// in its outbox, in the same transaction).
//
// How to run it: clientjs/README.md, "Loading state without missing or
// double-applying an update" (PORT, HERALD_URL, HERALD_SECRET; Node 20
// needs --experimental-websocket).
import http from 'node:http';
import { createHmac } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { realpathSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { HeraldClient } from '../herald.js';

const b64 = (v) => Buffer.from(typeof v === 'string' ? v : JSON.stringify(v)).toString('base64url');

/** token mints an HS256 JWT with Herald's claim (docs/security.md). */
export function token(secret, sub, herald, ttlSeconds = 3600) {
  const now = Math.floor(Date.now() / 1000);
  const body = `${b64({ alg: 'HS256', typ: 'JWT' })}.${b64({ sub, iat: now, exp: now + ttlSeconds, herald })}`;
  return `${body}.${createHmac('sha256', secret).update(body).digest('base64url')}`;
}

/**
 * startApp serves the example on 127.0.0.1:port (0: any free port) for a
 * Herald whose tokens are signed with secret; app.use(heraldUrl) says which
 * (so that Herald can be started knowing the app's origin).
 */
export async function startApp({ secret, tenant = 'acme', port = 0 }) {
  let heraldUrl = '';
  let publisher = null;
  const orders = new Map(
    [
      ['A-1', 'tea', 'paid'],
      ['A-2', 'coffee', 'paid'],
      ['A-3', 'cocoa', 'packed'],
    ].map(([id, item, status]) => [id, { id, item, status, version: 1 }]),
  );
  const here = (f) => new URL(f, import.meta.url);
  const files = { '/': ['text/html; charset=utf-8', 'index.html'], '/orders.js': ['text/javascript; charset=utf-8', 'orders.js'] };
  const json = (res, status, v) => {
    res.writeHead(status, { 'Content-Type': 'application/json', 'Cache-Control': 'no-store' });
    res.end(JSON.stringify(v));
  };
  const server = http.createServer(async (req, res) => {
    const path = new URL(req.url, 'http://x').pathname;
    if (files[path]) {
      res.writeHead(200, { 'Content-Type': files[path][0], 'Cache-Control': 'no-store' });
      return res.end(await readFile(here(files[path][1])));
    }
    if (path === '/api/config') return json(res, 200, { heraldUrl });
    if (path === '/api/token') {
      res.writeHead(200, { 'Content-Type': 'text/plain', 'Cache-Control': 'no-store' });
      return res.end(token(secret, 'orders-viewer', { tenant, subscribe: ['orders'] }));
    }
    if (path === '/api/orders' && req.method === 'GET') return json(res, 200, { orders: [...orders.values()] });
    const m = /^\/api\/orders\/([\w-]+)$/.exec(path);
    if (m && req.method === 'POST' && orders.has(m[1])) {
      let body = '';
      for await (const chunk of req) body += chunk;
      const o = orders.get(m[1]);
      const next = { ...o, status: String(JSON.parse(body).status), version: o.version + 1 };
      orders.set(o.id, next);
      // The state is saved; the update is a hint. If it is lost (Herald is
      // down), subscribers find out by a gap and reload the state.
      const published = await publisher.publish('orders', 'order.updated', next).then(
        () => true,
        () => false,
      );
      return json(res, 200, { order: next, published });
    }
    json(res, 404, { error: 'not found' });
  });
  await new Promise((resolve) => server.listen(port, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    use(url) {
      heraldUrl = url;
      publisher = new HeraldClient({
        url,
        getToken: () => token(secret, 'orders-app', { tenant, publish: ['orders'] }),
        window: null,
        document: null,
      });
    },
    close() {
      publisher?.close();
      server.closeAllConnections();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}

// Run as a program (through a symbolic link too), not imported.
if (process.argv[1] && realpathSync(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const app = await startApp({ secret: process.env.HERALD_SECRET || 'example-secret-at-least-32-bytes', port: Number(process.env.PORT || 8090) });
  app.use(process.env.HERALD_URL || 'http://127.0.0.1:8080');
  console.log(`the example is on ${app.url}/`);
}
