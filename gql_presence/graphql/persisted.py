"""Persisted documents: a request may name its GraphQL document by SHA-256 instead of sending it.

- Automatic persisted queries, as Apollo clients speak them: `extensions.persistedQuery =
  {version: 1, sha256Hash}`. An unknown hash alone gets `PersistedQueryNotFound`; the hash with
  its document registers it in the store (Redis), for every process of the deployment.
- Trusted documents (PRESENCE_TRUSTED_DOCUMENTS): the manifest {sha256: document} of a
  frontend's build. With it, end users and anonymous callers may run only those documents, by
  hash (or with the very text); backends may still send any.
- A document known by its hash is parsed and validated once per process and schema: later
  requests run the kept syntax tree (PersistedDocumentCache).
- Nothing is kept, in Redis or in a process, before it has passed every check: the document
  limits of admission, parsing with its token limit, and validation with the document limits.
  resolve() only notes what to keep (Context.unchecked_document); `checked()` keeps it once
  validation has passed.
- A process answers the documents it keeps from its own copy, without asking Redis; which
  ones it used goes to Redis every REFRESH_INTERVAL_S in one script call (refresh_forever),
  so that what Redis forgets first is what no process has used lately. A registration counts
  in Redis as a use long ago (store.REGISTERED_AGE_MS), so that a flood of registrations
  forgets the documents never used: the first use of a document this process registered
  goes to Redis at once, before any such flood can forget it.

Persisted documents are resolved for HTTP requests (POST and GET); WebSocket `subscribe`
messages carry their document as text.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import logging
import re
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

from graphql import DocumentNode
from strawberry.extensions import SchemaExtension
from strawberry.http import GraphQLRequestData

from gql_presence.graphql.context import Context, UncheckedDocument
from gql_presence.lru import LeastRecentlyUsed
from gql_presence.policy.auth import CallerKind
from gql_presence.store import REFRESH_BATCH as STORE_REFRESH_BATCH
from gql_presence.store import PresenceStore
from gql_presence.store.errors import (
    BadInputError,
    ForbiddenError,
    PersistedQueryNotFoundError,
    PresenceError,
)

_SHA256_HEX = re.compile(r"[0-9a-f]{64}")
# What GraphQL over HTTP's persisted documents put before the hash of a `documentId`.
_DOCUMENT_ID_PREFIX = "sha256:"
# Documents kept per process: their text by hash (saves a Redis call), and their checked
# syntax trees (saves parsing and validation). A few hundred documents make an app.
KEPT_PER_PROCESS = 1000
# How often a process tells Redis which documents it has answered from its own copy (one
# script call), so that Redis keeps the documents in use anywhere: its "1,000 most recently
# used" counts such a use up to this late. Sooner once REFRESH_BATCH distinct ones wait (one
# call's worth), which bounds the set a process holds.
REFRESH_INTERVAL_S = 10.0
REFRESH_BATCH = STORE_REFRESH_BATCH

log = logging.getLogger("gql_presence")

_NOT_TRUSTED = (
    "This service runs only its trusted documents for end users: send the document's "
    "SHA-256 from the manifest of your build (extensions.persistedQuery.sha256Hash or "
    "documentId), or call with a backend token."
)


def sha256_hex(document: str) -> str:
    # A lone surrogate cannot be UTF-8; hashed as it is, it matches no document, and parsing
    # refuses it as a syntax error.
    return hashlib.sha256(document.encode("utf-8", "surrogatepass")).hexdigest()


def lift_document_id(data: Any) -> Any:
    """Moves a request's top-level `documentId` (GraphQL over HTTP's persisted documents),
    which Strawberry does not read, into its extensions, where `resolve` finds it."""
    if isinstance(data, dict) and "documentId" in data:
        extensions = data.get("extensions")
        data["extensions"] = {
            **(extensions if isinstance(extensions, dict) else {}),
            "documentId": data.pop("documentId"),
        }
    return data


def names_a_document(query_params: Mapping[str, object]) -> bool:
    """Whether a GET request names its document by hash rather than sending it."""
    return "extensions" in query_params or "documentId" in query_params


class PersistedDocuments:
    """Resolves a request's document from its hash, and holds the trusted documents."""

    def __init__(self, trusted: Mapping[str, str] | None) -> None:
        self._trusted = trusted
        # Documents kept by Redis that passed every check in this process, by hash.
        self._texts: LeastRecentlyUsed[str, str] = LeastRecentlyUsed(KEPT_PER_PROCESS)
        # Hashes of documents answered from _texts since the last refresh, at most
        # REFRESH_BATCH of them.
        self._used: set[str] = set()
        # Documents this process registered and has not used since, by hash.
        self._unused: LeastRecentlyUsed[str, bool] = LeastRecentlyUsed(KEPT_PER_PROCESS)
        self._refresh_due = asyncio.Event()

    async def resolve(self, data: GraphQLRequestData, context: Context) -> GraphQLRequestData:
        """The request with its document written in, once the caller may run it. Records
        the verified hash in `context.document_hash` for PersistedDocumentCache, and a
        document to keep once it passes its checks in `context.unchecked_document`."""
        sha256 = _requested_hash(data.extensions)
        trusted_only = self._trusted is not None and context.caller.kind is not CallerKind.BACKEND
        if data.query is not None:
            if sha256 is None and not trusted_only:
                return data  # a document sent as text, as most are
            text_hash = sha256_hex(data.query)
            if sha256 is not None and sha256 != text_hash:
                raise BadInputError(
                    "extensions.persistedQuery.sha256Hash is not the SHA-256 (lowercase hex) "
                    "of the query sent with it: send the hash of that exact text."
                )
            if trusted_only:
                self._require_trusted(text_hash)
            elif sha256 is not None and self._texts.get(sha256) is None:
                context.unchecked_document = UncheckedDocument(sha256, data.query, register=True)
            elif sha256 is not None:
                await self._note_use(sha256, context.store)
            context.document_hash = text_hash  # known by its hash from now on
            return data
        if sha256 is None:
            return data  # Strawberry answers: no GraphQL query found in the request
        if trusted_only:
            self._require_trusted(sha256)
        document = await self._document(sha256, context)
        context.document_hash = sha256
        return dataclasses.replace(data, query=document)

    def check_text(self, query: str | None, context: Context) -> None:
        """Over WebSocket, where a document comes only as its text: an end user's or an
        anonymous caller's must be a trusted one, as over HTTP."""
        if self._trusted is not None and context.caller.kind is not CallerKind.BACKEND:
            self._require_trusted(sha256_hex(query or ""))

    def _require_trusted(self, sha256: str) -> None:
        assert self._trusted is not None
        if sha256 not in self._trusted:
            raise ForbiddenError(_NOT_TRUSTED)

    async def checked(self, context: Context) -> None:
        """Keeps the request's document once it has passed every check: registered in Redis
        for every process when it came with its hash, and in this process's own copies."""
        unchecked, context.unchecked_document = context.unchecked_document, None
        if unchecked is None:
            return
        if unchecked.register:
            await context.store.persist_document(unchecked.sha256, unchecked.text)
            self._unused.put(unchecked.sha256, True)
        self._texts.put(unchecked.sha256, unchecked.text)

    async def refresh_forever(self, store: PresenceStore) -> None:
        """Every REFRESH_INTERVAL_S, or as soon as REFRESH_BATCH documents wait, marks the
        documents this process answered from its own copy as used in Redis: one script call."""
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(REFRESH_INTERVAL_S):
                    await self._refresh_due.wait()
            self._refresh_due.clear()
            await self.refresh(store)

    async def refresh(self, store: PresenceStore) -> None:
        used, self._used = self._used, set()
        if not used:
            return
        try:
            await store.refresh_documents(sorted(used))
        except PresenceError as error:
            # Not retried: a document still in use is noted again by its next use.
            log.warning("persisted documents' uses not refreshed: %s", error.message)
        except Exception:
            # The task must outlive any one failed refresh; the next one tries again.
            log.exception("refreshing persisted documents' uses failed")

    async def _note_use(self, sha256: str, store: PresenceStore) -> None:
        if self._unused.pop(sha256):
            # Its registration ranks it below every document in use: its first use lifts it
            # at once, or a flood of registrations before the next refresh would forget it.
            with contextlib.suppress(PresenceError):  # else it goes with the next refresh
                await store.refresh_documents([sha256])
                return
        if len(self._used) < REFRESH_BATCH:
            self._used.add(sha256)
        if len(self._used) >= REFRESH_BATCH:
            self._refresh_due.set()

    async def _document(self, sha256: str, context: Context) -> str:
        if self._trusted is not None and sha256 in self._trusted:
            return self._trusted[sha256]
        document = self._texts.get(sha256)
        if document is not None:
            await self._note_use(sha256, context.store)
            return document
        document = await context.store.persisted_document(sha256)  # marked as used there
        if document is None:
            raise PersistedQueryNotFoundError
        # Checked where it was registered, but perhaps by another release's schema: kept here
        # once it passes this process's checks.
        context.unchecked_document = UncheckedDocument(sha256, document, register=False)
        return document


def _requested_hash(extensions: Mapping[str, Any] | None) -> str | None:
    """The SHA-256 a request names its document by, if it names one; a malformed one is
    refused saying what is expected."""
    if not extensions:
        return None
    persisted = extensions.get("persistedQuery")
    document_id = extensions.get("documentId")
    if persisted is not None:
        if not isinstance(persisted, dict) or persisted.get("version") != 1:
            raise BadInputError(
                'extensions.persistedQuery must be {"version": 1, "sha256Hash": "<hex>"}.'
            )
        sha256 = persisted.get("sha256Hash")
    elif document_id is not None:
        sha256 = (
            document_id.removeprefix(_DOCUMENT_ID_PREFIX) if isinstance(document_id, str) else None
        )
    else:
        return None
    if not isinstance(sha256, str) or not _SHA256_HEX.fullmatch(sha256):
        raise BadInputError(
            "A persisted document's hash is its SHA-256 as 64 lowercase hex digits "
            '(documentId may put "sha256:" before it).'
        )
    return sha256


class PersistedDocumentCache(SchemaExtension):
    """Documents parsed and validated once per process: by text, and for a document known by
    its verified hash (`Context.document_hash`), by hash. Only documents that passed
    validation are kept, so a kept one is run without either step. Once the request's
    document has passed, what resolve() noted to keep is kept (PersistedDocuments.checked).
    One per schema: validation depends on the schema."""

    def __init__(
        self,
        *,
        parsed: LeastRecentlyUsed[str, DocumentNode],
        checked: LeastRecentlyUsed[str, DocumentNode],
        documents: PersistedDocuments | None,
    ) -> None:
        super().__init__()
        self._parsed = parsed
        self._checked = checked
        self._documents = documents
        self._kept = False  # whether this request's document is one of those kept

    def on_parse(self) -> Iterator[None]:
        context = self.execution_context
        sha256 = getattr(context.context, "document_hash", None)
        document = self._checked.get(sha256) if sha256 else None
        if document is None and context.query is not None:
            document = self._parsed.get(context.query)
        if document is not None:  # else Strawberry parses it, with the token limit
            context.graphql_document = document
            self._kept = True
        yield

    async def on_validate(self) -> AsyncIterator[None]:
        context = self.execution_context
        if self._kept:
            context.pre_execution_errors = []  # validated when it was kept
            yield
        else:
            yield
            document = context.graphql_document
            if context.pre_execution_errors != [] or document is None:
                return
            sha256 = getattr(context.context, "document_hash", None)
            if sha256 is not None:
                self._checked.put(sha256, document)
            if context.query is not None:
                self._parsed.put(context.query, document)
        request_context = context.context
        if self._documents is not None and isinstance(request_context, Context):
            await self._documents.checked(request_context)
