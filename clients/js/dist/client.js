import { createClient } from "graphql-ws";
import { backoffDelay } from "./backoff.js";
import { Emitter } from "./emitter.js";
import { FollowFriendsDocument, FollowUsersDocument, HoldPlaceDocument, HoldPresenceDocument, OnlineFriendsDocument, PlaceMembersDocument, PresencesDocument, SetCustomStatusDocument, SetPlaceStateDocument, SetSessionIdleDocument, SetStatusDocument, WatchPlaceDocument, } from "./gql/graphql.js";
import { PlaceMap } from "./place-map.js";
import { PresenceMap } from "./presence-map.js";
import { LatestWinsThrottle } from "./throttle.js";
/** A refusal of the service (`code` is its extensions.code) or a close of the socket. */
export class PresenceError extends Error {
    code;
    closeCode;
    constructor(message, code = null, closeCode = null) {
        super(message);
        this.code = code;
        this.closeCode = closeCode;
        this.name = "PresenceError";
    }
}
function asError(reason) {
    if (reason instanceof PresenceError)
        return reason;
    if (Array.isArray(reason)) {
        const first = reason[0];
        const code = first?.extensions?.["code"];
        return new PresenceError(first?.message ?? "refused", typeof code === "string" ? code : null);
    }
    if (typeof reason === "object" && reason !== null && "code" in reason && "reason" in reason) {
        const close = reason;
        return new PresenceError(close.reason || `socket closed (${close.code})`, null, close.code);
    }
    return new PresenceError(reason instanceof Error ? reason.message : String(reason));
}
/** The close of a socket whose credentials the service refused (4403, with its reason). */
const REFUSED = 4403;
function refusal(event) {
    if (typeof event !== "object" || event === null || !("code" in event))
        return null;
    const close = event;
    if (close.code !== REFUSED)
        return null;
    return new PresenceError(close.reason || "The service refused the credentials.", "UNAUTHENTICATED", REFUSED);
}
/** Whether a subscription that ended with `error` should be subscribed again, later. */
function retriable(error) {
    if (error.closeCode === 4401)
        return true; // an expired token: the next socket asks afresh
    if (error.closeCode !== null)
        return false; // graphql-ws retries every other close it may
    if (error.code === null)
        return true; // the token function failed, the network, ...
    return error.code === "UNAVAILABLE" || error.code === "RATE_LIMITED" || error.code === "INTERNAL";
}
const SESSION_KEY = "gql-presence-client:session";
/** One id per tab, kept across reloads and reconnects (sessionStorage is the tab's). */
export function tabSessionId() {
    const fresh = () => globalThis.crypto?.randomUUID?.() ?? `tab-${Math.random().toString(36).slice(2)}`;
    try {
        const storage = globalThis.sessionStorage;
        const kept = storage.getItem(SESSION_KEY);
        if (kept)
            return kept;
        const made = fresh();
        storage.setItem(SESSION_KEY, made);
        return made;
    }
    catch {
        return fresh(); // no storage (Node, a sandboxed frame)
    }
}
/**
 * Drops a subscription's cursor when the service refused it (CURSOR_EXPIRED: older than the
 * feed keeps; BAD_USER_INPUT: not a cursor of this service, say after its Redis was emptied).
 */
function dropRefusedCursor(variables, error) {
    if (variables.after === null)
        return false;
    if (error.code !== "CURSOR_EXPIRED" && error.code !== "BAD_USER_INPUT")
        return false;
    variables.after = null;
    return true;
}
export class PresenceClient {
    #socket;
    #backoff;
    #events = new Emitter();
    #state = "connecting";
    #connectedBefore = false;
    #me = null;
    #refusal = null;
    #down = new Emitter();
    /** What the operations give as userId: null for an end user (their token names them). */
    actingFor;
    #meKnown = new Emitter();
    constructor(options) {
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
            retryWait: (retries) => new Promise((resolve) => setTimeout(resolve, backoffDelay(retries, this.#backoff))),
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
                    if (refused !== null)
                        this.#refusal = refused;
                    this.#setState("reconnecting");
                    this.#down.emit("down");
                },
            },
        });
    }
    /** The socket's state: for a "reconnecting…" badge. */
    get connection() {
        return this.#state;
    }
    /**
     * Why the service refused the latest socket's credentials (closeCode 4403, its reason as
     * message); null once a socket is accepted.
     */
    get refusal() {
        return this.#refusal;
    }
    /** The signed-in user's id, once a held session told it (null before). */
    get userId() {
        return this.#me;
    }
    on(event, listener) {
        return this.#events.on(event, listener);
    }
    /** Keeps the user online while the tab is open: see PresenceHold. */
    holdPresence(options = {}) {
        return new PresenceHold(this, options);
    }
    /**
     * A live map of users' presence: given ids, or a user's friends (`{ friendsOf }`, followed as
     * the friend set changes). An end user may follow themselves and their friends.
     */
    followUsers(target) {
        return new Follow(this, target);
    }
    /** Joins a place with a state the others see, and keeps its member map live. */
    joinPlace(placeId, options = {}) {
        return new Place(this, placeId, options);
    }
    /** The signed-in user's own presence, live, with setters: see MyStatus. */
    myStatus() {
        return new MyStatus(this);
    }
    async setStatus(status) {
        const data = await this.request(SetStatusDocument, { userId: this.actingFor, status });
        return data.setStatus;
    }
    /** text null clears it. */
    async setCustomStatus(text, { emoji = null, expiresAt = null } = {}) {
        const data = await this.request(SetCustomStatusDocument, {
            userId: this.actingFor,
            text,
            emoji,
            expiresAt,
        });
        return data.setCustomStatus;
    }
    /** Closes the socket and ends everything held on it. */
    dispose() {
        this.#setState("closed");
        void this.#socket.dispose();
        this.#events.clear();
        this.#down.clear();
    }
    // -- for the handles of this module --
    /** One query or mutation over the socket; its errors rejected as PresenceError. */
    request(document, variables) {
        return new Promise((resolve, reject) => {
            let settled = false;
            this.#socket.subscribe({ query: document.toString(), variables: variables }, {
                next: (result) => {
                    settled = true;
                    if (result.errors?.length || result.data == null)
                        reject(asError(result.errors ?? []));
                    else
                        resolve(result.data);
                },
                error: (reason) => {
                    settled = true;
                    reject(asError(reason));
                },
                complete: () => {
                    if (!settled)
                        reject(new PresenceError("completed without a result"));
                },
            });
        });
    }
    /**
     * A subscription kept alive: graphql-ws subscribes it again on every new socket; this
     * subscribes it again, after a backoff, when it ended with a refusal that a retry may cure
     * (UNAVAILABLE, an expired token). `variables` is read at each subscribe.
     */
    keep(document, variables, handlers) {
        let stopped = false;
        let attempt = 0;
        let unsubscribe = () => { };
        let timer = null;
        const start = () => {
            unsubscribe = this.#socket.subscribe(
            // The same object on every socket: a change of its variables goes with the next one.
            { query: document.toString(), variables: variables }, {
                next: (result) => {
                    if (stopped)
                        return;
                    if (result.errors?.length || result.data == null) {
                        ended(asError(result.errors ?? []));
                        return;
                    }
                    attempt = 0;
                    handlers.next(result.data);
                },
                error: (reason) => ended(asError(reason)),
                complete: () => {
                    if (!stopped)
                        handlers.completed?.();
                },
            });
        };
        const ended = (error) => {
            if (stopped)
                return;
            unsubscribe();
            if (handlers.expired?.(error)) {
                start();
                handlers.restarted?.();
                return;
            }
            if (!retriable(error)) {
                stopped = true;
                // A refused socket was told when it closed.
                if (error.closeCode !== REFUSED)
                    this.#events.emit("error", error);
                handlers.failed(error);
                return;
            }
            timer = setTimeout(() => {
                timer = null;
                if (stopped)
                    return;
                start();
                handlers.restarted?.();
            }, backoffDelay(attempt++, this.#backoff));
        };
        start();
        return {
            stop: () => {
                stopped = true;
                if (timer !== null)
                    clearTimeout(timer);
                unsubscribe();
            },
        };
    }
    /** Calls `listener` whenever a socket closes or fails to open: what is held is last known. */
    onDown(listener) {
        return this.#down.on("down", listener);
    }
    /** Calls `listener` on every acknowledged socket after the first: a reconnect. */
    onReconnect(listener) {
        return this.#events.on("connected", (reconnect) => {
            if (reconnect)
                listener();
        });
    }
    learnMe(userId) {
        if (this.#me === userId)
            return;
        this.#me = userId;
        this.#meKnown.emit("me", userId);
    }
    whenMeKnown(listener) {
        if (this.#me !== null) {
            listener(this.#me);
            return () => { };
        }
        return this.#meKnown.on("me", listener);
    }
    #setState(state) {
        if (this.#state === state || this.#state === "closed")
            return;
        this.#state = state;
        this.#events.emit("connection", state);
    }
}
/** One socket for everything the page does with presence; it reconnects by itself. */
export function createPresenceClient(options) {
    return new PresenceClient(options);
}
// --- a snapshot store, for UIs (React's useSyncExternalStore) ---------------------------------
class Store {
    #snapshot;
    #listeners = new Set();
    constructor(initial) {
        this.#snapshot = initial;
    }
    /** The current value; a new object after each change, the same one otherwise. */
    getSnapshot = () => this.#snapshot;
    /** Calls `listener` after each change; returns the function that stops it. */
    subscribe = (listener) => {
        this.#listeners.add(listener);
        return () => {
            this.#listeners.delete(listener);
        };
    };
    publish(snapshot) {
        this.#snapshot = snapshot;
        for (const listener of [...this.#listeners])
            listener();
    }
}
/**
 * The user's presence, held by presenceSession for as long as it lasts, through reconnects: one
 * session id for the tab, idle while the tab is hidden (setSessionIdle: the user is AWAY when
 * every session of theirs is). A kick (`kicked`, also a SESSION_REVOKED refusal) or another
 * connection taking the session over (`replaced`) ends it for good: it is not held again.
 */
export class PresenceHold extends Store {
    sessionId;
    #client;
    #events = new Emitter();
    #kept;
    #idleWhenHidden;
    #idleSent = Promise.resolve();
    #unlisten = () => { };
    #undown;
    constructor(client, options) {
        super({ live: false, idle: false, stale: false, ended: null, error: null });
        this.#client = client;
        this.sessionId = options.sessionId ?? tabSessionId();
        this.#idleWhenHidden = options.idleWhenHidden ?? true;
        this.#kept = client.keep(HoldPresenceDocument, { userId: client.actingFor, sessionId: this.sessionId, device: options.device ?? null }, {
            next: ({ presenceSession: state }) => {
                if (state.live) {
                    client.learnMe(state.userId);
                    // A session (re)opened starts active: a hidden tab says so at once.
                    this.publish({ ...this.getSnapshot(), live: true, idle: false, stale: false, error: null });
                    this.#events.emit("live");
                    if (this.#hidden())
                        this.#sendIdle();
                }
                else {
                    this.#end(state.endReason === "REPLACED" ? "replaced" : "kicked", null);
                }
            },
            failed: (error) => this.#end(error.code === "SESSION_REVOKED" ? "kicked" : null, error),
            completed: () => {
                if (this.getSnapshot().ended === null)
                    this.#end(null, null);
            },
        });
        this.#undown = client.onDown(() => {
            const now = this.getSnapshot();
            if (now.ended !== null)
                return;
            const error = client.refusal ?? now.error;
            if (now.live || error !== now.error) {
                this.publish({ ...now, live: false, stale: now.live || now.stale, error });
            }
        });
        if (this.#idleWhenHidden && typeof document !== "undefined") {
            const changed = () => this.#sendIdle();
            document.addEventListener("visibilitychange", changed);
            this.#unlisten = () => document.removeEventListener("visibilitychange", changed);
        }
    }
    on(event, listener) {
        return this.#events.on(event, listener);
    }
    /** Ends the session (the user goes offline if it was their last). */
    release() {
        this.#unlisten();
        this.#undown();
        this.#kept.stop();
        this.publish({ ...this.getSnapshot(), live: false, stale: false });
    }
    #hidden() {
        return this.#idleWhenHidden && typeof document !== "undefined" && document.hidden;
    }
    // One change at a time, each sending the tab's state when its turn comes: the last sent is
    // the tab's.
    #sendIdle() {
        this.#idleSent = this.#idleSent
            .then(async () => {
            if (!this.getSnapshot().live)
                return;
            const idle = this.#hidden();
            await this.#client.request(SetSessionIdleDocument, {
                userId: this.#client.actingFor,
                sessionId: this.sessionId,
                idle,
            });
            this.publish({ ...this.getSnapshot(), idle });
        })
            .catch(() => { }); // a session that just ended: its end is reported by the subscription
    }
    #end(reason, error) {
        this.#unlisten();
        this.#undown();
        this.#kept.stop();
        this.publish({ live: false, idle: false, stale: false, ended: reason, error });
        if (reason !== null)
            this.#events.emit(reason);
        this.#events.emit("ended", reason, error);
    }
}
// --- followUsers --------------------------------------------------------------------------------
/** After a (re)subscribe, the read is made again this much later: see Follow. */
const SETTLE_MS = 1000;
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
export class Follow extends Store {
    #client;
    #target;
    #map;
    #events = new Emitter();
    #kept;
    #unlisten;
    #undown;
    #settle = null;
    #stopped = false;
    #stale = false;
    #reads = 0;
    /** A read has succeeded: with the events since, the map is whole. */
    #whole = false;
    #resume = { after: null };
    constructor(client, target) {
        super(Object.assign(new Map(), { stale: false }));
        this.#client = client;
        this.#target = Array.isArray(target) ? [...target] : target;
        this.#map = new PresenceMap((presence, previous) => {
            this.#publish();
            this.#events.emit("change", presence, previous);
        });
        const handlers = {
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
                : client.keep(FollowUsersDocument, Object.assign(resume, { userIds: [...this.#target] }), handlers);
        this.#unlisten = client.onReconnect(() => this.#resumeOrSync());
        this.#undown = client.onDown(() => {
            if (this.#stale || this.#stopped || this.getSnapshot().size === 0)
                return;
            this.#stale = true;
            this.#publish();
        });
        this.#sync();
    }
    /** True while the socket is down: what the map holds is last known, not live. */
    get stale() {
        return this.#stale;
    }
    get(userId) {
        return this.#map.get(userId);
    }
    on(event, listener) {
        return this.#events.on(event, listener);
    }
    stop() {
        this.#stopped = true;
        this.#unlisten();
        this.#undown();
        this.#kept.stop();
        if (this.#settle !== null)
            clearTimeout(this.#settle);
    }
    #publish() {
        this.publish(Object.assign(this.#map.snapshot(), { stale: this.#stale }));
    }
    /** A read ended: what the map holds is live again, if the socket that read it is up. */
    #fresh() {
        if (!this.#stale || this.#client.connection !== "connected")
            return;
        this.#stale = false;
        this.#publish();
    }
    /** The number of reads made: what a resume saves. */
    get reads() {
        return this.#reads;
    }
    /** Subscribed again: resumed after its cursor, or read afresh when it cannot be. */
    #resumeOrSync() {
        if (this.#resume.after === null || !this.#whole) {
            this.#sync();
            return;
        }
        // The changes missed come as events: what the map holds is live once the socket is up.
        this.#fresh();
    }
    /** Reads now, and again once the subscription has surely been made. */
    #sync() {
        void this.#read();
        if (this.#settle !== null)
            clearTimeout(this.#settle);
        this.#settle = setTimeout(() => {
            this.#settle = null;
            void this.#read();
        }, SETTLE_MS);
    }
    async #read() {
        if (this.#stopped)
            return;
        const read = ++this.#reads;
        this.#map.beginRead();
        try {
            const target = this.#target;
            if ("friendsOf" in target) {
                const nodes = [];
                let after = null;
                for (;;) {
                    const answer = await this.#client.request(OnlineFriendsDocument, {
                        userId: target.friendsOf,
                        after,
                    });
                    const page = answer.onlineFriends;
                    nodes.push(...page.nodes);
                    if (!page.pageInfo.hasNextPage || page.pageInfo.endCursor === null)
                        break;
                    after = page.pageInfo.endCursor;
                }
                if (read === this.#reads) {
                    this.#map.endRead(nodes, { absentAreOffline: true });
                    this.#whole = true;
                    this.#fresh();
                }
            }
            else {
                const nodes = [];
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
        }
        catch (error) {
            if (read === this.#reads)
                this.#map.abortRead();
            this.#events.emit("error", asError(error));
        }
    }
}
/**
 * The signed-in user's own presence, live (known once a held session says who they are):
 * followUsers of their own id, and what each of its setters answers at once.
 */
export class MyStatus extends Store {
    #client;
    #follow = null;
    #unfollow = () => { };
    #unlisten;
    #stopped = false;
    constructor(client) {
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
                if (presence !== undefined)
                    this.#publish(presence);
            });
        });
    }
    /** True while the socket is down: the presence is last known, not live. */
    get stale() {
        return this.getSnapshot()?.stale ?? false;
    }
    async setStatus(status) {
        return this.#answered(await this.#client.setStatus(status));
    }
    async setCustomStatus(text, options) {
        return this.#answered(await this.#client.setCustomStatus(text, options));
    }
    stop() {
        this.#stopped = true;
        this.#unlisten();
        this.#unfollow();
        this.#follow?.stop();
    }
    #answered(presence) {
        if (!this.#stopped)
            this.#publish(presence);
        return presence;
    }
    #publish(presence) {
        this.publish({ ...presence, stale: this.#follow?.stale ?? false });
    }
}
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
export class Place extends Store {
    placeId;
    sessionId;
    #client;
    #map = new PlaceMap();
    #events = new Emitter();
    #holdVariables;
    #hold;
    #watch;
    #throttle;
    #unlisten;
    #undown;
    #live = false;
    #stale = false;
    #ended = null;
    #error = null;
    #refusal = null;
    #firstEvent = null;
    #syncs = 0;
    #reads = 0;
    /** A placeMembers read has succeeded: with the events since, the map is whole. */
    #whole = false;
    #resume;
    constructor(client, placeId, options) {
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
        this.#throttle = new LatestWinsThrottle((state) => this.#sendState(state), 1000 / (options.statesPerSecond ?? 20));
        // One object for every subscribe, on every socket: each takes the cursor it holds then.
        this.#resume = { placeId, after: null };
        this.#watch = client.keep(WatchPlaceDocument, this.#resume, {
            next: ({ placeChanged }) => {
                const change = this.#map.apply(placeChanged);
                this.#resume.after = placeChanged.cursor ?? null;
                this.#firstEvent?.();
                if (change)
                    this.#changed([change]);
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
                }
                else {
                    this.#stop(state.endReason === "REPLACED" ? "replaced" : "kicked", null);
                }
            },
            failed: (error) => this.#stop(error.code === "SESSION_REVOKED" ? "kicked" : null, error),
            completed: () => {
                if (this.#ended === null && this.#live)
                    this.#stop(null, null);
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
    get members() {
        return this.#map.members;
    }
    /** The number of placeMembers reads made: what a resume saves. */
    get reads() {
        return this.#reads;
    }
    on(event, listener) {
        return this.#events.on(event, listener);
    }
    onJoin(listener) {
        return this.on("join", listener);
    }
    onUpdate(listener) {
        return this.on("update", listener);
    }
    onLeave(listener) {
        return this.on("leave", listener);
    }
    /** Replaces this session's state: sent at most 20 times a second, the latest always. */
    setState(state) {
        if (this.#ended !== null || this.#error !== null)
            return;
        this.#holdVariables.state = state; // a rejoin after a reconnect brings the latest
        this.#throttle.push(state);
    }
    /** Leaves the place: others get LEFT at once. */
    leave() {
        this.#stop(null, null);
    }
    #sendState(state) {
        if (!this.#live)
            return; // it goes with the placeSession when it is opened again
        this.#client
            .request(SetPlaceStateDocument, {
            placeId: this.placeId,
            userId: this.#client.actingFor,
            sessionId: this.sessionId,
            state,
        })
            .catch((error) => this.#events.emit("error", asError(error)));
    }
    /** Subscribed again: resumed after its cursor, or read afresh when it cannot be. */
    #resumeOrResync() {
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
    async #resync() {
        const sync = ++this.#syncs;
        this.#map.beginResync();
        // Read only once the new subscription is surely made: after its first event, or a while.
        await new Promise((resolve) => {
            const done = () => {
                clearTimeout(timer);
                if (this.#firstEvent === done)
                    this.#firstEvent = null;
                resolve();
            };
            const timer = setTimeout(done, RESYNC_WAIT_MS);
            this.#firstEvent = done;
        });
        if (sync !== this.#syncs || this.#ended !== null)
            return;
        try {
            this.#reads++;
            const read = await this.#client.request(PlaceMembersDocument, { placeId: this.placeId });
            if (sync !== this.#syncs || !this.#map.resyncing)
                return;
            const changes = this.#map.endResync(read.placeMembers.nodes);
            this.#whole = true;
            if (this.#client.connection === "connected")
                this.#stale = false;
            this.#changed(changes);
            if (changes.length === 0)
                this.#publish();
        }
        catch (error) {
            this.#events.emit("error", asError(error));
            // No read: the events since the resync began, and the members before it, stand.
            if (sync === this.#syncs)
                this.#map.keepAfterFailedResync();
        }
    }
    #changed(changes) {
        if (changes.length === 0)
            return;
        this.#publish();
        for (const change of changes)
            this.#events.emit(change.kind, change.member);
    }
    #publish() {
        this.publish({
            members: [...this.#map.members.values()],
            live: this.#live,
            stale: this.#stale,
            ended: this.#ended,
            error: this.#error ?? this.#refusal,
        });
    }
    #stop(reason, error) {
        if (this.#ended !== null || this.#error !== null)
            return;
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
        if (reason !== null)
            this.#events.emit(reason);
        this.#events.emit("ended", reason, error);
    }
}
