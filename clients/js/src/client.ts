import { createClient, type Client, type ExecutionResult } from "graphql-ws";

import { backoffDelay, type BackoffOptions } from "./backoff.js";
import { Emitter } from "./emitter.js";
import {
  FollowFriendsDocument,
  FollowUsersDocument,
  HoldPlaceDocument,
  HoldPresenceDocument,
  OnlineFriendsDocument,
  PlaceMembersDocument,
  PresencesDocument,
  SetCustomStatusDocument,
  SetPlaceStateDocument,
  SetSessionIdleDocument,
  SetStatusDocument,
  WatchPlaceDocument,
  type ChosenStatus,
  type OnlineFriendsQuery,
  type TypedDocumentString,
} from "./gql/graphql.js";
import { PlaceMap, type PlaceChange, type PlaceMember, type PlaceState } from "./place-map.js";
import { PresenceMap, type Presence, type PresenceEvent } from "./presence-map.js";
import { LatestWinsThrottle } from "./throttle.js";

export type Token = string | null | undefined;

export interface PresenceClientOptions {
  /** The service's WebSocket address, `wss://host/graphql`. */
  url: string;
  /**
   * The user's JWT, or a function that returns it (sync or async): called for every new
   * socket, so a socket closed for an expired token comes back with a fresh one. None in open
   * mode. A token the service refuses is reported at once (`error`, and the handles'
   * snapshots); a function is asked again after a backoff, a fixed token is not retried.
   */
  token?: Token | (() => Token | Promise<Token>);
  /**
   * The user this client acts for, where the token does not say it: a service with no
   * credentials configured (open mode), or a backend token. An end user's JWT names them.
   */
  userId?: string | null;
  /** The waits between reconnects (exponential, with jitter). */
  backoff?: BackoffOptions;
  /** A WebSocket implementation where there is no global one (Node before 22). */
  webSocketImpl?: unknown;
}

/** Why the service ended a held session: `kicked` (its id is revoked) or `replaced`. */
export type EndReason = "kicked" | "replaced";

export type ConnectionState = "connecting" | "connected" | "reconnecting" | "closed";

/** A refusal of the service (`code` is its extensions.code) or a close of the socket. */
export class PresenceError extends Error {
  constructor(
    message: string,
    readonly code: string | null = null,
    readonly closeCode: number | null = null,
  ) {
    super(message);
    this.name = "PresenceError";
  }
}

type Document<R, V> = TypedDocumentString<R, V>;
interface GraphQLErrorLike {
  message: string;
  extensions?: Record<string, unknown>;
}

function asError(reason: unknown): PresenceError {
  if (reason instanceof PresenceError) return reason;
  if (Array.isArray(reason)) {
    const first = reason[0] as GraphQLErrorLike | undefined;
    const code = first?.extensions?.["code"];
    return new PresenceError(first?.message ?? "refused", typeof code === "string" ? code : null);
  }
  if (typeof reason === "object" && reason !== null && "code" in reason && "reason" in reason) {
    const close = reason as { code: number; reason: string };
    return new PresenceError(close.reason || `socket closed (${close.code})`, null, close.code);
  }
  return new PresenceError(reason instanceof Error ? reason.message : String(reason));
}

/** The close of a socket whose credentials the service refused (4403, with its reason). */
const REFUSED = 4403;

function refusal(event: unknown): PresenceError | null {
  if (typeof event !== "object" || event === null || !("code" in event)) return null;
  const close = event as { code: number; reason?: string };
  if (close.code !== REFUSED) return null;
  return new PresenceError(close.reason || "The service refused the credentials.", "UNAUTHENTICATED", REFUSED);
}

/** Whether a subscription that ended with `error` should be subscribed again, later. */
function retriable(error: PresenceError): boolean {
  if (error.closeCode === 4401) return true; // an expired token: the next socket asks afresh
  if (error.closeCode !== null) return false; // graphql-ws retries every other close it may
  if (error.code === null) return true; // the token function failed, the network, ...
  return error.code === "UNAVAILABLE" || error.code === "RATE_LIMITED" || error.code === "INTERNAL";
}

const SESSION_KEY = "gql-presence-client:session";

/** One id per tab, kept across reloads and reconnects (sessionStorage is the tab's). */
export function tabSessionId(): string {
  const fresh = (): string =>
    globalThis.crypto?.randomUUID?.() ?? `tab-${Math.random().toString(36).slice(2)}`;
  try {
    const storage = globalThis.sessionStorage;
    const kept = storage.getItem(SESSION_KEY);
    if (kept) return kept;
    const made = fresh();
    storage.setItem(SESSION_KEY, made);
    return made;
  } catch {
    return fresh(); // no storage (Node, a sandboxed frame)
  }
}

interface Kept {
  stop(): void;
}

interface KeepHandlers<R> {
  next(data: R): void;
  /** A subscription the service ended or refused for good. */
  failed(error: PresenceError): void;
  /** The service completed it (a held session it ended). */
  completed?(): void;
  /** It was subscribed again by this client (not by a reconnect of the socket). */
  restarted?(): void;
  /**
   * The service refused the subscription's cursor (`after`): CURSOR_EXPIRED, or a cursor it
   * does not know. Returns true when the handle dropped its cursor: then it is subscribed again
   * at once without one (and `restarted` is called), and reads afresh.
   */
  expired?(error: PresenceError): boolean;
}

/** The variables of a subscription that resumes: `after`, the cursor of its last event. */
interface Resumable {
  after: string | null;
}

/**
 * Drops a subscription's cursor when the service refused it (CURSOR_EXPIRED: older than the
 * feed keeps; BAD_USER_INPUT: not a cursor of this service, say after its Redis was emptied).
 */
function dropRefusedCursor(variables: Resumable, error: PresenceError): boolean {
  if (variables.after === null) return false;
  if (error.code !== "CURSOR_EXPIRED" && error.code !== "BAD_USER_INPUT") return false;
  variables.after = null;
  return true;
}

// --- the client ---------------------------------------------------------------------------------

export type ClientEvents = {
  connection: [ConnectionState];
  /** Each socket acknowledged: the first, and each after a reconnect. */
  connected: [reconnect: boolean];
  /**
   * A refusal: of a subscription, or of the socket's credentials (closeCode 4403, code
   * UNAUTHENTICATED, the service's reason as message; told once until a socket is accepted).
   */
  error: [PresenceError];
};

export class PresenceClient {
  readonly #socket: Client;
  readonly #backoff: BackoffOptions;
  readonly #events = new Emitter<ClientEvents>();
  #state: ConnectionState = "connecting";
  #connectedBefore = false;
  #me: string | null = null;
  #refusal: PresenceError | null = null;
  readonly #down = new Emitter<{ down: [] }>();
  /** What the operations give as userId: null for an end user (their token names them). */
  readonly actingFor: string | null;
  readonly #meKnown = new Emitter<{ me: [string] }>();

  constructor(options: PresenceClientOptions) {
    this.#backoff = options.backoff ?? {};
    this.actingFor = options.userId ?? null;
    this.#me = this.actingFor;
    const token = options.token;
    // Only a token function may give the service a token that it then accepts.
    const refreshable = typeof token === "function";
    this.#socket = createClient({
      url: options.url,
      lazy: true,
      connectionParams: async () => {
        const value = typeof token === "function" ? await token() : token;
        return value ? { Authorization: `Bearer ${value}` } : {};
      },
      retryAttempts: Number.POSITIVE_INFINITY,
      retryWait: (retries) =>
        new Promise((resolve) => setTimeout(resolve, backoffDelay(retries, this.#backoff))),
      shouldRetry: (reason) => refreshable || refusal(reason) === null,
      ...(options.webSocketImpl ? { webSocketImpl: options.webSocketImpl } : {}),
      on: {
        connecting: (retrying) => this.#setState(retrying ? "reconnecting" : "connecting"),
        connected: () => {
          this.#refusal = null;
          this.#setState("connected");
          const reconnect = this.#connectedBefore;
          this.#connectedBefore = true;
          this.#events.emit("connected", reconnect);
        },
        closed: (event) => {
          const refused = refusal(event);
          if (refused !== null && refused.message !== this.#refusal?.message) {
            this.#events.emit("error", refused);
          }
          if (refused !== null) this.#refusal = refused;
          this.#setState("reconnecting");
          this.#down.emit("down");
        },
      },
    });
  }

  /** The socket's state: for a "reconnecting…" badge. */
  get connection(): ConnectionState {
    return this.#state;
  }

  /**
   * Why the service refused the latest socket's credentials (closeCode 4403, its reason as
   * message); null once a socket is accepted.
   */
  get refusal(): PresenceError | null {
    return this.#refusal;
  }

  /** The signed-in user's id, once a held session told it (null before). */
  get userId(): string | null {
    return this.#me;
  }

  on<K extends keyof ClientEvents>(event: K, listener: (...args: ClientEvents[K]) => void): () => void {
    return this.#events.on(event, listener);
  }

  /** Keeps the user online while the tab is open: see PresenceHold. */
  holdPresence(options: HoldOptions = {}): PresenceHold {
    return new PresenceHold(this, options);
  }

  /**
   * A live map of users' presence: given ids, or a user's friends (`{ friendsOf }`, followed as
   * the friend set changes). An end user may follow themselves and their friends.
   */
  followUsers(target: readonly string[] | { friendsOf: string }): Follow {
    return new Follow(this, target);
  }

  /** Joins a place with a state the others see, and keeps its member map live. */
  joinPlace(placeId: string, options: JoinOptions = {}): Place {
    return new Place(this, placeId, options);
  }

  /** The signed-in user's own presence, live, with setters: see MyStatus. */
  myStatus(): MyStatus {
    return new MyStatus(this);
  }

  async setStatus(status: ChosenStatus): Promise<Presence> {
    const data = await this.request(SetStatusDocument, { userId: this.actingFor, status });
    return data.setStatus;
  }

  /** text null clears it. */
  async setCustomStatus(
    text: string | null,
    { emoji = null, expiresAt = null }: { emoji?: string | null; expiresAt?: string | null } = {},
  ): Promise<Presence> {
    const data = await this.request(SetCustomStatusDocument, {
      userId: this.actingFor,
      text,
      emoji,
      expiresAt,
    });
    return data.setCustomStatus;
  }

  /** Closes the socket and ends everything held on it. */
  dispose(): void {
    this.#setState("closed");
    void this.#socket.dispose();
    this.#events.clear();
    this.#down.clear();
  }

  // -- for the handles of this module --

  /** One query or mutation over the socket; its errors rejected as PresenceError. */
  request<R, V>(document: Document<R, V>, variables: V): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      let settled = false;
      this.#socket.subscribe<R>(
        { query: document.toString(), variables: variables as Record<string, unknown> },
        {
          next: (result: ExecutionResult<R>) => {
            settled = true;
            if (result.errors?.length || result.data == null) reject(asError(result.errors ?? []));
            else resolve(result.data);
          },
          error: (reason) => {
            settled = true;
            reject(asError(reason));
          },
          complete: () => {
            if (!settled) reject(new PresenceError("completed without a result"));
          },
        },
      );
    });
  }

  /**
   * A subscription kept alive: graphql-ws subscribes it again on every new socket; this
   * subscribes it again, after a backoff, when it ended with a refusal that a retry may cure
   * (UNAVAILABLE, an expired token). `variables` is read at each subscribe.
   */
  keep<R, V>(document: Document<R, V>, variables: V, handlers: KeepHandlers<R>): Kept {
    let stopped = false;
    let attempt = 0;
    let unsubscribe: () => void = () => {};
    let timer: ReturnType<typeof setTimeout> | null = null;
    const start = (): void => {
      unsubscribe = this.#socket.subscribe<R>(
        // The same object on every socket: a change of its variables goes with the next one.
        { query: document.toString(), variables: variables as Record<string, unknown> },
        {
          next: (result: ExecutionResult<R>) => {
            if (stopped) return;
            if (result.errors?.length || result.data == null) {
              ended(asError(result.errors ?? []));
              return;
            }
            attempt = 0;
            handlers.next(result.data);
          },
          error: (reason) => ended(asError(reason)),
          complete: () => {
            if (!stopped) handlers.completed?.();
          },
        },
      );
    };
    const ended = (error: PresenceError): void => {
      if (stopped) return;
      unsubscribe();
      if (handlers.expired?.(error)) {
        start();
        handlers.restarted?.();
        return;
      }
      if (!retriable(error)) {
        stopped = true;
        // A refused socket was told when it closed.
        if (error.closeCode !== REFUSED) this.#events.emit("error", error);
        handlers.failed(error);
        return;
      }
      timer = setTimeout(() => {
        timer = null;
        if (stopped) return;
        start();
        handlers.restarted?.();
      }, backoffDelay(attempt++, this.#backoff));
    };
    start();
    return {
      stop: () => {
        stopped = true;
        if (timer !== null) clearTimeout(timer);
        unsubscribe();
      },
    };
  }

  /** Calls `listener` whenever a socket closes or fails to open: what is held is last known. */
  onDown(listener: () => void): () => void {
    return this.#down.on("down", listener);
  }

  /** Calls `listener` on every acknowledged socket after the first: a reconnect. */
  onReconnect(listener: () => void): () => void {
    return this.#events.on("connected", (reconnect) => {
      if (reconnect) listener();
    });
  }

  learnMe(userId: string): void {
    if (this.#me === userId) return;
    this.#me = userId;
    this.#meKnown.emit("me", userId);
  }

  whenMeKnown(listener: (userId: string) => void): () => void {
    if (this.#me !== null) {
      listener(this.#me);
      return () => {};
    }
    return this.#meKnown.on("me", listener);
  }

  #setState(state: ConnectionState): void {
    if (this.#state === state || this.#state === "closed") return;
    this.#state = state;
    this.#events.emit("connection", state);
  }
}

/** One socket for everything the page does with presence; it reconnects by itself. */
export function createPresenceClient(options: PresenceClientOptions): PresenceClient {
  return new PresenceClient(options);
}

// --- a snapshot store, for UIs (React's useSyncExternalStore) ---------------------------------

class Store<S> {
  #snapshot: S;
  readonly #listeners = new Set<() => void>();

  constructor(initial: S) {
    this.#snapshot = initial;
  }

  /** The current value; a new object after each change, the same one otherwise. */
  getSnapshot = (): S => this.#snapshot;

  /** Calls `listener` after each change; returns the function that stops it. */
  subscribe = (listener: () => void): (() => void) => {
    this.#listeners.add(listener);
    return () => {
      this.#listeners.delete(listener);
    };
  };

  protected publish(snapshot: S): void {
    this.#snapshot = snapshot;
    for (const listener of [...this.#listeners]) listener();
  }
}

// --- holdPresence -------------------------------------------------------------------------------

export interface HoldOptions {
  /** The session's id; default one per tab (sessionStorage), the same across reconnects. */
  sessionId?: string;
  /** What the client is ("web"): 1 to 32 characters. */
  device?: string;
  /** Mark the session idle while the tab is hidden (Page Visibility API); default true. */
  idleWhenHidden?: boolean;
}

export interface HoldState {
  /** Held on a socket that is up now. */
  live: boolean;
  idle: boolean;
  /**
   * The socket that held it is down (the client reconnects): live is false, and the service
   * keeps the session only until its lease lapses. False again once it is held anew.
   */
  stale: boolean;
  /** Why the service ended it; null while held. */
  ended: EndReason | null;
  /**
   * The refusal that stopped it (SESSION_REVOKED, FORBIDDEN, ...), or, while the client
   * retries with a token function, the service's refusal of the latest token; null once held.
   */
  error: PresenceError | null;
}

export type HoldEvents = {
  live: [];
  kicked: [];
  replaced: [];
  ended: [EndReason | null, PresenceError | null];
};

/**
 * The user's presence, held by presenceSession for as long as it lasts, through reconnects: one
 * session id for the tab, idle while the tab is hidden (setSessionIdle: the user is AWAY when
 * every session of theirs is). A kick (`kicked`, also a SESSION_REVOKED refusal) or another
 * connection taking the session over (`replaced`) ends it for good: it is not held again.
 */
export class PresenceHold extends Store<HoldState> {
  readonly sessionId: string;
  readonly #client: PresenceClient;
  readonly #events = new Emitter<HoldEvents>();
  readonly #kept: Kept;
  readonly #idleWhenHidden: boolean;
  #idleSent: Promise<void> = Promise.resolve();
  #unlisten: () => void = () => {};
  readonly #undown: () => void;

  constructor(client: PresenceClient, options: HoldOptions) {
    super({ live: false, idle: false, stale: false, ended: null, error: null });
    this.#client = client;
    this.sessionId = options.sessionId ?? tabSessionId();
    this.#idleWhenHidden = options.idleWhenHidden ?? true;
    this.#kept = client.keep(
      HoldPresenceDocument,
      { userId: client.actingFor, sessionId: this.sessionId, device: options.device ?? null },
      {
        next: ({ presenceSession: state }) => {
          if (state.live) {
            client.learnMe(state.userId);
            // A session (re)opened starts active: a hidden tab says so at once.
            this.publish({ ...this.getSnapshot(), live: true, idle: false, stale: false, error: null });
            this.#events.emit("live");
            if (this.#hidden()) this.#sendIdle();
          } else {
            this.#end(state.endReason === "REPLACED" ? "replaced" : "kicked", null);
          }
        },
        failed: (error) =>
          this.#end(error.code === "SESSION_REVOKED" ? "kicked" : null, error),
        completed: () => {
          if (this.getSnapshot().ended === null) this.#end(null, null);
        },
      },
    );
    this.#undown = client.onDown(() => {
      const now = this.getSnapshot();
      if (now.ended !== null) return;
      const error = client.refusal ?? now.error;
      if (now.live || error !== now.error) {
        this.publish({ ...now, live: false, stale: now.live || now.stale, error });
      }
    });
    if (this.#idleWhenHidden && typeof document !== "undefined") {
      const changed = (): void => this.#sendIdle();
      document.addEventListener("visibilitychange", changed);
      this.#unlisten = () => document.removeEventListener("visibilitychange", changed);
    }
  }

  on<K extends keyof HoldEvents>(event: K, listener: (...args: HoldEvents[K]) => void): () => void {
    return this.#events.on(event, listener);
  }

  /** Ends the session (the user goes offline if it was their last). */
  release(): void {
    this.#unlisten();
    this.#undown();
    this.#kept.stop();
    this.publish({ ...this.getSnapshot(), live: false, stale: false });
  }

  #hidden(): boolean {
    return this.#idleWhenHidden && typeof document !== "undefined" && document.hidden;
  }

  // One change at a time, each sending the tab's state when its turn comes: the last sent is
  // the tab's.
  #sendIdle(): void {
    this.#idleSent = this.#idleSent
      .then(async () => {
        if (!this.getSnapshot().live) return;
        const idle = this.#hidden();
        await this.#client.request(SetSessionIdleDocument, {
          userId: this.#client.actingFor,
          sessionId: this.sessionId,
          idle,
        });
        this.publish({ ...this.getSnapshot(), idle });
      })
      .catch(() => {}); // a session that just ended: its end is reported by the subscription
  }

  #end(reason: EndReason | null, error: PresenceError | null): void {
    this.#unlisten();
    this.#undown();
    this.#kept.stop();
    this.publish({ live: false, idle: false, stale: false, ended: reason, error });
    if (reason !== null) this.#events.emit(reason);
    this.#events.emit("ended", reason, error);
  }
}

// --- followUsers --------------------------------------------------------------------------------

/** After a (re)subscribe, the read is made again this much later: see Follow. */
const SETTLE_MS = 1000;

/**
 * User id → presence. `stale` is true while the socket is down (the client reconnects): the
 * presences are the last known, not live (someone shown online may have left); false again
 * once they are read afresh.
 */
export type FollowSnapshot = ReadonlyMap<string, Presence> & { readonly stale: boolean };

export type FollowEvents = {
  change: [Presence, Presence | undefined];
  error: [PresenceError];
};

/**
 * A live map of users to their presence: read (`presences`, or `onlineFriends` for a user's
 * friends) and kept by presenceChanged, subscribed first and read after. presenceChanged sends
 * no message when it is in place, so the read is made once at once and once more SETTLE_MS
 * later: a change between the first read and the service's subscription is not lost.
 *
 * After a reconnect it resumes: presenceChanged is subscribed again with `after`, the cursor of
 * the last event it took, and the service sends the changes missed, then live ones; nothing is
 * read. It reads afresh (as at first) only when it has no cursor (no event came yet), when no
 * read of it has succeeded yet, or when the service refuses the cursor (CURSOR_EXPIRED: older
 * than the feed keeps, or too many changes behind). For `friendsOf`, a friend added while the
 * socket was down shows at their next change (as one added while it is up does).
 */
export class Follow extends Store<FollowSnapshot> {
  readonly #client: PresenceClient;
  readonly #target: readonly string[] | { friendsOf: string };
  readonly #map: PresenceMap;
  readonly #events = new Emitter<FollowEvents>();
  readonly #kept: Kept;
  readonly #unlisten: () => void;
  readonly #undown: () => void;
  #settle: ReturnType<typeof setTimeout> | null = null;
  #stopped = false;
  #stale = false;
  #reads = 0;
  /** A read has succeeded: with the events since, the map is whole. */
  #whole = false;
  readonly #resume: Resumable = { after: null };

  constructor(client: PresenceClient, target: readonly string[] | { friendsOf: string }) {
    super(Object.assign(new Map<string, Presence>(), { stale: false }));
    this.#client = client;
    this.#target = Array.isArray(target) ? [...(target as readonly string[])] : target;
    this.#map = new PresenceMap((presence, previous) => {
      this.#publish();
      this.#events.emit("change", presence, previous);
    });
    const handlers: KeepHandlers<{ presenceChanged: PresenceEvent }> = {
      next: ({ presenceChanged }) => {
        this.#map.applyEvent(presenceChanged);
        this.#resume.after = presenceChanged.cursor ?? null;
      },
      failed: (error) => this.#events.emit("error", error),
      restarted: () => this.#resumeOrSync(),
      expired: (error) => dropRefusedCursor(this.#resume, error),
    };
    const friendsOf = "friendsOf" in this.#target ? this.#target.friendsOf : null;
    // One object for every subscribe, on every socket: each takes the cursor it holds then.
    const resume = this.#resume;
    this.#kept =
      friendsOf !== null
        ? client.keep(FollowFriendsDocument, Object.assign(resume, { friendsOf }), handlers)
        : client.keep(
            FollowUsersDocument,
            Object.assign(resume, { userIds: [...(this.#target as string[])] }),
            handlers,
          );
    this.#unlisten = client.onReconnect(() => this.#resumeOrSync());
    this.#undown = client.onDown(() => {
      if (this.#stale || this.#stopped || this.getSnapshot().size === 0) return;
      this.#stale = true;
      this.#publish();
    });
    this.#sync();
  }

  /** True while the socket is down: what the map holds is last known, not live. */
  get stale(): boolean {
    return this.#stale;
  }

  get(userId: string): Presence | undefined {
    return this.#map.get(userId);
  }

  on<K extends keyof FollowEvents>(event: K, listener: (...args: FollowEvents[K]) => void): () => void {
    return this.#events.on(event, listener);
  }

  stop(): void {
    this.#stopped = true;
    this.#unlisten();
    this.#undown();
    this.#kept.stop();
    if (this.#settle !== null) clearTimeout(this.#settle);
  }

  #publish(): void {
    this.publish(Object.assign(this.#map.snapshot(), { stale: this.#stale }));
  }

  /** A read ended: what the map holds is live again, if the socket that read it is up. */
  #fresh(): void {
    if (!this.#stale || this.#client.connection !== "connected") return;
    this.#stale = false;
    this.#publish();
  }

  /** The number of reads made: what a resume saves. */
  get reads(): number {
    return this.#reads;
  }

  /** Subscribed again: resumed after its cursor, or read afresh when it cannot be. */
  #resumeOrSync(): void {
    if (this.#resume.after === null || !this.#whole) {
      this.#sync();
      return;
    }
    // The changes missed come as events: what the map holds is live once the socket is up.
    this.#fresh();
  }

  /** Reads now, and again once the subscription has surely been made. */
  #sync(): void {
    void this.#read();
    if (this.#settle !== null) clearTimeout(this.#settle);
    this.#settle = setTimeout(() => {
      this.#settle = null;
      void this.#read();
    }, SETTLE_MS);
  }

  async #read(): Promise<void> {
    if (this.#stopped) return;
    const read = ++this.#reads;
    this.#map.beginRead();
    try {
      const target = this.#target;
      if ("friendsOf" in target) {
        const nodes: Presence[] = [];
        let after: string | null = null;
        for (;;) {
          const answer: OnlineFriendsQuery = await this.#client.request(OnlineFriendsDocument, {
            userId: target.friendsOf,
            after,
          });
          const page = answer.onlineFriends;
          nodes.push(...page.nodes);
          if (!page.pageInfo.hasNextPage || page.pageInfo.endCursor === null) break;
          after = page.pageInfo.endCursor;
        }
        if (read === this.#reads) {
          this.#map.endRead(nodes, { absentAreOffline: true });
          this.#whole = true;
          this.#fresh();
        }
      } else {
        const nodes: Presence[] = [];
        for (let i = 0; i < target.length; i += 1000) {
          const userIds = target.slice(i, i + 1000);
          nodes.push(...(await this.#client.request(PresencesDocument, { userIds })).presences);
        }
        if (read === this.#reads) {
          this.#map.endRead(nodes);
          this.#whole = true;
          this.#fresh();
        }
      }
    } catch (error) {
      if (read === this.#reads) this.#map.abortRead();
      this.#events.emit("error", asError(error));
    }
  }
}

// --- myStatus -----------------------------------------------------------------------------------

/**
 * The user's own presence; null until a held session told who they are. `stale` is true while
 * the socket is down (the client reconnects): the presence is the last known, not live; false
 * again once it is read afresh.
 */
export type MyStatusSnapshot = (Presence & { readonly stale: boolean }) | null;

/**
 * The signed-in user's own presence, live (known once a held session says who they are):
 * followUsers of their own id, and what each of its setters answers at once.
 */
export class MyStatus extends Store<MyStatusSnapshot> {
  readonly #client: PresenceClient;
  #follow: Follow | null = null;
  #unfollow: () => void = () => {};
  readonly #unlisten: () => void;
  #stopped = false;

  constructor(client: PresenceClient) {
    super(null);
    this.#client = client;
    this.#unlisten = client.whenMeKnown((userId) => {
      this.#unfollow();
      this.#follow?.stop();
      const follow = client.followUsers([userId]);
      this.#follow = follow;
      // The follow publishes when it turns stale or fresh, as well as on a change.
      this.#unfollow = follow.subscribe(() => {
        const presence = follow.get(userId);
        if (presence !== undefined) this.#publish(presence);
      });
    });
  }

  /** True while the socket is down: the presence is last known, not live. */
  get stale(): boolean {
    return this.getSnapshot()?.stale ?? false;
  }

  async setStatus(status: ChosenStatus): Promise<Presence> {
    return this.#answered(await this.#client.setStatus(status));
  }

  async setCustomStatus(
    text: string | null,
    options?: { emoji?: string | null; expiresAt?: string | null },
  ): Promise<Presence> {
    return this.#answered(await this.#client.setCustomStatus(text, options));
  }

  stop(): void {
    this.#stopped = true;
    this.#unlisten();
    this.#unfollow();
    this.#follow?.stop();
  }

  #answered(presence: Presence): Presence {
    if (!this.#stopped) this.#publish(presence);
    return presence;
  }

  #publish(presence: Presence): void {
    this.publish({ ...presence, stale: this.#follow?.stale ?? false });
  }
}

// --- joinPlace ----------------------------------------------------------------------------------

export interface JoinOptions {
  /** The session's state in the place at first (a name, a color). */
  state?: PlaceState | null;
  /** The session's id; default the tab's. */
  sessionId?: string;
  /** The most setState calls sent per second (latest wins); default 20. */
  statesPerSecond?: number;
}

export interface PlaceSnapshot {
  members: readonly PlaceMember[];
  /** This session is held in the place, on a socket that is up now. */
  live: boolean;
  /**
   * The socket is down (the client reconnects): `members` are the last known, not live
   * (someone shown may have left). False again once the place is read afresh.
   */
  stale: boolean;
  ended: EndReason | null;
  /**
   * The refusal that ended it, or, while the client retries with a token function, the
   * service's refusal of the latest token; null once the socket is accepted.
   */
  error: PresenceError | null;
}

export type PlaceEvents = {
  join: [PlaceMember];
  update: [PlaceMember];
  leave: [PlaceMember];
  live: [];
  kicked: [];
  replaced: [];
  ended: [EndReason | null, PresenceError | null];
  error: [PresenceError];
};

/** How long a resync waits for the first event of the new subscription before it reads. */
const RESYNC_WAIT_MS = 1000;

/**
 * This tab in a place (placeSession, with its state) and the place's members (placeChanged:
 * who is there, then every change), kept through reconnects: after each, placeChanged resumes
 * after the cursor of its last event, and the changes missed (who left meanwhile included)
 * come as events, with nothing read. With no cursor (no event came yet), before its first
 * placeMembers read has succeeded, or when the service refuses the cursor (CURSOR_EXPIRED), the
 * new subscription's first events and a placeMembers read replace the map instead, and who
 * left meanwhile leaves it (PlaceMap). `setState` sends at most `statesPerSecond` states a
 * second, the latest always.
 */
export class Place extends Store<PlaceSnapshot> {
  readonly placeId: string;
  readonly sessionId: string;
  readonly #client: PresenceClient;
  readonly #map = new PlaceMap();
  readonly #events = new Emitter<PlaceEvents>();
  readonly #holdVariables: {
    placeId: string;
    userId: string | null;
    sessionId: string;
    state: PlaceState | null;
  };
  readonly #hold: Kept;
  readonly #watch: Kept;
  readonly #throttle: LatestWinsThrottle<PlaceState>;
  readonly #unlisten: () => void;
  readonly #undown: () => void;
  #live = false;
  #stale = false;
  #ended: EndReason | null = null;
  #error: PresenceError | null = null;
  #refusal: PresenceError | null = null;
  #firstEvent: (() => void) | null = null;
  #syncs = 0;
  #reads = 0;
  /** A placeMembers read has succeeded: with the events since, the map is whole. */
  #whole = false;
  readonly #resume: Resumable & { placeId: string };

  constructor(client: PresenceClient, placeId: string, options: JoinOptions) {
    super({ members: [], live: false, stale: false, ended: null, error: null });
    this.#client = client;
    this.placeId = placeId;
    this.sessionId = options.sessionId ?? tabSessionId();
    this.#holdVariables = {
      placeId,
      userId: client.actingFor,
      sessionId: this.sessionId,
      state: options.state ?? null,
    };
    this.#throttle = new LatestWinsThrottle(
      (state) => this.#sendState(state),
      1000 / (options.statesPerSecond ?? 20),
    );
    // One object for every subscribe, on every socket: each takes the cursor it holds then.
    this.#resume = { placeId, after: null };
    this.#watch = client.keep(WatchPlaceDocument, this.#resume, {
      next: ({ placeChanged }) => {
        const change = this.#map.apply(placeChanged);
        this.#resume.after = placeChanged.cursor ?? null;
        this.#firstEvent?.();
        if (change) this.#changed([change]);
      },
      failed: (error) => this.#stop(null, error),
      restarted: () => this.#resumeOrResync(),
      expired: (error) => dropRefusedCursor(this.#resume, error),
    });
    this.#hold = client.keep(HoldPlaceDocument, this.#holdVariables, {
      next: ({ placeSession: state }) => {
        if (state.live) {
          client.learnMe(state.userId);
          this.#live = true;
          this.#refusal = null;
          this.#publish();
          this.#events.emit("live");
          // A state set while the session was being (re)opened went with the subscribe, or
          // waits in the throttle, which now may send it.
        } else {
          this.#stop(state.endReason === "REPLACED" ? "replaced" : "kicked", null);
        }
      },
      failed: (error) => this.#stop(error.code === "SESSION_REVOKED" ? "kicked" : null, error),
      completed: () => {
        if (this.#ended === null && this.#live) this.#stop(null, null);
      },
    });
    this.#unlisten = client.onReconnect(() => {
      this.#live = false;
      this.#refusal = null;
      this.#publish();
      this.#resumeOrResync();
    });
    this.#undown = client.onDown(() => {
      const refusal = client.refusal;
      if (!this.#live && this.#refusal === refusal && (this.#stale || this.#map.members.size === 0)) {
        return;
      }
      this.#stale ||= this.#live || this.#map.members.size > 0;
      this.#live = false;
      this.#refusal = refusal;
      this.#publish();
    });
    void this.#resync();
  }

  /** The members now, by key (PlaceMember.key). */
  get members(): ReadonlyMap<string, PlaceMember> {
    return this.#map.members;
  }

  /** The number of placeMembers reads made: what a resume saves. */
  get reads(): number {
    return this.#reads;
  }

  on<K extends keyof PlaceEvents>(event: K, listener: (...args: PlaceEvents[K]) => void): () => void {
    return this.#events.on(event, listener);
  }

  onJoin(listener: (member: PlaceMember) => void): () => void {
    return this.on("join", listener);
  }

  onUpdate(listener: (member: PlaceMember) => void): () => void {
    return this.on("update", listener);
  }

  onLeave(listener: (member: PlaceMember) => void): () => void {
    return this.on("leave", listener);
  }

  /** Replaces this session's state: sent at most 20 times a second, the latest always. */
  setState(state: PlaceState): void {
    if (this.#ended !== null || this.#error !== null) return;
    this.#holdVariables.state = state; // a rejoin after a reconnect brings the latest
    this.#throttle.push(state);
  }

  /** Leaves the place: others get LEFT at once. */
  leave(): void {
    this.#stop(null, null);
  }

  #sendState(state: PlaceState): void {
    if (!this.#live) return; // it goes with the placeSession when it is opened again
    this.#client
      .request(SetPlaceStateDocument, {
        placeId: this.placeId,
        userId: this.#client.actingFor,
        sessionId: this.sessionId,
        state,
      })
      .catch((error: unknown) => this.#events.emit("error", asError(error)));
  }

  /** Subscribed again: resumed after its cursor, or read afresh when it cannot be. */
  #resumeOrResync(): void {
    if (this.#resume.after === null || !this.#whole) {
      void this.#resync();
      return;
    }
    // The changes missed come as events: the members are live once the socket is up.
    this.#syncs++; // a resync still waiting is not needed any more
    this.#map.keepAfterFailedResync();
    if (this.#client.connection === "connected" && this.#stale) {
      this.#stale = false;
      this.#publish();
    }
  }

  async #resync(): Promise<void> {
    const sync = ++this.#syncs;
    this.#map.beginResync();
    // Read only once the new subscription is surely made: after its first event, or a while.
    await new Promise<void>((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        if (this.#firstEvent === done) this.#firstEvent = null;
        resolve();
      };
      const timer = setTimeout(done, RESYNC_WAIT_MS);
      this.#firstEvent = done;
    });
    if (sync !== this.#syncs || this.#ended !== null) return;
    try {
      this.#reads++;
      const read = await this.#client.request(PlaceMembersDocument, { placeId: this.placeId });
      if (sync !== this.#syncs || !this.#map.resyncing) return;
      const changes = this.#map.endResync(read.placeMembers.nodes);
      this.#whole = true;
      if (this.#client.connection === "connected") this.#stale = false;
      this.#changed(changes);
      if (changes.length === 0) this.#publish();
    } catch (error) {
      this.#events.emit("error", asError(error));
      // No read: the events since the resync began, and the members before it, stand.
      if (sync === this.#syncs) this.#map.keepAfterFailedResync();
    }
  }

  #changed(changes: readonly PlaceChange[]): void {
    if (changes.length === 0) return;
    this.#publish();
    for (const change of changes) this.#events.emit(change.kind, change.member);
  }

  #publish(): void {
    this.publish({
      members: [...this.#map.members.values()],
      live: this.#live,
      stale: this.#stale,
      ended: this.#ended,
      error: this.#error ?? this.#refusal,
    });
  }

  #stop(reason: EndReason | null, error: PresenceError | null): void {
    if (this.#ended !== null || this.#error !== null) return;
    this.#ended = reason;
    this.#error = error;
    this.#live = false;
    this.#stale = false;
    this.#syncs++;
    this.#unlisten();
    this.#undown();
    this.#throttle.cancel();
    this.#hold.stop();
    this.#watch.stop();
    this.#changed(this.#map.clear());
    this.#publish();
    if (reason !== null) this.#events.emit(reason);
    this.#events.emit("ended", reason, error);
  }
}
