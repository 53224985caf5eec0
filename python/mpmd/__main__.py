"""``python -m mpmd ARGS``: the ``mpmd`` CLI (:mod:`mpmd.cli`)."""

from .cli import console_main

if __name__ == "__main__":
    console_main()
