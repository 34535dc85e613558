import assert from "node:assert/strict";
import { test } from "node:test";

import { backoffDelay } from "../dist/backoff.js";

test("waits grow twofold from the base to the cap, the second half of each at random", () => {
  const low = (attempt) => backoffDelay(attempt, { baseMs: 500, maxMs: 30_000 }, () => 0);
  const high = (attempt) => backoffDelay(attempt, { baseMs: 500, maxMs: 30_000 }, () => 0.999999);
  assert.deepEqual([0, 1, 2, 3].map(low), [250, 500, 1000, 2000]);
  for (const attempt of [0, 1, 2, 3, 10]) assert.ok(high(attempt) > low(attempt) * 1.99);
  assert.equal(low(10), 15_000); // capped at 30 s, of which half is jitter
  assert.equal(low(1000), 15_000); // no overflow however long it has been down
});

test("never zero, and spread: tabs closed together do not come back together", () => {
  const waits = Array.from({ length: 200 }, () => backoffDelay(3));
  assert.ok(waits.every((w) => w >= 2000 && w <= 4000));
  assert.ok(new Set(waits.map(Math.round)).size > 150);
  assert.ok(backoffDelay(0) >= 250);
});
