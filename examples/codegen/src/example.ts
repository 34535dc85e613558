// The generated types at work: variables and results are checked by the compiler.
import { request } from "./client";
import { OnlineFriends, Touch, WeeklyStats } from "./documents";

const url = "http://127.0.0.1:8080/graphql";

export async function showFriends(token: string, userId: string): Promise<string[]> {
  await request(url, token, Touch, { userId, sessionId: "web" });
  const { onlineFriends } = await request(url, token, OnlineFriends, { userId });
  // DateTime arrives as an ISO 8601 string.
  return onlineFriends.nodes.map((friend) => `${friend.userId} ${friend.lastSeen ?? "never"}`);
}

export async function busiestDay(token: string): Promise<string | undefined> {
  const { weeklyStats } = await request(url, token, WeeklyStats, {});
  const days = [...weeklyStats.days].sort((a, b) => b.activeUsers - a.activeUsers);
  return days[0]?.date; // a Date is "2026-11-21"
}
