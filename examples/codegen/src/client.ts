// Sends a generated document by its hash alone, as a service with PRESENCE_TRUSTED_DOCUMENTS
// requires of browsers: the document's text never travels.
import type { TypedDocumentNode } from "@graphql-typed-document-node/core";

type Persisted = { __meta__?: { hash?: string } };

export async function request<Result, Variables>(
  url: string,
  token: string,
  document: TypedDocumentNode<Result, Variables>,
  variables: Variables,
): Promise<Result> {
  const sha256Hash = (document as Persisted).__meta__?.hash;
  const response = await fetch(url, {
    method: "POST",
    headers: { "Content-Type": "application/json", Authorization: `Bearer ${token}` },
    body: JSON.stringify({ variables, extensions: { persistedQuery: { version: 1, sha256Hash } } }),
  });
  const body = (await response.json()) as { data?: Result; errors?: { message: string }[] };
  if (body.errors?.length || body.data === undefined) {
    throw new Error(body.errors?.[0]?.message ?? `HTTP ${response.status}`);
  }
  return body.data;
}
