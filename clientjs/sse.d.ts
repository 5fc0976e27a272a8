// Type declarations of sse.js: HeraldClient over Server-Sent Events only.
import type { HeraldClient as Whole, HeraldClientOptions } from './herald.js';
export { PROTOCOL, STOP_REASONS, States, HeraldError, reasonAction, Backoff, ChannelState, Subscription } from './herald.js';
export type * from './herald.js';

export class HeraldClient extends Whole {
  constructor(options: Omit<HeraldClientOptions, 'transport' | 'WebSocket'> & { transport?: 'sse' });
}

/** The SSE driver; herald.js combines it with the WebSocket's. */
export const sse: object;