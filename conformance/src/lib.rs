//! mpmd-conformance
