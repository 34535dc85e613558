import assert from "node:assert/strict";
import { test } from "node:test";

import { LatestWinsThrottle } from "../dist/throttle.js";

/** A clock and timers a test moves by hand. */
function fakeTimers() {
  let now = 1_000;
  let next = 0;
  const pending = new Map();
  return {
    now: () => now,
    setTimeout: (callback, ms) => {
      pending.set(++next, { at: now + ms, callback });
      return next;
    },
    clearTimeout: (handle) => pending.delete(handle),
    advance(ms) {
      const end = now + ms;
      for (;;) {
        const due = [...pending].filter(([, t]) => t.at <= end).sort((a, b) => a[1].at - b[1].at);
        if (due.length === 0) break;
        const [handle, timer] = due[0];
        pending.delete(handle);
        now = timer.at;
        timer.callback();
      }
      now = end;
    },
  };
}

test("the first value goes at once, then at most one per interval, the latest", () => {
  const timers = fakeTimers();
  const sent = [];
  const throttle = new LatestWinsThrottle((v) => sent.push([v, timers.now()]), 50, timers);
  throttle.push(1);
  assert.deepEqual(sent, [[1, 1000]]);
  for (const v of [2, 3, 4]) {
    timers.advance(10);
    throttle.push(v);
  }
  assert.deepEqual(sent, [[1, 1000]]);
  assert.equal(throttle.pending, true);
  timers.advance(20);
  assert.deepEqual(sent, [[1, 1000], [4, 1050]]); // 2 and 3 were replaced: the latest wins
  timers.advance(100);
  throttle.push(5); // a quiet interval: at once again
  assert.deepEqual(sent.at(-1), [5, 1150]);
});

test("a value pushed 1000 times a second goes out 20 times a second, the last one last", () => {
  const timers = fakeTimers();
  const sent = [];
  const throttle = new LatestWinsThrottle((v) => sent.push([v, timers.now()]), 50, timers);
  for (let v = 0; v < 1000; v++) {
    throttle.push(v);
    timers.advance(1);
  }
  timers.advance(100);
  assert.ok(sent.length <= 21, `${sent.length} sends in a second`);
  assert.equal(sent.at(-1)[0], 999);
  for (let i = 1; i < sent.length; i++) {
    assert.ok(sent[i][1] - sent[i - 1][1] >= 50);
    assert.ok(sent[i][0] > sent[i - 1][0]); // never goes back
  }
});

test("cancel drops the waiting value; flush sends it now", () => {
  const timers = fakeTimers();
  const sent = [];
  const throttle = new LatestWinsThrottle((v) => sent.push(v), 50, timers);
  throttle.push("a");
  throttle.push("b");
  throttle.cancel();
  timers.advance(100);
  assert.deepEqual(sent, ["a"]);
  timers.advance(10);
  throttle.push("c"); // a quiet interval: at once
  throttle.push("d"); // waits
  assert.deepEqual(sent, ["a", "c"]);
  throttle.flush();
  assert.deepEqual(sent, ["a", "c", "d"]);
  timers.advance(100);
  assert.deepEqual(sent, ["a", "c", "d"]); // sent once
});
