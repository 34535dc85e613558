// React hooks over a PresenceClient: put one client in a PresenceProvider, high in the tree.
import {
  createContext,
  createElement,
  useCallback,
  useContext,
  useEffect,
  useMemo,
  useState,
  useSyncExternalStore,
  type ReactNode,
} from "react";

import type {
  ChosenStatus,
  Follow,
  FollowSnapshot,
  MyStatus,
  MyStatusSnapshot,
  Place,
  PlaceMember,
  PlaceSnapshot,
  PlaceState,
  Presence,
  PresenceClient,
} from "./index.js";

const PresenceContext = createContext<PresenceClient | null>(null);

export interface PresenceProviderProps {
  client: PresenceClient;
  /** Hold the user's presence while the provider is mounted (holdPresence); default true. */
  hold?: boolean;
  children?: ReactNode;
}

/** Makes `client` the hooks' client, and by default keeps the user online while mounted. */
export function PresenceProvider({ client, hold = true, children }: PresenceProviderProps): ReactNode {
  useEffect(() => {
    if (!hold) return undefined;
    const held = client.holdPresence();
    return () => held.release();
  }, [client, hold]);
  return createElement(PresenceContext.Provider, { value: client }, children);
}

export function usePresenceClient(): PresenceClient {
  const client = useContext(PresenceContext);
  if (client === null) throw new Error("gql-presence-client/react: no PresenceProvider above");
  return client;
}

const NO_PRESENCE: FollowSnapshot = Object.assign(new Map<string, Presence>(), { stale: false });
const noStore = {
  subscribe: () => () => {},
};

/**
 * These users' presence, live (user id → Presence), or a user's friends' (`{ friendsOf }`);
 * empty until the first read; its `stale` is true while the socket is down (last known, not
 * live). An end user may follow themselves and their friends.
 */
export function usePresence(userIds: readonly string[] | { friendsOf: string }): FollowSnapshot {
  const client = usePresenceClient();
  const key = JSON.stringify(userIds);
  const [follow, setFollow] = useState<Follow | null>(null);
  useEffect(() => {
    const made = client.followUsers(JSON.parse(key) as string[] | { friendsOf: string });
    setFollow(made);
    return () => made.stop();
  }, [client, key]);
  return useSyncExternalStore(
    follow?.subscribe ?? noStore.subscribe,
    follow?.getSnapshot ?? (() => NO_PRESENCE),
  );
}

const NO_PLACE: PlaceSnapshot = { members: [], live: false, stale: false, ended: null, error: null };

export interface UsePlace extends PlaceSnapshot {
  members: readonly PlaceMember[];
  /** Replaces this tab's state in the place (at most 20 a second are sent, the latest last). */
  setState: (state: PlaceState) => void;
}

/** Joins `placeId` while mounted: its members, live, and this tab's state setter. */
export function usePlace(placeId: string, initialState: PlaceState | null = null): UsePlace {
  const client = usePresenceClient();
  const [place, setPlace] = useState<Place | null>(null);
  const initial = JSON.stringify(initialState);
  useEffect(() => {
    const joined = client.joinPlace(placeId, { state: JSON.parse(initial) as PlaceState | null });
    setPlace(joined);
    return () => joined.leave();
    // The initial state counts when the place is joined, not after.
  }, [client, placeId]);
  const snapshot = useSyncExternalStore(
    place?.subscribe ?? noStore.subscribe,
    place?.getSnapshot ?? (() => NO_PLACE),
  );
  const setState = useCallback((state: PlaceState) => place?.setState(state), [place]);
  return useMemo(() => ({ ...snapshot, setState }), [snapshot, setState]);
}

export interface UseMyStatus {
  /** The user's own presence; null until a held session told who they are. */
  presence: MyStatusSnapshot;
  /** True while the socket is down: `presence` is the last known, not live. */
  stale: boolean;
  setStatus: (status: ChosenStatus) => Promise<Presence>;
  setCustomStatus: (
    text: string | null,
    options?: { emoji?: string | null; expiresAt?: string | null },
  ) => Promise<Presence>;
}

/**
 * The signed-in user's status and custom status, live, with their setters; `stale` is true
 * while the socket is down (last known, not live).
 */
export function useMyStatus(): UseMyStatus {
  const client = usePresenceClient();
  const [mine, setMine] = useState<MyStatus | null>(null);
  useEffect(() => {
    const made = client.myStatus();
    setMine(made);
    return () => made.stop();
  }, [client]);
  const presence = useSyncExternalStore(
    mine?.subscribe ?? noStore.subscribe,
    mine?.getSnapshot ?? (() => null),
  );
  return useMemo(
    () => ({
      presence,
      stale: presence?.stale ?? false,
      setStatus: (status: ChosenStatus) => (mine ?? client).setStatus(status),
      setCustomStatus: (
        text: string | null,
        options?: { emoji?: string | null; expiresAt?: string | null },
      ) => (mine ?? client).setCustomStatus(text, options),
    }),
    [client, mine, presence],
  );
}
