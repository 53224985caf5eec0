//! The reference interpreter: the oracle every backend is judged against.
