// The stack a team would build instead of gql-presence, for `python -m bench.peer`: GraphQL
// Yoga with graphql-jit and ioredis, serving our schema's touch by the same lua/touch.lua
// with the same KEYS and ARGV. Everything it must agree on comes from the bench in
// PEER_CONFIG (JSON), derived there from the store's keys and settings.
import { readFileSync } from "node:fs";
import { createServer } from "node:http";
import { useGraphQlJit } from "@envelop/graphql-jit";
import { createSchema, createYoga } from "graphql-yoga";
import Redis from "ioredis";

const config = JSON.parse(process.env.PEER_CONFIG);
const redis = new Redis(config.redisUrl);
// The script as our store loads it (includes written in); ioredis runs it by EVALSHA.
redis.defineCommand("touch", { numberOfKeys: 12, lua: readFileSync(config.script, "utf8") });

// Our store's packed `shard` argument (options, channels, key names), as its bytes.
const shardOptions = Buffer.from(config.shardOptions, "base64");
const DAY_MS = 86_400_000;
const iso = (ms) => (ms === null || ms === "" ? null : new Date(Number(ms)).toISOString());

// The day of `ms` and its neighbours (UTC, the bench's PRESENCE_STATS_TIMEZONE): their
// labels, and the start of each then the end of the last, as the store's days_around.
function daysAround(ms) {
  const first = (Math.floor(ms / DAY_MS) - 1) * DAY_MS;
  const starts = [0, 1, 2, 3].map((i) => first + i * DAY_MS);
  return { labels: starts.slice(0, 3).map((s) => iso(s).slice(0, 10)), boundaries: starts };
}

async function touch(_, { userId, sessionId, at, device, idle }) {
  const atMs = at ? Date.parse(at) : "";
  const { labels, boundaries } = daysAround(at ? atMs : Date.now());
  const p = config.prefix;
  const keys = [p + "lastseen", p + "online", p + "sess:" + userId, p + "revoked:" + userId];
  keys.push(p + "uidx", p + "uidx:next", p + "uidx:free", ...labels.map((l) => p + "day:" + l));
  keys.push(p + "conn:" + userId, p + "leases");
  const args = [userId, sessionId ?? "default", atMs, shardOptions, config.maxFutureMs];
  args.push(...boundaries, device ?? "", idle ? 1 : 0);
  const [, entry] = await redis.touch(...keys, ...args);
  const [lastSeenMs, live] = entry;
  const sessions = [];
  for (let i = 0; i < live.length; i += 5) {
    const [id, activity, started, idleFlag, dev] = live.slice(i, i + 5);
    sessions.push({ sessionId: id, lastSeen: iso(activity), startedAt: iso(started),
      idle: idleFlag === 1 || idleFlag === "1", device: dev || null });
  }
  return { userId, online: sessions.length > 0, lastSeen: iso(lastSeenMs), sessions };
}

// Our schema.graphql's touch, with the fields of UserPresence and Session it can fill.
const typeDefs = `
  scalar DateTime
  type Session { sessionId: ID! lastSeen: DateTime! startedAt: DateTime! device: String idle: Boolean! }
  type UserPresence { userId: ID! online: Boolean! lastSeen: DateTime sessions: [Session!]! }
  type Query { ok: Boolean }
  type Mutation {
    touch(userId: ID!, sessionId: ID = null, at: DateTime = null, device: String = null,
      idle: Boolean! = false): UserPresence!
  }`;
const schema = createSchema({ typeDefs, resolvers: { Mutation: { touch } } });
const yoga = createYoga({ schema, plugins: [useGraphQlJit()], graphiql: false, logging: false });
createServer(yoga).listen(config.port, "127.0.0.1");
