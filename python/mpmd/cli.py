"""The ``mpmd`` command line from the Python package: the same CLI as the
``mpmd`` binary (``mpmd check``, ``lower``, ``run``, ...), linked into the
extension. The package installs it as the ``mpmd`` console script; ``python
-m mpmd`` runs it too.

    >>> from mpmd.cli import main
    >>> main(["check", "examples/elementwise.mpmd"])   # prints "...: ok"
    0
"""

from __future__ import annotations

import signal
import sys
from typing import List, Optional

from . import _mpmd

__all__ = ["main", "console_main"]


def main(argv: Optional[List[str]] = None) -> int:
    """Runs the CLI with ``argv`` (its arguments, without the program name;
    default ``sys.argv[1:]``): output on stdout, errors on stderr, as the
    binary prints them. Returns the CLI's exit code (0 success, 1 an error,
    2 a usage error)."""
    args = sys.argv[1:] if argv is None else list(argv)
    sys.stdout.flush()
    sys.stderr.flush()
    return _mpmd.cli_main(["mpmd", *args])


def console_main() -> None:
    """The ``mpmd`` console script: :func:`main`, then exit with its code.
    Ctrl-C ends the process as it ends the binary (the default action of
    SIGINT, not a KeyboardInterrupt after the command)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    sys.exit(main())
