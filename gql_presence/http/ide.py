"""GraphiQL served by the service itself, so that it works without internet access and under
a strict Content-Security-Policy: the page, its policy, and the folder of its scripts and
styles (the vendored bundles are written by scripts/vendor_graphiql.py)."""

from __future__ import annotations

import secrets
from pathlib import Path
from string import Template

from aiohttp import web

# Served at /graphiql/: the page's own script and style, and vendor/ with GraphiQL's bundles.
GRAPHIQL_ASSETS = Path(__file__).parent / "graphiql"
_PAGE = Template((Path(__file__).parent / "graphiql.html").read_text(encoding="utf-8"))


def content_security_policy(nonce: str) -> str:
    """Everything from this service only; no inline scripts, no eval."""
    return "; ".join(
        (
            "default-src 'self'",
            # GraphiQL's dialogs add one <style> element, which carries this page's nonce.
            f"style-src 'self' 'nonce-{nonce}'",
            # The editor's fonts are data: URLs inside graphiql.min.css.
            "font-src 'self' data:",
            # 'self' also admits ws: and wss: to this host (CSP Level 3): the subscriptions.
            "connect-src 'self'",
            "object-src 'none'",
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
        )
    )


def graphiql_page() -> web.Response:
    nonce = secrets.token_urlsafe(16)  # a fresh one per page, as CSP nonces must be
    return web.Response(
        text=_PAGE.substitute(nonce=nonce),
        content_type="text/html",
        headers={
            "Content-Security-Policy": content_security_policy(nonce),
            "Cache-Control": "no-store",
        },
    )
