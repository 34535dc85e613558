export { backoffDelay } from "./backoff.js";
export { createPresenceClient, Follow, MyStatus, Place, PresenceClient, PresenceError, PresenceHold, tabSessionId, } from "./client.js";
export { memberKey, PlaceMap, } from "./place-map.js";
export { PresenceMap, } from "./presence-map.js";
export { LatestWinsThrottle } from "./throttle.js";
