// GraphiQL for this service: queries and mutations over POST to the page's own address,
// subscriptions over a WebSocket to the same address. The headers typed in GraphiQL's headers
// editor go with every request and, for subscriptions, as the connection_init payload.
"use strict";

// GraphiQL's dialogs add a <style> element; the page's Content-Security-Policy allows it with
// this nonce (the bundle reads the global that webpack's nonce convention names).
window.__webpack_nonce__ = document.currentScript.nonce;

// Short lines: the editor shows about 50 characters in a window 1280 pixels wide, and a
// longer line would hide its end.
const EXAMPLE_QUERY = `# Who is online: Ctrl-Enter runs it.
# Docs and Explorer, on the left, list every
# query, mutation and subscription.
# With credentials configured, open Headers
# below and add (a backend token, or a user's
# JWT from \`gql-presence token --user ann\`):
# {"Authorization": "Bearer <token>"}
{
  onlineUsers(first: 10) {
    totalCount
    nodes { userId online lastSeen }
  }
}
`;

// The document is kept as `q`, not `query`: a GET with `query` would run it instead of
// opening this page.
const parameters = Object.fromEntries(new URLSearchParams(window.location.search));

function updateURL(changes) {
  Object.assign(parameters, changes);
  const kept = Object.entries(parameters).filter(([, value]) => Boolean(value));
  history.replaceState(null, "", "?" + new URLSearchParams(kept).toString());
}

const fetchURL = window.location.href.split(/[?#]/)[0];
const subscriptionURL = new URL(fetchURL);
subscriptionURL.protocol = subscriptionURL.protocol === "https:" ? "wss:" : "ws:";

const fetcher = GraphiQL.createFetcher({
  url: fetchURL,
  subscriptionUrl: subscriptionURL.toString(),
});
const explorer = GraphiQLPluginExplorer.explorerPlugin();

function Page() {
  const [query, setQuery] = React.useState(parameters.q || EXAMPLE_QUERY);
  const [variables, setVariables] = React.useState(parameters.variables);
  return React.createElement(GraphiQL, {
    fetcher,
    plugins: [explorer],
    query,
    variables,
    // Tokens stay out of the address; GraphiQL keeps them in this browser's storage.
    headers: parameters.headers,
    onEditQuery(edited) {
      setQuery(edited);
      updateURL({ q: edited });
    },
    onEditVariables(edited) {
      setVariables(edited);
      updateURL({ variables: edited });
    },
    defaultEditorToolsVisibility: true,
    inputValueDeprecation: true,
    isHeadersEditorEnabled: true,
    shouldPersistHeaders: true,
  });
}

ReactDOM.createRoot(document.getElementById("graphiql")).render(React.createElement(Page));
