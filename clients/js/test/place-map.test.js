import assert from "node:assert/strict";
import { test } from "node:test";

import { memberKey, PlaceMap } from "../dist/place-map.js";

const ev = (kind, userId, sessionId, state = null, at = "2026-11-28T10:00:00.000Z") => ({
  kind,
  userId,
  sessionId,
  at,
  state,
});
const node = (userId, sessionId, state = null) => ({
  userId,
  sessionId,
  joinedAt: "2026-11-28T09:00:00.000Z",
  state,
});
const kinds = (changes) => changes.filter(Boolean).map((c) => `${c.kind}:${c.member.userId}`);
const states = (map) =>
  Object.fromEntries([...map.members.values()].map((m) => [m.key, m.state]));

test("the snapshot's JOINED events, then updates and leaves", () => {
  const map = new PlaceMap();
  const changes = [
    map.apply(ev("JOINED", "ann", "t1", { x: 1 })),
    map.apply(ev("JOINED", "bob", "t2")),
    map.apply(ev("UPDATED", "ann", "t1", { x: 2 })),
    map.apply(ev("LEFT", "bob", "t2")),
  ];
  assert.deepEqual(kinds(changes), ["join:ann", "join:bob", "update:ann", "leave:bob"]);
  assert.deepEqual(states(map), { [memberKey("ann", "t1")]: { x: 2 } });
  assert.equal(map.members.get(memberKey("ann", "t1")).joinedAt, "2026-11-28T10:00:00.000Z");
});

test("nothing doubled: a JOINED or UPDATED that changes nothing, a LEFT of nobody", () => {
  const map = new PlaceMap();
  map.apply(ev("JOINED", "ann", "t1", { x: 1 }));
  assert.equal(map.apply(ev("JOINED", "ann", "t1", { x: 1 })), null);
  assert.equal(map.apply(ev("UPDATED", "ann", "t1", { x: 1 })), null);
  assert.equal(map.apply(ev("LEFT", "zed", "t9")), null);
  assert.equal(map.members.size, 1);
});

test("one user's sessions are members of their own", () => {
  const map = new PlaceMap();
  map.apply(ev("JOINED", "ann", "phone"));
  map.apply(ev("JOINED", "ann", "laptop"));
  map.apply(ev("LEFT", "ann", "phone"));
  assert.deepEqual([...map.members.keys()], [memberKey("ann", "laptop")]);
});

test("a resync after a reconnect: who left meanwhile leaves, who came joins, states catch up", () => {
  const map = new PlaceMap();
  map.apply(ev("JOINED", "ann", "t1", { x: 1 }));
  map.apply(ev("JOINED", "bob", "t2", { x: 1 }));
  map.apply(ev("JOINED", "cy", "t3"));
  // Disconnected: bob left, dee joined, ann moved. The new subscription starts with who is there.
  map.beginResync();
  const during = [
    map.apply(ev("JOINED", "ann", "t1", { x: 5 })),
    map.apply(ev("JOINED", "dee", "t4")),
  ];
  // The read (after the first event) lists cy too, whose JOINED had not arrived yet.
  const after = map.endResync([node("ann", "t1", { x: 5 }), node("cy", "t3"), node("dee", "t4")]);
  assert.deepEqual(kinds(during), ["update:ann", "join:dee"]);
  assert.deepEqual(kinds(after), ["leave:bob"]);
  assert.deepEqual(Object.keys(states(map)).sort(), ["ann\nt1", "cy\nt3", "dee\nt4"]);
  // cy's JOINED arrives late: nothing doubles.
  assert.equal(map.apply(ev("JOINED", "cy", "t3")), null);
});

test("in a resync, events after the subscription win over the read", () => {
  const map = new PlaceMap();
  map.apply(ev("JOINED", "ann", "t1"));
  map.beginResync();
  map.apply(ev("JOINED", "ann", "t1", { x: 1 }));
  map.apply(ev("UPDATED", "ann", "t1", { x: 9 }));
  map.apply(ev("JOINED", "bob", "t2"));
  map.apply(ev("LEFT", "bob", "t2")); // left after the read was made: the read still lists bob
  const after = map.endResync([node("ann", "t1", { x: 1 }), node("bob", "t2")]);
  assert.deepEqual(after, []);
  assert.deepEqual(states(map), { "ann\nt1": { x: 9 } });
});

test("clear: every member leaves", () => {
  const map = new PlaceMap();
  map.apply(ev("JOINED", "ann", "t1"));
  assert.deepEqual(kinds(map.clear()), ["leave:ann"]);
  assert.equal(map.members.size, 0);
});
