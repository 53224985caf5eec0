//! The text format: printer and parser (see docs/text-format.md).
