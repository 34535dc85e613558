export { backoffDelay, type BackoffOptions } from "./backoff.js";
export { createPresenceClient, Follow, MyStatus, Place, PresenceClient, PresenceError, PresenceHold, tabSessionId, type ClientEvents, type ConnectionState, type EndReason, type FollowEvents, type FollowSnapshot, type HoldEvents, type HoldOptions, type HoldState, type JoinOptions, type MyStatusSnapshot, type PlaceEvents, type PlaceSnapshot, type PresenceClientOptions, type Token, } from "./client.js";
export type { ChosenStatus, PresenceStatus } from "./gql/graphql.js";
export { memberKey, PlaceMap, type PlaceChange, type PlaceEvent, type PlaceMember, type PlaceMemberRead, type PlaceState, } from "./place-map.js";
export { PresenceMap, type CustomStatus, type Presence, type PresenceEvent, } from "./presence-map.js";
export { LatestWinsThrottle } from "./throttle.js";
export type { Timers } from "./timers.js";
