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
export const memberKey = (userId: string, sessionId: string): string => `${userId}\n${sessionId}`;

const sameState = (a: PlaceState | null, b: PlaceState | null): boolean =>
  JSON.stringify(a) === JSON.stringify(b);

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
export class PlaceMap {
  readonly #members = new Map<string, PlaceMember>();
  #seen: Set<string> | null = null;

  get members(): ReadonlyMap<string, PlaceMember> {
    return this.#members;
  }

  get resyncing(): boolean {
    return this.#seen !== null;
  }

  /** Applies one event; returns what changed, or null when nothing did. */
  apply(event: PlaceEvent): PlaceChange | null {
    const key = memberKey(event.userId, event.sessionId);
    this.#seen?.add(key);
    const previous = this.#members.get(key);
    if (event.kind === "LEFT") {
      if (previous === undefined) return null;
      this.#members.delete(key);
      return { kind: "leave", member: previous };
    }
    if (previous !== undefined) {
      if (sameState(previous.state, event.state)) return null;
      const member = { ...previous, state: event.state };
      this.#members.set(key, member);
      return { kind: "update", member };
    }
    const member: PlaceMember = {
      key,
      userId: event.userId,
      sessionId: event.sessionId,
      joinedAt: event.kind === "JOINED" ? event.at : null,
      state: event.state,
    };
    this.#members.set(key, member);
    return { kind: "join", member };
  }

  beginResync(): void {
    this.#seen = new Set();
  }

  endResync(read: readonly PlaceMemberRead[]): PlaceChange[] {
    const seen = this.#seen ?? new Set<string>();
    this.#seen = null;
    const changes: PlaceChange[] = [];
    const listed = new Set<string>();
    for (const node of read) {
      const key = memberKey(node.userId, node.sessionId);
      listed.add(key);
      if (seen.has(key)) continue; // an event after the subscription knows better
      const previous = this.#members.get(key);
      if (previous === undefined) {
        const member = { key, ...node };
        this.#members.set(key, member);
        changes.push({ kind: "join", member });
      } else if (!sameState(previous.state, node.state)) {
        const member = { ...previous, state: node.state, joinedAt: node.joinedAt };
        this.#members.set(key, member);
        changes.push({ kind: "update", member });
      }
    }
    for (const [key, member] of [...this.#members]) {
      if (!seen.has(key) && !listed.has(key)) {
        this.#members.delete(key);
        changes.push({ kind: "leave", member });
      }
    }
    return changes;
  }

  /** A resync whose read failed: nobody is taken out on its account. */
  keepAfterFailedResync(): void {
    this.#seen = null;
  }

  clear(): PlaceChange[] {
    const changes = [...this.#members.values()].map((member) => ({ kind: "leave" as const, member }));
    this.#members.clear();
    this.#seen = null;
    return changes;
  }
}
