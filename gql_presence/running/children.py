"""Child processes that do not outlive the process that started them."""

from __future__ import annotations

import ctypes
import signal
import subprocess
import sys
from typing import Any

_PR_SET_PDEATHSIG = 1


def start_child(command: list[str], **popen: Any) -> subprocess.Popen[bytes]:
    """Starts `command` in a session of its own, so that signals reach it from this process
    only (not from the terminal too), and so that it stops when this process dies, even
    killed outright (on Linux; elsewhere only this process's own shutdown stops it)."""
    return subprocess.Popen(
        command,
        start_new_session=True,
        preexec_fn=_die_with_parent if sys.platform == "linux" else None,  # noqa: PLW1509
        **popen,
    )


def _die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
