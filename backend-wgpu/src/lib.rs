//! mpmd-wgpu
