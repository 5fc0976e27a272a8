// Type declarations of herald.js (Herald's realtime client, both
// transports). sse.d.ts and ws.d.ts declare the one-transport entries.
// test/types.test.js checks them against the JavaScript (tsc, checkJs).

/** The WebSocket subprotocol the client speaks. */
export const PROTOCOL: 'herald.v1';

/** Disconnect reasons the server sends (docs/protocol.md, "Disconnect reasons"). */
export type DisconnectReason =
  | 'shutdown' | 'slow' | 'server_error' | 'insufficient_state' | 'write_timeout' | 'timeout'
  | 'too_many_connections' | 'too_many_requests' | 'client_closed' | 'token_expired'
  | 'authorization_unavailable' | 'bad_request' | 'unauthorized' | 'forbidden'
  | 'message_too_big' | 'protocol_error' | 'revoked';

/** Disconnect reasons after which the same request would fail again: the client stops. */
export type StopReason = 'bad_request' | 'unauthorized' | 'forbidden' | 'message_too_big' | 'protocol_error' | 'revoked';
export const STOP_REASONS: readonly StopReason[];

/** Error codes of the server's error replies, and of POST /v1/tickets (docs/protocol.md, "Error codes"). */
export type ServerErrorCode =
  | 'bad_request' | 'not_found' | 'tickets_disabled' | 'unauthorized' | 'token_expired' | 'forbidden'
  | 'already_subscribed' | 'not_subscribed' | 'too_many_subscriptions' | 'too_many_requests'
  | 'duplicate_id' | 'server_error' | 'authorization_unavailable' | 'revoked' | 'too_many_connections';

/**
 * Why a subscription did not recover: the `reason` the server sends with
 * every `recovered: false` (docs/protocol.md, "Resume"). A newer server
 * may send others.
 */
export type RecoveryReason = 'no_position' | 'epoch_changed' | 'history_exceeded' | 'position_ahead';

/**
 * Codes of the errors the client raises itself: `timeout` (no reply within
 * requestTimeoutMs), `disconnected` (the connection closed before the
 * reply), `closed` (the client was closed), `not_connected` (publish found
 * no connection in time), `not_supported`, `token_error` (getToken or a
 * subscription token failed), `invalid_argument`, `unsubscribed`,
 * `network` (a connection failed).
 */
export type ClientErrorCode =
  | 'timeout' | 'disconnected' | 'closed' | 'not_connected' | 'not_supported'
  | 'token_error' | 'invalid_argument' | 'unsubscribed' | 'network';

/** The requests the client sends (the op of a herald.v1 frame). */
export type Op = 'connect' | 'subscribe' | 'unsubscribe' | 'publish' | 'refresh' | 'ping' | 'pong';

export type State = 'idle' | 'connecting' | 'connected' | 'reconnecting' | 'closed';
export const States: Readonly<{ IDLE: 'idle'; CONNECTING: 'connecting'; CONNECTED: 'connected'; RECONNECTING: 'reconnecting'; CLOSED: 'closed' }>;

/** A channel position: the offset and epoch of a publication. */
export interface Position {
  offset: number;
  epoch: string;
}

/** The publication envelope (docs/protocol.md). */
export interface Publication<D = unknown> {
  id: string;
  channel: string;
  offset: number;
  epoch: string;
  type: string;
  schema_version: number;
  time: string;
  freshness: { mode: 'immediate' } | { mode: 'advisory'; authority: string };
  data: D;
}

/** Every error the client reports. */
export class HeraldError extends Error {
  constructor(code: string, message?: string, extra?: { temporary?: boolean; op?: string; status?: number; closeCode?: number; cause?: unknown });
  /** A ServerErrorCode, a DisconnectReason, or a ClientErrorCode. */
  code: ServerErrorCode | DisconnectReason | ClientErrorCode | (string & {});
  /** True when the same request may succeed later unchanged. */
  temporary: boolean;
  /** The request that failed. */
  op?: Op | (string & {});
  /** The HTTP status of a refused request. */
  status?: number;
  /** The WebSocket close code. */
  closeCode?: number;
}

/** What to do after a WebSocket close code. */
export function closeAction(code: number): 'reconnect' | 'reauth' | 'stop';
/** What to do after a disconnect reason (and the server's reconnect flag, when it sent one). */
export function reasonAction(reason: string, reconnect?: boolean): 'reconnect' | 'reauth' | 'stop';

export interface BackoffOptions {
  /** First delay cap, ms. Default 500. */
  initialMs?: number;
  /** Largest delay, ms. Default 30000. */
  maxMs?: number;
  /** Growth per attempt. Default 2. */
  factor?: number;
  /** "full": uniform in [0, cap]; "half": [cap/2, cap]; "none": cap. Default "full". */
  jitter?: 'full' | 'half' | 'none';
  /** A connection up this long resets the backoff, ms. Default 5000. */
  resetAfterMs?: number;
  /** Random source in [0, 1). Default Math.random. */
  random?: () => number;
}

/** Bounded exponential backoff with jitter. */
export class Backoff {
  constructor(options?: BackoffOptions);
  readonly options: Required<BackoffOptions>;
  readonly attempt: number;
  cap(attempt?: number): number;
  next(): number;
  reset(): void;
}

export interface LatestWins<T, K = unknown, V = number | bigint | string> {
  /** True (and kept) when item is newer than every item of its key seen before. */
  (item: T): boolean;
  get(key: K): T | undefined;
  version(key: K): V | undefined;
  has(key: K): boolean;
  delete(key: K): boolean;
  clear(): void;
  values(): T[];
  readonly size: number;
}

/** A filter that applies absolute state only when it is newer (also exported by latest.js). */
export function latestWins<T, K = unknown, V extends number | bigint | string = number | bigint | string>(
  keyFn: (item: T) => K,
  versionFn: (item: T) => V | null | undefined,
): LatestWins<T, K, V>;

export type GapReason = 'epoch_changed' | 'not_recovered' | 'offset_gap';

/** One channel's resume position and recent message ids. */
export class ChannelState {
  constructor(maxIds?: number, position?: Position | null);
  maxIds: number;
  offset: number | undefined;
  epoch: string | undefined;
  readonly position: Position | null;
  subscribed(result: { recovered: boolean; offset: number; epoch: string }): GapReason | null;
  accept(pub: { id?: string; offset: number; epoch: string }): { deliver: boolean; gap: GapReason | null };
}

export interface SubscribeResult {
  channel: string;
  recovered: boolean;
  /** With recovered: false, why (the server's). */
  reason?: RecoveryReason | (string & {});
  offset: number;
  epoch: string;
}

export interface Gap extends Position {
  channel: string;
  reason: GapReason;
  /** A resume that failed (not_recovered, epoch_changed on subscribing): the server's reason; absent for offset_gap. */
  recovery?: RecoveryReason | (string & {});
}

export type SubscriptionState = 'subscribing' | 'subscribed' | 'unsubscribed';

export interface SubscriptionStateChange {
  channel: string;
  state: SubscriptionState;
  previous: SubscriptionState;
  /** subscribed: whether the position was resumed with nothing missed. */
  recovered?: boolean;
  /** subscribed: the gap when a position was not resumed. */
  gap?: GapReason | null;
  /** subscribed with recovered: false: the server's reason (no_position for a new subscription). */
  recovery?: RecoveryReason | (string & {});
  /** Why the subscription is subscribing again or ended. */
  reason?: string;
  error?: HeraldError;
}

export interface SubscriptionEvents<D> {
  /** Each new publication, once, in offset order. */
  publication: Publication<D>;
  /** Publications were missed: reload the channel's authoritative state. */
  gap: Gap;
  /** A resume that missed nothing. */
  recovered: { channel: string; offset: number; epoch: string };
  /** The subscription ended for good (refused, or ended by the server). */
  error: HeraldError;
  state: SubscriptionStateChange;
}

export interface SubscribeOptions<D = unknown> {
  onPublication?: (pub: Publication<D>) => void;
  onGap?: (gap: Gap) => void;
  onRecovered?: (info: SubscriptionEvents<D>['recovered']) => void;
  onError?: (err: HeraldError) => void;
  onState?: (change: SubscriptionStateChange) => void;
  /** A saved position to resume from (WebSocket; over SSE it yields a gap). */
  since?: Position;
  /** A subscription token for this channel, or a function returning one (asked before every subscription). */
  token?: string | (() => Promise<string> | string);
}

/** @deprecated the name of SubscribeOptions before the event API */
export type SubscriptionHandlers<D = unknown> = SubscribeOptions<D>;

/** One channel of a client. */
export class Subscription<D = unknown> implements AsyncIterable<Publication<D>> {
  /** Made by client.subscribe(). */
  constructor(client: HeraldClient, channel: string, options: SubscribeOptions<D>);
  readonly channel: string;
  /** Settles with the first subscription result, or rejects: with the error that ended it, or "timeout" when no reply came within requestTimeoutMs (the subscription goes on). */
  readonly ready: Promise<SubscribeResult>;
  readonly position: Position | null;
  readonly state: SubscriptionState;
  readonly active: boolean;
  readonly closed: boolean;
  /** Calls fn for each event; returns the function that removes it. */
  on<E extends keyof SubscriptionEvents<D>>(type: E, fn: (ev: SubscriptionEvents<D>[E]) => void): () => void;
  unsubscribe(): void;
  /** Publications from now on; ends when unsubscribed, throws the error that ended the subscription. */
  [Symbol.asyncIterator](): AsyncIterator<Publication<D>>;
}

export interface StateChange {
  state: State;
  previous: State;
  reason?: string;
  closeCode?: number;
  delayMs?: number;
  error?: HeraldError;
  client?: string;
  expiresAt?: number;
}

export interface Connected {
  /** False for the first connection after connect(). */
  reconnect: boolean;
  /** True when every subscribed channel is in sync: resumed with nothing missed, or new. */
  recovered: boolean;
  /** The channels that were not resumed: reload their authoritative state. */
  reload: string[];
  /** For each channel of reload, the server's reason it was not resumed. */
  reasons: Record<string, RecoveryReason | (string & {}) | undefined>;
  client?: string;
  expiresAt?: number;
}

/** What the server said of itself in the last WebSocket connect reply (client.server). */
export interface ServerInfo {
  /** The server's release, for logs and bug reports (not for feature tests). */
  version?: string;
  /** The server's clock minus this device's, ms, when the reply came: Date.now() + clockOffsetMs is about the server's time. */
  clockOffsetMs?: number;
  /** How far back a resume position is served: a channel's last `size` publications, dropped after `ttlMs` without one (its epoch then changes). */
  history?: { size?: number; ttlMs?: number };
}

export interface Disconnected extends StateChange {
  /** True when the client reconnects (after delayMs), false when it stopped. */
  reconnect: boolean;
}

export interface ClientEvents {
  /** Every state change. */
  state: StateChange;
  /** A connection attempt begins; reason "online" or "visible" when the browser woke it. */
  connecting: StateChange;
  /** Connected, and every subscription has its answer. */
  connected: Connected;
  /** A connection or an attempt ended. */
  disconnected: Disconnected;
  /** Exceptions thrown by listeners, errors the server could not match to a request. */
  error: unknown;
  /** SSE with an EventSource: the server has tickets switched off (POST /v1/tickets answered 404 tickets_disabled), so from now on the token itself goes in the stream's URL. Once per client. */
  fallback: Fallback;
}

/** The "fallback" event: why the token goes in the URL, and as what. */
export interface Fallback {
  reason: 'tickets_disabled';
  credential: 'access_token';
}

export interface Clock {
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
  now(): number;
}

export interface HeraldClientOptions {
  /** Herald's base URL (http(s) or ws(s)). Default: the page's origin. */
  url?: string;
  /** Default "ws" (herald.js), the only one with sse.js and ws.js. */
  transport?: 'ws' | 'sse';
  /** Called before every connection attempt and refresh; reason says why. */
  getToken: (ctx: { reason: 'connect' | 'token_expired' | 'refresh' }) => Promise<string> | string;
  /** WebSocket class. Default globalThis.WebSocket. */
  WebSocket?: unknown;
  /** EventSource class (credentials then go in the URL). Default globalThis.EventSource; none: FetchEventSource with headers. */
  EventSource?: unknown;
  fetch?: typeof fetch;
  backoff?: BackoffOptions;
  /** Same as client.on('state', fn). */
  onStateChange?: (change: StateChange) => void;
  /** Same as client.on('error', fn). Without an error listener: console.error. */
  onError?: (err: unknown) => void;
  /** WebSocket: refresh in-band after this fraction of the token's remaining life; 0 = only when the server asks. Default 0.8. */
  refreshRatio?: number;
  /** Every request's bound, ms: connect, subscribe (SSE: the stream's start), unsubscribe, publish, refresh, ping; and publish's wait for a connection. Default 5000. */
  requestTimeoutMs?: number;
  /** Message ids remembered per channel for de-duplication. Default 1000. */
  maxIds?: number;
  /** FetchEventSource: give up a stream silent this long, ms (0 = never). Default 45000. */
  sseIdleTimeoutMs?: number;
  /** A page hidden at least this long checks its connection when visible again, ms. Default 10000. */
  resyncAfterHiddenMs?: number;
  /** Where "online" comes from. Default globalThis when it has addEventListener; null: none. */
  window?: EventTarget | null;
  /** Where "visibilitychange" comes from (with visibilityState). Default globalThis.document; null: none. */
  document?: (EventTarget & { visibilityState: string }) | null;
  clock?: Clock;
}

export class HeraldClient {
  constructor(options: HeraldClientOptions);
  readonly state: State;
  readonly transport: 'ws' | 'sse';
  /** The error that ended the last connection, or null. */
  lastError: HeraldError | null;
  /** From the last WebSocket connect reply; null before one (and over SSE, which has none). */
  readonly server: ServerInfo | null;
  /** Calls fn for each event; returns the function that removes it. */
  on<E extends keyof ClientEvents>(type: E, fn: (ev: ClientEvents[E]) => void): () => void;
  positions(): Record<string, Position>;
  connect(): Promise<void>;
  close(): void;
  subscribe<D = unknown>(channel: string, options?: SubscribeOptions<D>): Subscription<D>;
  publish(channel: string, type: string, data: unknown, options?: { schemaVersion?: number }): Promise<{ id: string; offset: number; epoch: string }>;
}

/** An EventSource-compatible reader over fetch streaming (loaded by sse.js where there is no EventSource). */
export class FetchEventSource {
  static readonly CONNECTING: 0;
  static readonly OPEN: 1;
  static readonly CLOSED: 2;
  constructor(url: string | URL, init?: { headers?: Record<string, string>; fetch?: typeof fetch; withCredentials?: boolean; idleTimeoutMs?: number });
  readonly url: string;
  readonly withCredentials: boolean;
  readyState: 0 | 1 | 2;
  onopen: ((ev: { type: 'open' }) => void) | null;
  onmessage: ((ev: { type: string; data: string; lastEventId: string; origin: string }) => void) | null;
  onerror: ((ev: { type: 'error'; status?: number; code?: string; message?: string; retryAfterMs?: number; error?: unknown }) => void) | null;
  addEventListener(type: string, fn: (ev: any) => void): void;
  removeEventListener(type: string, fn: (ev: any) => void): void;
  close(): void;
}
