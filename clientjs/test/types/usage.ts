// The README's uses of the client, type-checked against the declarations
// (herald.d.ts, sse.d.ts, ws.d.ts, latest.d.ts) by test/types.test.js.
import { HeraldClient, HeraldError, latestWins, type Publication, type Connected, type RecoveryReason } from '../../herald.js';
import { HeraldClient as SseClient } from '../../sse.js';
import { HeraldClient as WsClient, closeAction } from '../../ws.js';
import { latestWins as latestWins2 } from '../../latest.js';

interface Order {
  id: string;
  version: number;
  status: string;
}

export async function readme(render: (o: Order) => void, load: () => Promise<Order[]>): Promise<void> {
  const client = new HeraldClient({ url: 'https://herald.example.com', getToken: async () => 'jwt' });
  const orders = latestWins(
    (p: Publication<Order>) => p.data.id,
    (p) => p.data.version,
  );
  const sub = client.subscribe<Order>('orders/42');
  const off = sub.on('publication', (p) => {
    if (orders(p)) render(p.data);
  });
  sub.on('gap', (g) => console.log(g.channel, g.reason, g.recovery, g.offset, g.epoch));
  sub.on('state', (s) => console.log(s.state, s.recovered, s.recovery));
  sub.on('error', (e: HeraldError) => console.log(e.code, e.temporary));
  client.on('connected', (c: Connected) => {
    for (const ch of c.reload) console.log('reload', ch, c.reasons[ch], c.recovered, c.reconnect);
  });
  client.on('disconnected', (d) => console.log(d.reason, d.delayMs, d.reconnect));
  client.on('connecting', (s) => console.log(s.reason));
  client.on('fallback', (f) => console.warn(`the token goes in the URL: ${f.reason}, as ${f.credential}`));
  const first = await sub.ready;
  console.log(first.recovered, first.reason, first.offset, sub.position?.epoch, sub.state);
  const why: RecoveryReason = 'history_exceeded';
  const s = client.server;
  if (s) console.log(why, s.version, Date.now() + (s.clockOffsetMs ?? 0), s.history?.size, s.history?.ttlMs);
  for (const o of await load()) render(o);
  for await (const p of sub) render(p.data);
  off();
  sub.unsubscribe();
  const res = await client.publish('rooms/lobby', 'chat.message', { text: 'hi' }, { schemaVersion: 1 });
  console.log(res.id, res.offset, client.positions()['orders/42']?.offset, client.state, client.lastError?.code);
  client.close();

  const sse = new SseClient({ getToken: () => 'jwt', transport: 'sse', requestTimeoutMs: 5000 });
  sse.subscribe('orders/1', { onPublication: (p) => console.log(p.id), since: { offset: 1, epoch: 'e' } });
  const ws = new WsClient({ getToken: () => 'jwt', window: null, document: null });
  console.log(closeAction(4100), latestWins2((x: number) => x, (x) => x)(1), ws.transport);
}
