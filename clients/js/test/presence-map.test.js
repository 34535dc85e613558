import assert from "node:assert/strict";
import { test } from "node:test";

import { PresenceMap } from "../dist/presence-map.js";

const read = (userId, status, lastSeen = "2026-11-28T10:00:00.000Z") => ({
  userId,
  online: status !== "OFFLINE",
  status,
  lastSeen,
  customStatus: null,
});
const event = (userId, kind, status, at, customStatus = null) => ({
  userId,
  kind,
  at,
  online: status !== "OFFLINE",
  status,
  customStatus,
});

function recorded() {
  const changes = [];
  const map = new PresenceMap((p) => changes.push(`${p.userId}:${p.status}`));
  return { map, changes };
}

test("a read, then events: each event's presence replaces the user's", () => {
  const { map, changes } = recorded();
  map.beginRead();
  map.endRead([read("ann", "ONLINE"), read("bob", "OFFLINE")]);
  map.applyEvent(event("bob", "ONLINE", "ONLINE", "2026-11-28T10:01:00.000Z"));
  map.applyEvent(event("ann", "STATUS", "AWAY", "2026-11-28T10:02:00.000Z", { text: "lunch", emoji: null, expiresAt: null }));
  assert.deepEqual(changes, ["ann:ONLINE", "bob:OFFLINE", "bob:ONLINE", "ann:AWAY"]);
  assert.equal(map.get("ann").customStatus.text, "lunch");
  assert.equal(map.get("bob").lastSeen, "2026-11-28T10:01:00.000Z"); // moved forwards
});

test("events during a read wait and are applied after it, in order: nothing missed", () => {
  const { map, changes } = recorded();
  map.beginRead();
  // The subscription is in place; bob comes online and goes away while the read is out.
  map.applyEvent(event("bob", "ONLINE", "ONLINE", "2026-11-28T10:01:00.000Z"));
  map.applyEvent(event("bob", "STATUS", "AWAY", "2026-11-28T10:01:01.000Z"));
  assert.deepEqual(changes, []);
  // The read was made between the two changes: it saw bob ONLINE.
  map.endRead([read("bob", "ONLINE")]);
  assert.equal(map.get("bob").status, "AWAY");
});

test("an event the read already holds changes nothing: nothing doubled", () => {
  const { map, changes } = recorded();
  map.beginRead();
  map.applyEvent(event("bob", "STATUS", "BUSY", "2026-11-28T09:00:00.000Z"));
  map.endRead([read("bob", "BUSY", "2026-11-28T10:00:00.000Z")]);
  assert.deepEqual(changes, ["bob:BUSY"]);
  assert.equal(map.get("bob").lastSeen, "2026-11-28T10:00:00.000Z"); // never goes back
});

test("a re-read after a reconnect: what changed while away shows, once", () => {
  const { map, changes } = recorded();
  map.beginRead();
  map.endRead([read("ann", "ONLINE"), read("bob", "ONLINE")]);
  // Disconnected: bob went offline unseen. Reconnected: subscribed again, read again.
  map.beginRead();
  map.endRead([read("ann", "ONLINE"), read("bob", "OFFLINE", "2026-11-28T10:05:00.000Z")]);
  assert.deepEqual(changes, ["ann:ONLINE", "bob:ONLINE", "bob:OFFLINE"]);
});

test("a read of online friends only: those it leaves out are offline", () => {
  const { map } = recorded();
  map.beginRead();
  map.endRead([read("ann", "ONLINE"), read("bob", "BUSY")], { absentAreOffline: true });
  map.beginRead();
  map.endRead([read("ann", "ONLINE")], { absentAreOffline: true });
  assert.equal(map.get("bob").status, "OFFLINE");
  assert.equal(map.get("bob").online, false);
});

test("a hidden last seen stays hidden; a failed read applies what waited", () => {
  const { map } = recorded();
  map.beginRead();
  map.endRead([read("cy", "ONLINE", null)]);
  map.applyEvent(event("cy", "OFFLINE", "OFFLINE", "2026-11-28T10:09:00.000Z"));
  assert.equal(map.get("cy").lastSeen, null);
  map.beginRead();
  map.applyEvent(event("cy", "ONLINE", "ONLINE", "2026-11-28T10:10:00.000Z"));
  map.abortRead();
  assert.equal(map.get("cy").status, "ONLINE");
});
