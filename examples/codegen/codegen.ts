import { createHash } from "node:crypto";

import type { CodegenConfig } from "@graphql-codegen/cli";

// The bare hex digest (the preset's "sha256" setting would write "sha256:<hex>").
const sha256 = (document: string): string => createHash("sha256").update(document).digest("hex");

const config: CodegenConfig = {
  // The service's committed schema: no running server is needed.
  schema: "../../schema.graphql",
  documents: ["src/**/*.ts", "!src/gql/**"],
  ignoreNoDocuments: false,
  generates: {
    "src/gql/": {
      preset: "client",
      config: {
        // ISO 8601 strings on the wire: "2026-11-21T09:30:00.250Z" and "2026-11-21".
        scalars: { DateTime: "string", Date: "string" },
        enumsAsTypes: true,
        useTypeImports: true,
      },
      presetConfig: {
        // Also writes src/gql/persisted-documents.json, {"<sha256>": "<document>"}: the
        // manifest PRESENCE_TRUSTED_DOCUMENTS takes. Each generated document carries its hash.
        persistedDocuments: { hashAlgorithm: sha256 },
        fragmentMasking: false,
      },
    },
  },
};

export default config;
