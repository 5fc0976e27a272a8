// Type declarations of ws.js: HeraldClient over the WebSocket only.
import type { HeraldClient as Whole, HeraldClientOptions } from './herald.js';
export { PROTOCOL, STOP_REASONS, States, HeraldError, reasonAction, closeAction, Backoff, ChannelState, Subscription } from './herald.js';
export type * from './herald.js';

export class HeraldClient extends Whole {
  constructor(options: Omit<HeraldClientOptions, 'transport' | 'EventSource' | 'sseIdleTimeoutMs'> & { transport?: 'ws' });
}

/** The WebSocket driver; herald.js combines it with the SSE one. */
export const ws: object;
