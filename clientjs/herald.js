// Herald's realtime client, both transports: the WebSocket (herald.v1, the
// default) and Server-Sent Events. An app that uses one transport only may
// import ws.js or sse.js instead. Docs: README.md; types: herald.d.ts.
import { Client } from './core.js';
import { ws } from './ws.js';
import { sse } from './sse.js';

export { PROTOCOL, STOP_REASONS, States, HeraldError, reasonAction, Backoff, ChannelState, Subscription } from './core.js';
export { latestWins } from './latest.js';
export { closeAction } from './ws.js';
export { FetchEventSource } from './eventsource.js';

/** HeraldClient over the WebSocket (transport "ws", the default) or SSE ("sse"). */
export class HeraldClient extends Client {
  constructor(options) {
    super(options, { ws, sse });
  }
}
