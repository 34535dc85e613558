import type { CodegenConfig } from "@graphql-codegen/cli";

// Types for every operation of src/operations.graphql from the service's committed schema: a change of
// the schema that breaks a document, or the type the client reads it as, fails `npm run build`.
const config: CodegenConfig = {
  schema: "../../schema.graphql",
  documents: ["src/operations.graphql"],
  ignoreNoDocuments: false,
  generates: {
    "src/gql/": {
      preset: "client",
      config: {
        // ISO 8601 strings on the wire; a place's state is a JSON object.
        scalars: { DateTime: "string", Date: "string", JSONObject: "Record<string, unknown>" },
        enumsAsTypes: true,
        useTypeImports: true,
        // Documents as typed strings: nothing but graphql-ws is needed at run time (no parsed
        // ASTs, no `graphql` package to print them).
        documentMode: "string",
      },
      presetConfig: { fragmentMasking: false },
    },
  },
};

export default config;
