"""What is HTTP's: the view, the graphql-transport-ws handler, sockets, probes, GraphiQL's
page, CORS and the Host check."""
