import { type BackoffOptions } from "./backoff.js";
import { type ChosenStatus, type TypedDocumentString } from "./gql/graphql.js";
import { type PlaceMember, type PlaceState } from "./place-map.js";
import { type Presence } from "./presence-map.js";
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
export declare class PresenceError extends Error {
    readonly code: string | null;
    readonly closeCode: number | null;
    constructor(message: string, code?: string | null, closeCode?: number | null);
}
type Document<R, V> = TypedDocumentString<R, V>;
/** One id per tab, kept across reloads and reconnects (sessionStorage is the tab's). */
export declare function tabSessionId(): string;
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
export declare class PresenceClient {
    #private;
    /** What the operations give as userId: null for an end user (their token names them). */
    readonly actingFor: string | null;
    constructor(options: PresenceClientOptions);
    /** The socket's state: for a "reconnecting…" badge. */
    get connection(): ConnectionState;
    /**
     * Why the service refused the latest socket's credentials (closeCode 4403, its reason as
     * message); null once a socket is accepted.
     */
    get refusal(): PresenceError | null;
    /** The signed-in user's id, once a held session told it (null before). */
    get userId(): string | null;
    on<K extends keyof ClientEvents>(event: K, listener: (...args: ClientEvents[K]) => void): () => void;
    /** Keeps the user online while the tab is open: see PresenceHold. */
    holdPresence(options?: HoldOptions): PresenceHold;
    /**
     * A live map of users' presence: given ids, or a user's friends (`{ friendsOf }`, followed as
     * the friend set changes). An end user may follow themselves and their friends.
     */
    followUsers(target: readonly string[] | {
        friendsOf: string;
    }): Follow;
    /** Joins a place with a state the others see, and keeps its member map live. */
    joinPlace(placeId: string, options?: JoinOptions): Place;
    /** The signed-in user's own presence, live, with setters: see MyStatus. */
    myStatus(): MyStatus;
    setStatus(status: ChosenStatus): Promise<Presence>;
    /** text null clears it. */
    setCustomStatus(text: string | null, { emoji, expiresAt }?: {
        emoji?: string | null;
        expiresAt?: string | null;
    }): Promise<Presence>;
    /** Closes the socket and ends everything held on it. */
    dispose(): void;
    /** One query or mutation over the socket; its errors rejected as PresenceError. */
    request<R, V>(document: Document<R, V>, variables: V): Promise<R>;
    /**
     * A subscription kept alive: graphql-ws subscribes it again on every new socket; this
     * subscribes it again, after a backoff, when it ended with a refusal that a retry may cure
     * (UNAVAILABLE, an expired token). `variables` is read at each subscribe.
     */
    keep<R, V>(document: Document<R, V>, variables: V, handlers: KeepHandlers<R>): Kept;
    /** Calls `listener` whenever a socket closes or fails to open: what is held is last known. */
    onDown(listener: () => void): () => void;
    /** Calls `listener` on every acknowledged socket after the first: a reconnect. */
    onReconnect(listener: () => void): () => void;
    learnMe(userId: string): void;
    whenMeKnown(listener: (userId: string) => void): () => void;
}
/** One socket for everything the page does with presence; it reconnects by itself. */
export declare function createPresenceClient(options: PresenceClientOptions): PresenceClient;
declare class Store<S> {
    #private;
    constructor(initial: S);
    /** The current value; a new object after each change, the same one otherwise. */
    getSnapshot: () => S;
    /** Calls `listener` after each change; returns the function that stops it. */
    subscribe: (listener: () => void) => (() => void);
    protected publish(snapshot: S): void;
}
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
export declare class PresenceHold extends Store<HoldState> {
    #private;
    readonly sessionId: string;
    constructor(client: PresenceClient, options: HoldOptions);
    on<K extends keyof HoldEvents>(event: K, listener: (...args: HoldEvents[K]) => void): () => void;
    /** Ends the session (the user goes offline if it was their last). */
    release(): void;
}
/**
 * User id → presence. `stale` is true while the socket is down (the client reconnects): the
 * presences are the last known, not live (someone shown online may have left); false again
 * once they are read afresh.
 */
export type FollowSnapshot = ReadonlyMap<string, Presence> & {
    readonly stale: boolean;
};
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
export declare class Follow extends Store<FollowSnapshot> {
    #private;
    constructor(client: PresenceClient, target: readonly string[] | {
        friendsOf: string;
    });
    /** True while the socket is down: what the map holds is last known, not live. */
    get stale(): boolean;
    get(userId: string): Presence | undefined;
    on<K extends keyof FollowEvents>(event: K, listener: (...args: FollowEvents[K]) => void): () => void;
    stop(): void;
    /** The number of reads made: what a resume saves. */
    get reads(): number;
}
/**
 * The user's own presence; null until a held session told who they are. `stale` is true while
 * the socket is down (the client reconnects): the presence is the last known, not live; false
 * again once it is read afresh.
 */
export type MyStatusSnapshot = (Presence & {
    readonly stale: boolean;
}) | null;
/**
 * The signed-in user's own presence, live (known once a held session says who they are):
 * followUsers of their own id, and what each of its setters answers at once.
 */
export declare class MyStatus extends Store<MyStatusSnapshot> {
    #private;
    constructor(client: PresenceClient);
    /** True while the socket is down: the presence is last known, not live. */
    get stale(): boolean;
    setStatus(status: ChosenStatus): Promise<Presence>;
    setCustomStatus(text: string | null, options?: {
        emoji?: string | null;
        expiresAt?: string | null;
    }): Promise<Presence>;
    stop(): void;
}
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
export declare class Place extends Store<PlaceSnapshot> {
    #private;
    readonly placeId: string;
    readonly sessionId: string;
    constructor(client: PresenceClient, placeId: string, options: JoinOptions);
    /** The members now, by key (PlaceMember.key). */
    get members(): ReadonlyMap<string, PlaceMember>;
    /** The number of placeMembers reads made: what a resume saves. */
    get reads(): number;
    on<K extends keyof PlaceEvents>(event: K, listener: (...args: PlaceEvents[K]) => void): () => void;
    onJoin(listener: (member: PlaceMember) => void): () => void;
    onUpdate(listener: (member: PlaceMember) => void): () => void;
    onLeave(listener: (member: PlaceMember) => void): () => void;
    /** Replaces this session's state: sent at most 20 times a second, the latest always. */
    setState(state: PlaceState): void;
    /** Leaves the place: others get LEFT at once. */
    leave(): void;
}
export {};
