//! Triage: CUDA's runs against WGSL's, mode by mode.

use super::*;

/// The looser of two tolerances, bound by bound.
pub fn looser(a: Tolerance, b: Tolerance) -> Tolerance {
    Tolerance {
        ulp: a.ulp.max(b.ulp),
        abs: a.abs.max(b.abs),
        narrow_ulp: a.narrow_ulp.max(b.narrow_ulp),
    }
}

/// Triage: CUDA's runs against WGSL's, mode by mode (`modes[i]` gave
/// `cuda[i]` and `wgpu[i]`, and `oracle[i]` the interpreter's run whose mma
/// probes bound `mma` outputs), each output by the case's compare mode with
/// `tolerance` for `profile` and twice the bound for `mma` (each backend is
/// within one of the oracle). Pass when they agree, fail with the first
/// differences when they do not, skip when either did not run; the modes
/// combine like a backend's.
pub fn triage(
    compares: &[(String, CompareMode)],
    modes: &[Mode],
    cuda: &[Execution],
    wgpu: &[Execution],
    oracle: &[Result<Vec<Observed>, SequenceError>],
    tolerance: Tolerance,
) -> Status {
    modes
        .iter()
        .enumerate()
        .zip(cuda.iter().zip(wgpu))
        .map(|((i, &mode), (c, w))| {
            let reference = oracle.get(i).and_then(|o| o.as_ref().ok());
            triage_mode(compares, mode, c, w, reference, tolerance)
        })
        .reduce(Status::combine)
        .unwrap_or_else(|| Status::Skip("no mode ran".into()))
}

pub(super) fn triage_mode(
    compares: &[(String, CompareMode)],
    mode: Mode,
    cuda: &Execution,
    wgpu: &Execution,
    oracle: Option<&Vec<Observed>>,
    tolerance: Tolerance,
) -> Status {
    let m = mode_name(mode);
    let (cuda, wgpu) = match (cuda, wgpu) {
        (Execution::NotRun(why), _) | (_, Execution::NotRun(why)) => {
            return Status::Skip(why.clone())
        }
        (Execution::Ran(c), Execution::Ran(w)) => (c, w),
    };
    let (cuda, wgpu) = match (cuda, wgpu) {
        (Ok(c), Ok(w)) => (c, w),
        (Err(c), Err(w)) => {
            // Equal classes agree; a deadlock and a wait timeout are the same finding.
            let agree = match (c.class(), w.class()) {
                (Some(a), Some(b)) => class_matches(a, Some(b)) || class_matches(b, Some(a)),
                _ => false,
            };
            return if agree {
                Status::Pass
            } else {
                Status::Fail(format!(
                    "{m} mode: cuda stopped with: {c}; wgpu stopped with: {w}"
                ))
            };
        }
        (Err(c), Ok(_)) => {
            return Status::Fail(format!(
                "{m} mode: cuda stopped with: {c}; wgpu ran to completion"
            ))
        }
        (Ok(_), Err(w)) => {
            return Status::Fail(format!(
                "{m} mode: cuda ran to completion; wgpu stopped with: {w}"
            ))
        }
    };
    let mut problems = Vec::new();
    for c in cuda {
        let Some(w) = wgpu.iter().find(|w| w.call == c.call && w.name == c.name) else {
            problems.push(format!("{}: missing from wgpu's results", c.label()));
            continue;
        };
        let compare_mode = mode_for(compares, &c.name, c.tensor.elem());
        let probes = oracle
            .and_then(|o| o.iter().find(|r| r.call == c.call && r.name == c.name))
            .and_then(|r| r.mma.as_ref());
        if let Err(mismatch) = compare_observed(&compare_mode, c, probes, &w.tensor, tolerance, 2.0)
        {
            problems.push(format!(
                "{} ({}): {}",
                c.label(),
                describe_mode(&compare_mode, tolerance),
                describe_disagreement(&mismatch, &c.tensor, &w.tensor)
            ));
        }
    }
    for w in wgpu {
        if !cuda.iter().any(|c| c.call == w.call && c.name == w.name) {
            problems.push(format!("{}: missing from cuda's results", w.label()));
        }
    }
    if problems.is_empty() {
        Status::Pass
    } else {
        Status::Fail(format!("{m} mode: {}", problems.join("\n    ")))
    }
}

/// A mismatch where CUDA's tensor was the expected side, in CUDA/WGSL terms.
pub(super) fn describe_disagreement(
    mismatch: &crate::compare::Mismatch,
    cuda: &HostTensor,
    wgpu: &HostTensor,
) -> String {
    use crate::compare::show;
    if mismatch.detail.is_some() {
        return format!(
            "shapes differ: cuda {:?} wgpu {:?}",
            cuda.shape(),
            wgpu.shape()
        );
    }
    let mut text = format!("{} of {} elements differ", mismatch.count, mismatch.total);
    for d in &mismatch.first {
        text += &format!(
            "\n      [{}] cuda {} wgpu {}",
            d.index,
            show(d.elem, d.expected),
            show(d.elem, d.actual)
        );
        if let Some(u) = d.ulp {
            text += &format!(" ({u} ulp)");
        }
        if let Some(m) = &d.mma {
            text += &format!(" {m}");
        }
    }
    text
}
