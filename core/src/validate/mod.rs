//! Validation: every rule with a stable error code (see docs/errors.md).
