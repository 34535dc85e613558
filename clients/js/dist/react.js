// React hooks over a PresenceClient: put one client in a PresenceProvider, high in the tree.
import { createContext, createElement, useCallback, useContext, useEffect, useMemo, useState, useSyncExternalStore, } from "react";
const PresenceContext = createContext(null);
/** Makes `client` the hooks' client, and by default keeps the user online while mounted. */
export function PresenceProvider({ client, hold = true, children }) {
    useEffect(() => {
        if (!hold)
            return undefined;
        const held = client.holdPresence();
        return () => held.release();
    }, [client, hold]);
    return createElement(PresenceContext.Provider, { value: client }, children);
}
export function usePresenceClient() {
    const client = useContext(PresenceContext);
    if (client === null)
        throw new Error("gql-presence-client/react: no PresenceProvider above");
    return client;
}
const NO_PRESENCE = Object.assign(new Map(), { stale: false });
const noStore = {
    subscribe: () => () => { },
};
/**
 * These users' presence, live (user id → Presence), or a user's friends' (`{ friendsOf }`);
 * empty until the first read; its `stale` is true while the socket is down (last known, not
 * live). An end user may follow themselves and their friends.
 */
export function usePresence(userIds) {
    const client = usePresenceClient();
    const key = JSON.stringify(userIds);
    const [follow, setFollow] = useState(null);
    useEffect(() => {
        const made = client.followUsers(JSON.parse(key));
        setFollow(made);
        return () => made.stop();
    }, [client, key]);
    return useSyncExternalStore(follow?.subscribe ?? noStore.subscribe, follow?.getSnapshot ?? (() => NO_PRESENCE));
}
const NO_PLACE = { members: [], live: false, stale: false, ended: null, error: null };
/** Joins `placeId` while mounted: its members, live, and this tab's state setter. */
export function usePlace(placeId, initialState = null) {
    const client = usePresenceClient();
    const [place, setPlace] = useState(null);
    const initial = JSON.stringify(initialState);
    useEffect(() => {
        const joined = client.joinPlace(placeId, { state: JSON.parse(initial) });
        setPlace(joined);
        return () => joined.leave();
        // The initial state counts when the place is joined, not after.
    }, [client, placeId]);
    const snapshot = useSyncExternalStore(place?.subscribe ?? noStore.subscribe, place?.getSnapshot ?? (() => NO_PLACE));
    const setState = useCallback((state) => place?.setState(state), [place]);
    return useMemo(() => ({ ...snapshot, setState }), [snapshot, setState]);
}
/**
 * The signed-in user's status and custom status, live, with their setters; `stale` is true
 * while the socket is down (last known, not live).
 */
export function useMyStatus() {
    const client = usePresenceClient();
    const [mine, setMine] = useState(null);
    useEffect(() => {
        const made = client.myStatus();
        setMine(made);
        return () => made.stop();
    }, [client]);
    const presence = useSyncExternalStore(mine?.subscribe ?? noStore.subscribe, mine?.getSnapshot ?? (() => null));
    return useMemo(() => ({
        presence,
        stale: presence?.stale ?? false,
        setStatus: (status) => (mine ?? client).setStatus(status),
        setCustomStatus: (text, options) => (mine ?? client).setCustomStatus(text, options),
    }), [client, mine, presence]);
}
