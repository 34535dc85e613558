"""What is GraphQL's: the one operation pipeline of both transports, the types, resolvers and
schema, and what every operation passes through."""
