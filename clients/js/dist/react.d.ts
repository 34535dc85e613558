import { type ReactNode } from "react";
import type { ChosenStatus, FollowSnapshot, MyStatusSnapshot, PlaceMember, PlaceSnapshot, PlaceState, Presence, PresenceClient } from "./index.js";
export interface PresenceProviderProps {
    client: PresenceClient;
    /** Hold the user's presence while the provider is mounted (holdPresence); default true. */
    hold?: boolean;
    children?: ReactNode;
}
/** Makes `client` the hooks' client, and by default keeps the user online while mounted. */
export declare function PresenceProvider({ client, hold, children }: PresenceProviderProps): ReactNode;
export declare function usePresenceClient(): PresenceClient;
/**
 * These users' presence, live (user id → Presence), or a user's friends' (`{ friendsOf }`);
 * empty until the first read; its `stale` is true while the socket is down (last known, not
 * live). An end user may follow themselves and their friends.
 */
export declare function usePresence(userIds: readonly string[] | {
    friendsOf: string;
}): FollowSnapshot;
export interface UsePlace extends PlaceSnapshot {
    members: readonly PlaceMember[];
    /** Replaces this tab's state in the place (at most 20 a second are sent, the latest last). */
    setState: (state: PlaceState) => void;
}
/** Joins `placeId` while mounted: its members, live, and this tab's state setter. */
export declare function usePlace(placeId: string, initialState?: PlaceState | null): UsePlace;
export interface UseMyStatus {
    /** The user's own presence; null until a held session told who they are. */
    presence: MyStatusSnapshot;
    /** True while the socket is down: `presence` is the last known, not live. */
    stale: boolean;
    setStatus: (status: ChosenStatus) => Promise<Presence>;
    setCustomStatus: (text: string | null, options?: {
        emoji?: string | null;
        expiresAt?: string | null;
    }) => Promise<Presence>;
}
/**
 * The signed-in user's status and custom status, live, with their setters; `stale` is true
 * while the socket is down (last known, not live).
 */
export declare function useMyStatus(): UseMyStatus;
