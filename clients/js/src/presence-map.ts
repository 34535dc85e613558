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

function same(a: Presence | undefined, b: Presence): boolean {
  return (
    a !== undefined &&
    a.online === b.online &&
    a.status === b.status &&
    a.lastSeen === b.lastSeen &&
    JSON.stringify(a.customStatus) === JSON.stringify(b.customStatus)
  );
}

const later = (a: string, b: string): string => (Date.parse(b) > Date.parse(a) ? b : a);

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
export class PresenceMap {
  readonly #entries = new Map<string, Presence>();
  readonly #listener: PresenceListener;
  #waiting: PresenceEvent[] | null = null;

  constructor(listener: PresenceListener = () => {}) {
    this.#listener = listener;
  }

  get(userId: string): Presence | undefined {
    return this.#entries.get(userId);
  }

  /** A copy of the map, user id → presence. */
  snapshot(): Map<string, Presence> {
    return new Map(this.#entries);
  }

  get reading(): boolean {
    return this.#waiting !== null;
  }

  applyEvent(event: PresenceEvent): void {
    if (this.#waiting !== null) {
      this.#waiting.push(event);
      return;
    }
    const previous = this.#entries.get(event.userId);
    // Last seen only moves forwards, and stays hidden (null) from a reader the read hid it from.
    const lastSeen =
      previous?.lastSeen == null ? null : later(previous.lastSeen, event.at);
    this.#set({
      userId: event.userId,
      online: event.online,
      status: event.status,
      customStatus: event.customStatus,
      lastSeen,
    });
  }

  /** From now until endRead, events wait. */
  beginRead(): void {
    this.#waiting ??= [];
  }

  /**
   * The read's answer, then the events that waited. With `absentAreOffline` (a read of the
   * online users only, as onlineFriends), a user of the map the read does not list is offline.
   */
  endRead(read: readonly Presence[], { absentAreOffline = false } = {}): void {
    const waiting = this.#waiting ?? [];
    this.#waiting = null;
    const listed = new Set<string>();
    for (const presence of read) {
      listed.add(presence.userId);
      this.#set(presence);
    }
    if (absentAreOffline) {
      for (const presence of [...this.#entries.values()]) {
        if (!listed.has(presence.userId) && presence.online) {
          this.#set({ ...presence, online: false, status: "OFFLINE", customStatus: null });
        }
      }
    }
    for (const event of waiting) this.applyEvent(event);
  }

  /** A read that failed: the events that waited are applied as they are. */
  abortRead(): void {
    const waiting = this.#waiting ?? [];
    this.#waiting = null;
    for (const event of waiting) this.applyEvent(event);
  }

  #set(presence: Presence): void {
    const previous = this.#entries.get(presence.userId);
    if (same(previous, presence)) return;
    this.#entries.set(presence.userId, presence);
    this.#listener(presence, previous);
  }
}
