"""The secret that keys page cursors' tags (see store/cursor.py) when PRESENCE_CURSOR_SECRET
is not set: made here, and kept in the data folder of the embedded Redis."""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
from pathlib import Path

# The file of the data folder that keeps it.
FILE_NAME = "cursor-secret"


def new_secret() -> str:
    """A fresh random secret, of the length PRESENCE_CURSOR_SECRET asks for at least."""
    return secrets.token_urlsafe(32)


def secret_kept_in(folder: Path) -> str:
    """The secret kept in `folder` (made there now, readable by this user only, if it is not
    there yet): read on every start, so that cursors outlive a restart."""
    path = folder / FILE_NAME
    if not path.exists():
        # Written whole under another name, then linked into place: a start cut short leaves
        # no empty secret behind, and a secret already there is never replaced.
        with tempfile.NamedTemporaryFile("w", dir=folder, encoding="utf-8") as draft:
            draft.write(new_secret() + "\n")
            draft.flush()
            with contextlib.suppress(FileExistsError):
                os.link(draft.name, path)
    return path.read_text(encoding="utf-8").strip()
