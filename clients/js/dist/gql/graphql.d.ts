/** Internal type. DO NOT USE DIRECTLY. */
type Exact<T extends {
    [key: string]: unknown;
}> = {
    [K in keyof T]: T[K];
};
/** Internal type. DO NOT USE DIRECTLY. */
export type Incremental<T> = T | {
    [P in keyof T]?: P extends ' $fragmentName' | '__typename' ? T[P] : never;
};
import type { DocumentTypeDecoration } from '@graphql-typed-document-node/core';
/** What a user chose for their status. AUTO follows their sessions (ONLINE, or AWAY when all are idle). */
export type ChosenStatus = 'AUTO' | 'AWAY' | 'BUSY' | 'INVISIBLE';
/** What happened in a place. */
export type PlaceEventKind = 
/** A session joined (also sent for each member present when a placeChanged subscription starts). */
'JOINED'
/** A session left: its subscription ended, its socket closed, it was kicked, or its process died. */
 | 'LEFT'
/** A session's state changed. */
 | 'UPDATED';
/** What changed in a user's presence. */
export type PresenceEventKind = 
/** A session, or every session, of the user was kicked. */
'KICKED'
/** The user went offline: their last live session expired. */
 | 'OFFLINE'
/** The user came online: their first live session began. */
 | 'ONLINE'
/** The status or custom status changed as subscribers see it (ONLINE, AWAY, BUSY; set, changed, cleared or expired). */
 | 'STATUS';
/** How a user appears to the one who reads it, from their live sessions and their own choice. */
export type PresenceStatus = 
/** Live, and every live session is idle, or the user chose AWAY. */
'AWAY'
/** Live, and the user chose BUSY (do not disturb). */
 | 'BUSY'
/** Live, but the user chose INVISIBLE: shown only to the user themself and to backends. */
 | 'INVISIBLE'
/** No live session, or (to everyone else) a user who chose INVISIBLE. */
 | 'OFFLINE'
/** Live, with at least one live session that is not idle. */
 | 'ONLINE';
/** Why the service ended a presenceSession or a placeSession. */
export type SessionEndReason = 
/** The session, or every session of the user, was kicked; its id is revoked as for any kick. */
'KICKED'
/** Another subscription holding the same session (of the same place, for a placeSession) took over. */
 | 'REPLACED';
export type HoldPresenceSubscriptionVariables = Exact<{
    userId?: string | number | null | undefined;
    sessionId: string | number;
    device?: string | null | undefined;
}>;
export type HoldPresenceSubscription = {
    presenceSession: {
        userId: string;
        sessionId: string;
        live: boolean;
        at: string;
        endReason: SessionEndReason | null;
    };
};
export type SetSessionIdleMutationVariables = Exact<{
    userId?: string | number | null | undefined;
    sessionId: string | number;
    idle: boolean;
}>;
export type SetSessionIdleMutation = {
    setSessionIdle: {
        status: PresenceStatus;
    };
};
export type PresenceFieldsFragment = {
    userId: string;
    online: boolean;
    status: PresenceStatus;
    lastSeen: string | null;
    customStatus: {
        text: string;
        emoji: string | null;
        expiresAt: string | null;
    } | null;
};
export type FollowUsersSubscriptionVariables = Exact<{
    userIds?: Array<string | number> | string | number | null | undefined;
    after?: string | null | undefined;
}>;
export type FollowUsersSubscription = {
    presenceChanged: {
        userId: string;
        kind: PresenceEventKind;
        at: string;
        cursor: string;
        online: boolean;
        status: PresenceStatus;
        customStatus: {
            text: string;
            emoji: string | null;
            expiresAt: string | null;
        } | null;
    };
};
export type FollowFriendsSubscriptionVariables = Exact<{
    friendsOf: string | number;
    after?: string | null | undefined;
}>;
export type FollowFriendsSubscription = {
    presenceChanged: {
        userId: string;
        kind: PresenceEventKind;
        at: string;
        cursor: string;
        online: boolean;
        status: PresenceStatus;
        customStatus: {
            text: string;
            emoji: string | null;
            expiresAt: string | null;
        } | null;
    };
};
export type EventFieldsFragment = {
    userId: string;
    kind: PresenceEventKind;
    at: string;
    cursor: string;
    online: boolean;
    status: PresenceStatus;
    customStatus: {
        text: string;
        emoji: string | null;
        expiresAt: string | null;
    } | null;
};
export type PresencesQueryVariables = Exact<{
    userIds: Array<string | number> | string | number;
}>;
export type PresencesQuery = {
    presences: Array<{
        userId: string;
        online: boolean;
        status: PresenceStatus;
        lastSeen: string | null;
        customStatus: {
            text: string;
            emoji: string | null;
            expiresAt: string | null;
        } | null;
    }>;
};
export type OnlineFriendsQueryVariables = Exact<{
    userId: string | number;
    after?: string | null | undefined;
}>;
export type OnlineFriendsQuery = {
    onlineFriends: {
        nodes: Array<{
            userId: string;
            online: boolean;
            status: PresenceStatus;
            lastSeen: string | null;
            customStatus: {
                text: string;
                emoji: string | null;
                expiresAt: string | null;
            } | null;
        }>;
        pageInfo: {
            hasNextPage: boolean;
            endCursor: string | null;
        };
    };
};
export type SetStatusMutationVariables = Exact<{
    userId?: string | number | null | undefined;
    status: ChosenStatus;
}>;
export type SetStatusMutation = {
    setStatus: {
        chosenStatus: ChosenStatus | null;
        userId: string;
        online: boolean;
        status: PresenceStatus;
        lastSeen: string | null;
        customStatus: {
            text: string;
            emoji: string | null;
            expiresAt: string | null;
        } | null;
    };
};
export type SetCustomStatusMutationVariables = Exact<{
    userId?: string | number | null | undefined;
    text?: string | null | undefined;
    emoji?: string | null | undefined;
    expiresAt?: string | null | undefined;
}>;
export type SetCustomStatusMutation = {
    setCustomStatus: {
        chosenStatus: ChosenStatus | null;
        userId: string;
        online: boolean;
        status: PresenceStatus;
        lastSeen: string | null;
        customStatus: {
            text: string;
            emoji: string | null;
            expiresAt: string | null;
        } | null;
    };
};
export type HoldPlaceSubscriptionVariables = Exact<{
    placeId: string | number;
    userId?: string | number | null | undefined;
    sessionId: string | number;
    state?: Record<string, unknown> | null | undefined;
}>;
export type HoldPlaceSubscription = {
    placeSession: {
        userId: string;
        sessionId: string;
        live: boolean;
        at: string;
        endReason: SessionEndReason | null;
    };
};
export type WatchPlaceSubscriptionVariables = Exact<{
    placeId: string | number;
    after?: string | null | undefined;
}>;
export type WatchPlaceSubscription = {
    placeChanged: {
        kind: PlaceEventKind;
        cursor: string;
        userId: string;
        sessionId: string;
        at: string;
        state: Record<string, unknown> | null;
    };
};
export type PlaceMembersQueryVariables = Exact<{
    placeId: string | number;
}>;
export type PlaceMembersQuery = {
    placeMembers: {
        nodes: Array<{
            userId: string;
            sessionId: string;
            joinedAt: string;
            state: Record<string, unknown> | null;
        }>;
    };
};
export type SetPlaceStateMutationVariables = Exact<{
    placeId: string | number;
    userId?: string | number | null | undefined;
    sessionId: string | number;
    state: Record<string, unknown>;
}>;
export type SetPlaceStateMutation = {
    setPlaceState: {
        sessionId: string;
    };
};
export declare class TypedDocumentString<TResult, TVariables> extends String implements DocumentTypeDecoration<TResult, TVariables> {
    __apiType?: NonNullable<DocumentTypeDecoration<TResult, TVariables>['__apiType']>;
    private value;
    __meta__?: Record<string, any> | undefined;
    constructor(value: string, __meta__?: Record<string, any> | undefined);
    toString(): string & DocumentTypeDecoration<TResult, TVariables>;
}
export declare const PresenceFieldsFragmentDoc: TypedDocumentString<PresenceFieldsFragment, unknown>;
export declare const EventFieldsFragmentDoc: TypedDocumentString<EventFieldsFragment, unknown>;
export declare const HoldPresenceDocument: TypedDocumentString<HoldPresenceSubscription, HoldPresenceSubscriptionVariables>;
export declare const SetSessionIdleDocument: TypedDocumentString<SetSessionIdleMutation, SetSessionIdleMutationVariables>;
export declare const FollowUsersDocument: TypedDocumentString<FollowUsersSubscription, FollowUsersSubscriptionVariables>;
export declare const FollowFriendsDocument: TypedDocumentString<FollowFriendsSubscription, FollowFriendsSubscriptionVariables>;
export declare const PresencesDocument: TypedDocumentString<PresencesQuery, PresencesQueryVariables>;
export declare const OnlineFriendsDocument: TypedDocumentString<OnlineFriendsQuery, OnlineFriendsQueryVariables>;
export declare const SetStatusDocument: TypedDocumentString<SetStatusMutation, SetStatusMutationVariables>;
export declare const SetCustomStatusDocument: TypedDocumentString<SetCustomStatusMutation, SetCustomStatusMutationVariables>;
export declare const HoldPlaceDocument: TypedDocumentString<HoldPlaceSubscription, HoldPlaceSubscriptionVariables>;
export declare const WatchPlaceDocument: TypedDocumentString<WatchPlaceSubscription, WatchPlaceSubscriptionVariables>;
export declare const PlaceMembersDocument: TypedDocumentString<PlaceMembersQuery, PlaceMembersQueryVariables>;
export declare const SetPlaceStateDocument: TypedDocumentString<SetPlaceStateMutation, SetPlaceStateMutationVariables>;
export {};
