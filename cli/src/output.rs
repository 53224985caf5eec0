//! What `mpmd run` prints and writes: summary lines, `.npy` files and their names.

use std::fmt::Write;
use std::path::Path;

use mpmd_core::ir::{Literal, ScalarType};
use mpmd_core::HostTensor;

use crate::{npy, CliError, RunRequest};

pub(crate) fn create_dir(dir: &Path) -> Result<(), CliError> {
    std::fs::create_dir_all(dir).map_err(|source| CliError::CreateDir {
        path: dir.display().to_string(),
        source,
    })
}

/// File names longer than this many bytes are shortened (file systems
/// refuse names over 255 bytes).
const MAX_FILE_STEM: usize = 200;

/// `STEM.EXTENSION`, where a stem over `MAX_FILE_STEM` bytes becomes its
/// first 100 characters, `-` and 16 hex digits of a 64-bit FNV-1a hash of the
/// whole stem. Names in the text format never contain `-`, so a shortened
/// name never equals an unshortened one; the summary prints each name.
pub fn file_name(stem: &str, extension: &str) -> String {
    if stem.len() <= MAX_FILE_STEM {
        return format!("{stem}.{extension}");
    }
    let hash = stem.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let prefix: String = stem.chars().take(100).collect();
    format!("{prefix}-{hash:016x}.{extension}")
}

/// One summary line, and with `--out` the `.npy` file (named from `stem`,
/// see [`file_name`]; `resident.` and `_` keep outputs and residents apart).
pub(crate) fn write_summary_line(
    summary: &mut String,
    label: &str,
    tensor: &HostTensor,
    request: &RunRequest,
    stem: &str,
) -> Result<(), CliError> {
    let _ = write!(summary, "  {}", summarize(label, tensor));
    if let Some(dir) = &request.out {
        let path = dir.join(file_name(stem, "npy"));
        npy::write(&path, tensor)?;
        let _ = write!(summary, " -> {}", path.display());
    }
    summary.push('\n');
    Ok(())
}

/// `(16, 16)`, `(256,)`, `()`: a shape as NumPy writes it.
pub fn shape_text(shape: &[u32]) -> String {
    npy::shape_text(shape)
}

/// `y: f32[4] first [1.0, 2.0, 3.0, 4.0] min 1.0 max 4.0 sum 10`
pub fn summarize(name: &str, tensor: &HostTensor) -> String {
    const SHOWN: usize = 8;
    let dims = tensor
        .shape()
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    let values: Vec<String> = (0..tensor.len().min(SHOWN))
        .filter_map(|i| tensor.get(i).map(value_text))
        .collect();
    let more = if tensor.len() > SHOWN { ", ..." } else { "" };
    let mut text = format!(
        "{name}: {}[{dims}] first [{}{more}]",
        tensor.elem().keyword(),
        values.join(", ")
    );
    if tensor.is_empty() {
        return text;
    }
    // Streamed from the packed words: a summary copies nothing (the
    // tensor may be most of --memory-limit).
    let elem = tensor.elem();
    let bits = tensor
        .words()
        .iter()
        .flat_map(move |&w| {
            let halves = [w & 0xffff, w >> 16];
            let whole = [w, 0];
            if elem.is_16bit() {
                halves.into_iter().take(2)
            } else {
                whole.into_iter().take(1)
            }
        })
        .take(tensor.len());
    match elem {
        ScalarType::F32 | ScalarType::F16 | ScalarType::BF16 => {
            let (mut min, mut max, mut sum) = (f32::INFINITY, f32::NEG_INFINITY, 0f64);
            for v in bits.map(|b| Literal::from_bits(elem, b).as_f32().unwrap_or(f32::NAN)) {
                min = min.min(v);
                max = max.max(v);
                sum += f64::from(v);
            }
            let _ = write!(text, " min {min:?} max {max:?} sum {sum:?}");
        }
        ScalarType::I32 => {
            let (mut min, mut max, mut sum) = (i32::MAX, i32::MIN, 0i64);
            for v in bits.map(|b| b as i32) {
                min = min.min(v);
                max = max.max(v);
                sum += i64::from(v);
            }
            let _ = write!(text, " min {min} max {max} sum {sum}");
        }
        ScalarType::U32 | ScalarType::Bool => {
            let (mut min, mut max, mut sum) = (u32::MAX, 0u32, 0u64);
            for v in bits {
                min = min.min(v);
                max = max.max(v);
                sum += u64::from(v);
            }
            let _ = write!(text, " min {min} max {max} sum {sum}");
        }
    }
    text
}

/// A value as `mpmd run` shows it: the text format's literal
/// (`mpmd_core::text::print_literal`, the one printer), except that a `u32`
/// has no `u` suffix and an `f32` NaN reads `NaN`.
fn value_text(value: Literal) -> String {
    match value {
        Literal::U32(v) => v.to_string(),
        Literal::F32(bits) if bits.to_f32().is_nan() => "NaN".to_string(),
        _ => mpmd_core::text::print_literal(value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_show_as_the_text_formats_literals_less_the_u32_suffix() {
        let shown = [
            Literal::f32(1.5),
            Literal::f32(-0.0),
            Literal::f32(f32::INFINITY),
            Literal::f32(f32::NAN),
            Literal::I32(-7),
            Literal::U32(7),
            Literal::Bool(true),
            Literal::F16(0x3c00),
            Literal::BF16(0x7f80),
        ]
        .map(value_text);
        assert_eq!(
            shown,
            [
                "1.5",
                "-0.0",
                "inf",
                "NaN",
                "-7",
                "7",
                "true",
                "1.0f16",
                "bf16_bits(0x7f80)"
            ]
        );
    }

    #[test]
    fn long_file_names_are_shortened_with_a_hash() {
        assert_eq!(file_name("y", "npy"), "y.npy");
        let long = "a".repeat(300);
        let name = file_name(&long, "npy");
        assert_eq!(name.len(), 100 + 1 + 16 + 4);
        assert!(name.starts_with(&"a".repeat(100)));
        assert_ne!(name, file_name(&"a".repeat(301), "npy"));
    }

    #[test]
    fn summaries_show_shape_values_and_statistics() {
        let t = HostTensor::from_f32(vec![2, 2], &[1.0, -2.0, 3.5, 0.5]);
        assert_eq!(
            summarize("y", &t),
            "y: f32[2, 2] first [1.0, -2.0, 3.5, 0.5] min -2.0 max 3.5 sum 3.0"
        );
        let u = HostTensor::from_u32(vec![10], &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
        assert_eq!(
            summarize("h", &u),
            "h: u32[10] first [0, 1, 2, 3, 4, 5, 6, 7, ...] min 0 max 9 sum 45"
        );
    }
}
