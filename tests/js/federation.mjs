// A federated graph as a frontend team runs one: Apollo Gateway composes the presence subgraph
// (at the URL given as the first argument) with a small "profiles" subgraph that gives
// User.name, and forwards each client's Authorization header to the subgraphs.
// Prints {"gateway": "<url>"} once it serves; runs until it is stopped.
import { ApolloGateway, IntrospectAndCompose, RemoteGraphQLDataSource } from "@apollo/gateway";
import { ApolloServer } from "@apollo/server";
import { ApolloServerPluginInlineTraceDisabled } from "@apollo/server/plugin/disabled";
import { startStandaloneServer } from "@apollo/server/standalone";
import { buildSubgraphSchema } from "@apollo/subgraph";
import gql from "graphql-tag";

const [presenceUrl, backendToken] = process.argv.slice(2);

const names = { alice: "Alice Liddell", bob: "Bob Dylan" };
const profiles = new ApolloServer({
  plugins: [ApolloServerPluginInlineTraceDisabled()], // no usage reporting here
  schema: buildSubgraphSchema({
    typeDefs: gql`
      extend schema @link(url: "https://specs.apollo.dev/federation/v2.3", import: ["@key"])
      type User @key(fields: "id") {
        id: ID!
        name: String!
      }
      type Query {
        user(id: ID!): User
      }
    `,
    resolvers: {
      Query: { user: (_, { id }) => (id in names ? { id } : null) },
      User: {
        name: ({ id }) => names[id],
        __resolveReference: ({ id }) => ({ id }),
      },
    },
  }),
});
const { url: profilesUrl } = await startStandaloneServer(profiles, { listen: { port: 0 } });

// The client's own Authorization goes to every subgraph; composition itself (reading
// _service { sdl }) authenticates with a backend token.
class ForwardAuthorization extends RemoteGraphQLDataSource {
  willSendRequest({ request, context }) {
    if (context.authorization) request.http.headers.set("Authorization", context.authorization);
  }
}
const gateway = new ApolloGateway({
  supergraphSdl: new IntrospectAndCompose({
    subgraphs: [
      { name: "presence", url: presenceUrl },
      { name: "profiles", url: profilesUrl },
    ],
    introspectionHeaders: backendToken ? { Authorization: `Bearer ${backendToken}` } : {},
  }),
  buildService: ({ url }) => new ForwardAuthorization({ url }),
});
const server = new ApolloServer({ gateway });
const { url } = await startStandaloneServer(server, {
  listen: { port: 0 },
  context: async ({ req }) => ({ authorization: req.headers.authorization }),
});
console.log(JSON.stringify({ gateway: url }));
