import type { PlaceEventKind } from "./gql/graphql.js";
export type PlaceState = Record<string, unknown>;
/** One session in a place. */
export interface PlaceMember {
    /** userId and sessionId in one string: the map's key, and a key for a list in a UI. */
    key: string;
    userId: string;
    sessionId: string;
    /** When it joined, as far as this client knows (the event or read it came from). */
    joinedAt: string | null;
    state: PlaceState | null;
}
/** A placeChanged event, as the client reads it. */
export interface PlaceEvent {
    kind: PlaceEventKind;
    userId: string;
    sessionId: string;
    at: string;
    state: PlaceState | null;
    /** Where the event stands in the service's feed: a subscription resumes after it. */
    cursor?: string;
}
/** A placeMembers node. */
export interface PlaceMemberRead {
    userId: string;
    sessionId: string;
    joinedAt: string;
    state: PlaceState | null;
}
export interface PlaceChange {
    kind: "join" | "update" | "leave";
    member: PlaceMember;
}
/** The key of a member: ids have no control characters, so a newline cannot be in either. */
export declare const memberKey: (userId: string, sessionId: string) => string;
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
export declare class PlaceMap {
    #private;
    get members(): ReadonlyMap<string, PlaceMember>;
    get resyncing(): boolean;
    /** Applies one event; returns what changed, or null when nothing did. */
    apply(event: PlaceEvent): PlaceChange | null;
    beginResync(): void;
    endResync(read: readonly PlaceMemberRead[]): PlaceChange[];
    /** A resync whose read failed: nobody is taken out on its account. */
    keepAfterFailedResync(): void;
    clear(): PlaceChange[];
}
