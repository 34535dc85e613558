export class TypedDocumentString extends String {
    __apiType;
    value;
    __meta__;
    constructor(value, __meta__) {
        super(value);
        this.value = value;
        this.__meta__ = __meta__;
    }
    toString() {
        return this.value;
    }
}
export const PresenceFieldsFragmentDoc = new TypedDocumentString(`
    fragment PresenceFields on UserPresence {
  userId
  online
  status
  lastSeen
  customStatus {
    text
    emoji
    expiresAt
  }
}
    `, { "fragmentName": "PresenceFields" });
export const EventFieldsFragmentDoc = new TypedDocumentString(`
    fragment EventFields on PresenceEvent {
  userId
  kind
  at
  cursor
  online
  status
  customStatus {
    text
    emoji
    expiresAt
  }
}
    `, { "fragmentName": "EventFields" });
export const HoldPresenceDocument = new TypedDocumentString(`
    subscription HoldPresence($userId: ID, $sessionId: ID!, $device: String) {
  presenceSession(userId: $userId, sessionId: $sessionId, device: $device) {
    userId
    sessionId
    live
    at
    endReason
  }
}
    `);
export const SetSessionIdleDocument = new TypedDocumentString(`
    mutation SetSessionIdle($userId: ID, $sessionId: ID!, $idle: Boolean!) {
  setSessionIdle(userId: $userId, sessionId: $sessionId, idle: $idle) {
    status
  }
}
    `);
export const FollowUsersDocument = new TypedDocumentString(`
    subscription FollowUsers($userIds: [ID!], $after: String) {
  presenceChanged(userIds: $userIds, after: $after) {
    ...EventFields
  }
}
    fragment EventFields on PresenceEvent {
  userId
  kind
  at
  cursor
  online
  status
  customStatus {
    text
    emoji
    expiresAt
  }
}`);
export const FollowFriendsDocument = new TypedDocumentString(`
    subscription FollowFriends($friendsOf: ID!, $after: String) {
  presenceChanged(friendsOf: $friendsOf, after: $after) {
    ...EventFields
  }
}
    fragment EventFields on PresenceEvent {
  userId
  kind
  at
  cursor
  online
  status
  customStatus {
    text
    emoji
    expiresAt
  }
}`);
export const PresencesDocument = new TypedDocumentString(`
    query Presences($userIds: [ID!]!) {
  presences(userIds: $userIds) {
    ...PresenceFields
  }
}
    fragment PresenceFields on UserPresence {
  userId
  online
  status
  lastSeen
  customStatus {
    text
    emoji
    expiresAt
  }
}`);
export const OnlineFriendsDocument = new TypedDocumentString(`
    query OnlineFriends($userId: ID!, $after: String) {
  onlineFriends(userId: $userId, first: 1000, after: $after) {
    nodes {
      ...PresenceFields
    }
    pageInfo {
      hasNextPage
      endCursor
    }
  }
}
    fragment PresenceFields on UserPresence {
  userId
  online
  status
  lastSeen
  customStatus {
    text
    emoji
    expiresAt
  }
}`);
export const SetStatusDocument = new TypedDocumentString(`
    mutation SetStatus($userId: ID, $status: ChosenStatus!) {
  setStatus(userId: $userId, status: $status) {
    ...PresenceFields
    chosenStatus
  }
}
    fragment PresenceFields on UserPresence {
  userId
  online
  status
  lastSeen
  customStatus {
    text
    emoji
    expiresAt
  }
}`);
export const SetCustomStatusDocument = new TypedDocumentString(`
    mutation SetCustomStatus($userId: ID, $text: String, $emoji: String, $expiresAt: DateTime) {
  setCustomStatus(
    userId: $userId
    text: $text
    emoji: $emoji
    expiresAt: $expiresAt
  ) {
    ...PresenceFields
    chosenStatus
  }
}
    fragment PresenceFields on UserPresence {
  userId
  online
  status
  lastSeen
  customStatus {
    text
    emoji
    expiresAt
  }
}`);
export const HoldPlaceDocument = new TypedDocumentString(`
    subscription HoldPlace($placeId: ID!, $userId: ID, $sessionId: ID!, $state: JSONObject) {
  placeSession(
    placeId: $placeId
    userId: $userId
    sessionId: $sessionId
    state: $state
  ) {
    userId
    sessionId
    live
    at
    endReason
  }
}
    `);
export const WatchPlaceDocument = new TypedDocumentString(`
    subscription WatchPlace($placeId: ID!, $after: String) {
  placeChanged(placeId: $placeId, after: $after) {
    kind
    cursor
    userId
    sessionId
    at
    state
  }
}
    `);
export const PlaceMembersDocument = new TypedDocumentString(`
    query PlaceMembers($placeId: ID!) {
  placeMembers(placeId: $placeId, first: 1000) {
    nodes {
      userId
      sessionId
      joinedAt
      state
    }
  }
}
    `);
export const SetPlaceStateDocument = new TypedDocumentString(`
    mutation SetPlaceState($placeId: ID!, $userId: ID, $sessionId: ID!, $state: JSONObject!) {
  setPlaceState(
    placeId: $placeId
    userId: $userId
    sessionId: $sessionId
    state: $state
  ) {
    sessionId
  }
}
    `);
