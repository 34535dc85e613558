/** The key of a member: ids have no control characters, so a newline cannot be in either. */
export const memberKey = (userId, sessionId) => `${userId}\n${sessionId}`;
const sameState = (a, b) => JSON.stringify(a) === JSON.stringify(b);
/**
 * The members of a place, from placeChanged: its first JOINED events (who is there when it
 * starts), then every JOINED, UPDATED and LEFT in order, which the service sends once each.
 *
 * After a reconnect with a cursor, the subscription resumes: the changes missed come as events.
 * Without one, the subscription starts again with who is there now, and whoever left
 * meanwhile must go: `beginResync()` when it starts again, then `endResync(read)` with a
 * placeMembers read sent after its first event came (so after the service subscribed it). A
 * member that no event since beginResync named and the read does not list has left. Events since
 * beginResync come after the subscription, so they win over the read.
 */
export class PlaceMap {
    #members = new Map();
    #seen = null;
    get members() {
        return this.#members;
    }
    get resyncing() {
        return this.#seen !== null;
    }
    /** Applies one event; returns what changed, or null when nothing did. */
    apply(event) {
        const key = memberKey(event.userId, event.sessionId);
        this.#seen?.add(key);
        const previous = this.#members.get(key);
        if (event.kind === "LEFT") {
            if (previous === undefined)
                return null;
            this.#members.delete(key);
            return { kind: "leave", member: previous };
        }
        if (previous !== undefined) {
            if (sameState(previous.state, event.state))
                return null;
            const member = { ...previous, state: event.state };
            this.#members.set(key, member);
            return { kind: "update", member };
        }
        const member = {
            key,
            userId: event.userId,
            sessionId: event.sessionId,
            joinedAt: event.kind === "JOINED" ? event.at : null,
            state: event.state,
        };
        this.#members.set(key, member);
        return { kind: "join", member };
    }
    beginResync() {
        this.#seen = new Set();
    }
    endResync(read) {
        const seen = this.#seen ?? new Set();
        this.#seen = null;
        const changes = [];
        const listed = new Set();
        for (const node of read) {
            const key = memberKey(node.userId, node.sessionId);
            listed.add(key);
            if (seen.has(key))
                continue; // an event after the subscription knows better
            const previous = this.#members.get(key);
            if (previous === undefined) {
                const member = { key, ...node };
                this.#members.set(key, member);
                changes.push({ kind: "join", member });
            }
            else if (!sameState(previous.state, node.state)) {
                const member = { ...previous, state: node.state, joinedAt: node.joinedAt };
                this.#members.set(key, member);
                changes.push({ kind: "update", member });
            }
        }
        for (const [key, member] of [...this.#members]) {
            if (!seen.has(key) && !listed.has(key)) {
                this.#members.delete(key);
                changes.push({ kind: "leave", member });
            }
        }
        return changes;
    }
    /** A resync whose read failed: nobody is taken out on its account. */
    keepAfterFailedResync() {
        this.#seen = null;
    }
    clear() {
        const changes = [...this.#members.values()].map((member) => ({ kind: "leave", member }));
        this.#members.clear();
        this.#seen = null;
        return changes;
    }
}
