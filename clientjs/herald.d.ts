// Type declarations of herald.js (Herald's realtime client).

/** The WebSocket subprotocol the client speaks. */
export const PROTOCOL: 'herald.v1';

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
  /** Server error code, disconnect reason, or a client-side code. */
  code: string;
  /** True when the same request may succeed later unchanged. */
  temporary: boolean;
  op?: string;
  status?: number;
  closeCode?: number;
}

export function closeAction(code: number): 'reconnect' | 'reauth' | 'stop';
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

export function latestWins<T, K = unknown, V extends number | bigint | string = number | bigint | string>(
  keyFn: (item: T) => K,
  versionFn: (item: T) => V | null | undefined,
): LatestWins<T, K, V>;

export type GapReason = 'epoch_changed' | 'not_recovered' | 'offset_gap';

export class ChannelState {
  constructor(maxIds?: number, position?: Position | null);
  offset: number | undefined;
  epoch: string | undefined;
  readonly position: Position | null;
  subscribed(result: { recovered: boolean; offset: number; epoch: string }): GapReason | null;
  accept(pub: { id?: string; offset: number; epoch: string }): { deliver: boolean; gap: GapReason | null };
}

export interface SubscribeResult {
  channel: string;
  recovered: boolean;
  offset: number;
  epoch: string;
}

export interface SubscriptionHandlers<D = unknown> {
  /** Each new publication, once, in offset order. */
  onPublication?: (pub: Publication<D>) => void;
  /** Publications were missed: refresh the channel's authoritative state. */
  onGap?: (gap: { channel: string; reason: GapReason; offset: number; epoch: string }) => void;
  /** A resume that missed nothing. */
  onRecovered?: (info: { channel: string; offset: number; epoch: string }) => void;
  /** The subscription ended for good (refused, or ended by the server). */
  onError?: (err: HeraldError) => void;
  /** A saved position to resume from (WebSocket; over SSE it yields onGap). */
  since?: Position;
  /** A subscription token for this channel (WebSocket: subscribe's token; SSE: sub_token), or a function returning one. */
  token?: string | (() => Promise<string> | string);
}

export class Subscription {
  readonly channel: string;
  /** Settles with the first subscription result, or the error that ended it. */
  readonly ready: Promise<SubscribeResult>;
  readonly position: Position | null;
  readonly active: boolean;
  readonly closed: boolean;
  unsubscribe(): void;
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

export interface Clock {
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
  now(): number;
}

export interface HeraldClientOptions {
  /** Herald's base URL (http(s) or ws(s)). Default: the page's location. */
  url?: string;
  /** Default "ws". */
  transport?: 'ws' | 'sse';
  /** Called before every connection attempt and refresh; reason says why. */
  getToken: (ctx: { reason: 'connect' | 'token_expired' | 'refresh' }) => Promise<string> | string;
  /** WebSocket class. Default globalThis.WebSocket. */
  WebSocket?: unknown;
  /** EventSource class (credentials then go in the URL). Default globalThis.EventSource; none: FetchEventSource with headers. */
  EventSource?: unknown;
  /** fetch. Default globalThis.fetch. */
  fetch?: typeof fetch;
  backoff?: BackoffOptions;
  onStateChange?: (change: StateChange) => void;
  /** Exceptions thrown by handlers, and unmatched server errors. Default console.error. */
  onError?: (err: unknown) => void;
  /** WebSocket: refresh in-band after this fraction of the token's remaining life; 0 = only when the server asks. Default 0.8. */
  refreshRatio?: number;
  /** Bound on a connect reply and on publish waiting for a connection, ms. Default 10000. */
  requestTimeoutMs?: number;
  /** Message ids remembered per channel for de-duplication. Default 1000. */
  maxIds?: number;
  /** FetchEventSource: give up a stream silent this long, ms (0 = never). Default 45000. */
  sseIdleTimeoutMs?: number;
  clock?: Clock;
}

export class HeraldClient {
  constructor(options: HeraldClientOptions);
  readonly state: State;
  readonly transport: 'ws' | 'sse';
  /** The error that ended the last connection, or null. */
  readonly lastError: HeraldError | null;
  positions(): Record<string, Position>;
  connect(): Promise<void>;
  close(): void;
  subscribe<D = unknown>(channel: string, handlers?: SubscriptionHandlers<D>): Subscription;
  publish(channel: string, type: string, data: unknown, options?: { schemaVersion?: number }): Promise<{ id: string; offset: number; epoch: string }>;
}

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
