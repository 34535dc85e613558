function same(a, b) {
    return (a !== undefined &&
        a.online === b.online &&
        a.status === b.status &&
        a.lastSeen === b.lastSeen &&
        JSON.stringify(a.customStatus) === JSON.stringify(b.customStatus));
}
const later = (a, b) => (Date.parse(b) > Date.parse(a) ? b : a);
/**
 * Users' presence, from reads (`presences`, `onlineFriends`) and presenceChanged events.
 *
 * A follower with no cursor to resume from subscribes first and reads after: `beginRead()` before
 * the read is sent, `endRead(read)` with its answer. The events that arrive meanwhile wait and are
 * applied after the read, in their order: each event carries the whole presence after it
 * (online, status, custom status), and one user's events come in the order of their changes, so
 * the last one applied is the user's state whether the read saw it or not. Nothing is missed
 * (the subscription holds every change from before the read on) and nothing doubles (an event or
 * read that changes nothing calls no listener).
 */
export class PresenceMap {
    #entries = new Map();
    #listener;
    #waiting = null;
    constructor(listener = () => { }) {
        this.#listener = listener;
    }
    get(userId) {
        return this.#entries.get(userId);
    }
    /** A copy of the map, user id → presence. */
    snapshot() {
        return new Map(this.#entries);
    }
    get reading() {
        return this.#waiting !== null;
    }
    applyEvent(event) {
        if (this.#waiting !== null) {
            this.#waiting.push(event);
            return;
        }
        const previous = this.#entries.get(event.userId);
        // Last seen only moves forwards, and stays hidden (null) from a reader the read hid it from.
        const lastSeen = previous?.lastSeen == null ? null : later(previous.lastSeen, event.at);
        this.#set({
            userId: event.userId,
            online: event.online,
            status: event.status,
            customStatus: event.customStatus,
            lastSeen,
        });
    }
    /** From now until endRead, events wait. */
    beginRead() {
        this.#waiting ??= [];
    }
    /**
     * The read's answer, then the events that waited. With `absentAreOffline` (a read of the
     * online users only, as onlineFriends), a user of the map the read does not list is offline.
     */
    endRead(read, { absentAreOffline = false } = {}) {
        const waiting = this.#waiting ?? [];
        this.#waiting = null;
        const listed = new Set();
        for (const presence of read) {
            listed.add(presence.userId);
            this.#set(presence);
        }
        if (absentAreOffline) {
            for (const presence of [...this.#entries.values()]) {
                if (!listed.has(presence.userId) && presence.online) {
                    this.#set({ ...presence, online: false, status: "OFFLINE", customStatus: null });
                }
            }
        }
        for (const event of waiting)
            this.applyEvent(event);
    }
    /** A read that failed: the events that waited are applied as they are. */
    abortRead() {
        const waiting = this.#waiting ?? [];
        this.#waiting = null;
        for (const event of waiting)
            this.applyEvent(event);
    }
    #set(presence) {
        const previous = this.#entries.get(presence.userId);
        if (same(previous, presence))
            return;
        this.#entries.set(presence.userId, presence);
        this.#listener(presence, previous);
    }
}
