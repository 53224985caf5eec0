//! mpmd-cuda
