from typing import List, Optional

__all__: List[str]

def main(argv: Optional[List[str]] = None) -> int:
    """Runs the `mpmd` CLI with `argv` (no program name); returns its exit code."""

def console_main() -> None:
    """The `mpmd` console script: main(), then exit with its code."""
