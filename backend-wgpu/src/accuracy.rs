//! The WGSL backend's accuracy profile (placeholder until measured).

/// Measured behaviour of one adapter.
#[derive(Clone, Debug, PartialEq)]
pub struct AccuracyProfile {
    pub adapter: &'static str,
}

pub fn accuracy_profile() -> AccuracyProfile {
    AccuracyProfile { adapter: "lavapipe" }
}
