// Herald's realtime client, both transports: the WebSocket (herald.v1, the
// default) and Server-Sent Events. An app that uses one transport only may
// import ws.js or sse.js instead. Docs: README.md; types: herald.d.ts.
import { Client, PROTOCOL, STOP_REASONS, States, HeraldError, reasonAction, Backoff, ChannelState, Subscription } from './core.js';
import { ws, closeAction } from './ws.js';
import { sse } from './sse.js';
import { latestWins } from './latest.js';
import { FetchEventSource } from './eventsource.js';

export { PROTOCOL, STOP_REASONS, States, HeraldError, reasonAction, Backoff, ChannelState, Subscription, latestWins, closeAction, FetchEventSource };

/** HeraldClient over the WebSocket (transport "ws", the default) or SSE ("sse"). */
export class HeraldClient extends Client {
  constructor(options) {
    super(options, { ws, sse });
  }
}
