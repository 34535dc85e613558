import type { PresenceEventKind, PresenceStatus } from "./gql/graphql.js";
export interface CustomStatus {
    text: string;
    emoji: string | null;
    expiresAt: string | null;
}
/** One user's presence as the reader may see it. */
export interface Presence {
    userId: string;
    online: boolean;
    status: PresenceStatus;
    /** null when none is kept, or the user does not let the reader see it. */
    lastSeen: string | null;
    customStatus: CustomStatus | null;
}
/** A presenceChanged event, as the client reads it. */
export interface PresenceEvent {
    userId: string;
    kind: PresenceEventKind;
    at: string;
    online: boolean;
    status: PresenceStatus;
    customStatus: CustomStatus | null;
    /** Where the event stands in the service's feed: a subscription resumes after it. */
    cursor?: string;
}
export type PresenceListener = (presence: Presence, previous: Presence | undefined) => void;
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
export declare class PresenceMap {
    #private;
    constructor(listener?: PresenceListener);
    get(userId: string): Presence | undefined;
    /** A copy of the map, user id → presence. */
    snapshot(): Map<string, Presence>;
    get reading(): boolean;
    applyEvent(event: PresenceEvent): void;
    /** From now until endRead, events wait. */
    beginRead(): void;
    /**
     * The read's answer, then the events that waited. With `absentAreOffline` (a read of the
     * online users only, as onlineFriends), a user of the map the read does not list is offline.
     */
    endRead(read: readonly Presence[], { absentAreOffline }?: {
        absentAreOffline?: boolean | undefined;
    }): void;
    /** A read that failed: the events that waited are applied as they are. */
    abortRead(): void;
}
