// The operations this app sends. `npm run codegen` types each one and adds it to the manifest.
import { graphql } from "./gql";

export const OnlineFriends = graphql(`
  query OnlineFriends($userId: ID!, $first: Int! = 20) {
    onlineFriends(userId: $userId, first: $first) {
      totalCount
      nodes {
        userId
        online
        lastSeen
      }
    }
  }
`);

export const WeeklyStats = graphql(`
  query WeeklyStats($endDate: Date) {
    weeklyStats(endDate: $endDate) {
      startDate
      endDate
      days {
        date
        activeUsers
      }
    }
  }
`);

export const Touch = graphql(`
  mutation Touch($userId: ID!, $sessionId: ID) {
    touch(userId: $userId, sessionId: $sessionId) {
      online
      lastSeen
    }
  }
`);

export const PresenceChanged = graphql(`
  subscription PresenceChanged($userIds: [ID!]) {
    presenceChanged(userIds: $userIds) {
      userId
      kind
      at
      sessionId
    }
  }
`);
