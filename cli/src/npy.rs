//! A minimal `.npy` (NumPy format 1.0/2.0) reader and writer for
//! little-endian arrays: `<f4`, `<i4`, `<u4`, `<f2` (f16), `<V2` (bf16: what
//! `np.save` writes for an `ml_dtypes.bfloat16` array, which is how JAX and
//! ml_dtypes users store bf16), and `|b1` on input for bool.

use std::path::Path;

use mpmd_core::ir::ScalarType;
use mpmd_core::HostTensor;
use thiserror::Error;

const MAGIC: &[u8] = b"\x93NUMPY";

#[derive(Debug, Error)]
pub enum NpyError {
    #[error("cannot read `{path}`: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot write `{path}`: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
    #[error("`{path}` is not a .npy file: {reason}")]
    Format { path: String, reason: String },
}

/// The `.npy` dtype an element type is written as (bool as `<u4`).
pub fn descr_of(elem: ScalarType) -> &'static str {
    match elem {
        ScalarType::F32 => "<f4",
        ScalarType::I32 => "<i4",
        ScalarType::U32 | ScalarType::Bool => "<u4",
        ScalarType::F16 => "<f2",
        // NumPy has no bfloat16; ml_dtypes' arrays are saved as 2-byte voids
        // and read back with `np.load(f).view(ml_dtypes.bfloat16)`.
        ScalarType::BF16 => "<V2",
    }
}

/// The `.npy` dtype a tensor read from a file came as (`bool` from `|b1`).
pub fn read_descr_of(elem: ScalarType) -> &'static str {
    match elem {
        ScalarType::Bool => "|b1",
        other => descr_of(other),
    }
}

/// `(16, 16)`, `(256,)`, `()`: a shape as NumPy writes it.
pub fn shape_text(shape: &[u32]) -> String {
    match shape {
        [one] => format!("({one},)"),
        dims => format!(
            "({})",
            dims.iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The bytes of a `.npy` file holding `tensor`.
pub fn encode(tensor: &HostTensor) -> Vec<u8> {
    let shape = shape_text(tensor.shape());
    let mut header = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {shape}, }}",
        descr_of(tensor.elem())
    );
    // Magic (6) + version (2) + length (2) + header + '\n' is a multiple of 64.
    let unpadded = MAGIC.len() + 4 + header.len() + 1;
    header.push_str(&" ".repeat(unpadded.next_multiple_of(64) - unpadded));
    header.push('\n');

    let data = tensor.bytes();
    let mut bytes = Vec::with_capacity(unpadded + 64 + data.len());
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&[1, 0]);
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(&data);
    bytes
}

pub fn write(path: &Path, tensor: &HostTensor) -> Result<(), NpyError> {
    std::fs::write(path, encode(tensor)).map_err(|source| NpyError::Write {
        path: path.display().to_string(),
        source,
    })
}

pub fn read(path: &Path) -> Result<HostTensor, NpyError> {
    let bytes = std::fs::read(path).map_err(|source| NpyError::Read {
        path: path.display().to_string(),
        source,
    })?;
    decode(&bytes).map_err(|reason| NpyError::Format {
        path: path.display().to_string(),
        reason,
    })
}

/// Parses the bytes of a `.npy` file. `|b1` arrays come back as `bool`
/// words (0 or 1); `<u4` arrays as `u32`; `<V2` (and `|V2`) as `bf16`.
pub fn decode(bytes: &[u8]) -> Result<HostTensor, String> {
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return Err("missing the \\x93NUMPY magic".into());
    }
    let (header_len, header_start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        v => return Err(format!("unsupported format version {v}")),
    };
    let header_end = header_start + header_len;
    let header = bytes
        .get(header_start..header_end)
        .and_then(|h| std::str::from_utf8(h).ok())
        .ok_or("truncated or non-text header")?;
    let descr = quoted_value(header, "descr").ok_or("header has no 'descr'")?;
    if header_value(header, "fortran_order").is_some_and(|v| v.starts_with("True")) {
        return Err("Fortran-ordered arrays are not supported".into());
    }
    let dims = parse_shape(header).ok_or("header has no valid 'shape'")?;
    let (elem, width) = match descr {
        "<f4" => (ScalarType::F32, 4u128),
        "<i4" => (ScalarType::I32, 4),
        "<u4" => (ScalarType::U32, 4),
        "|b1" => (ScalarType::Bool, 1),
        "<f2" => (ScalarType::F16, 2),
        "<V2" | "|V2" => (ScalarType::BF16, 2),
        other => {
            return Err(format!(
                "dtype `{other}` is not supported (use <f4, <i4, <u4, <f2 for f16, <V2 for bf16 as np.save writes an ml_dtypes.bfloat16 array, or |b1)"
            ))
        }
    };
    // Sizes are checked, never wrapped: a header may declare anything.
    let dims_text = || {
        format!(
            "({})",
            dims.iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
                + if dims.len() == 1 { "," } else { "" }
        )
    };
    let shape: Vec<u32> = dims
        .iter()
        .map(|&d| u32::try_from(d))
        .collect::<Result<_, _>>()
        .map_err(|_| {
            format!(
                "shape {} has a dimension larger than {}, more than any mpmd ref holds",
                dims_text(),
                u32::MAX
            )
        })?;
    let count = dims
        .iter()
        .try_fold(1u128, |n, &d| n.checked_mul(u128::from(d)))
        .filter(|&n| n <= u128::from(u64::MAX))
        .ok_or_else(|| {
            format!(
                "shape {} has more than 2^64 elements, and the file holds {} data bytes",
                dims_text(),
                bytes.len() - header_end
            )
        })?;
    let data = &bytes[header_end..];
    if data.len() as u128 != count * width {
        return Err(format!(
            "shape {} needs {} data bytes, the file has {}",
            dims_text(),
            count * width,
            data.len()
        ));
    }
    if width == 1 {
        let words = data.iter().map(|&b| u32::from(b != 0)).collect();
        return HostTensor::new(elem, shape, words).map_err(|e| e.to_string());
    }
    HostTensor::from_bytes(elem, shape, data).map_err(|e| e.to_string())
}

/// The text after `'key':` up to the next `,` or `}` at top level.
fn header_value<'h>(header: &'h str, key: &str) -> Option<&'h str> {
    let pattern = format!("'{key}':");
    let start = header.find(&pattern)? + pattern.len();
    Some(header[start..].trim_start())
}

fn quoted_value<'h>(header: &'h str, key: &str) -> Option<&'h str> {
    let rest = header_value(header, key)?;
    let quote = rest.chars().next().filter(|c| *c == '\'' || *c == '"')?;
    let rest = &rest[1..];
    Some(&rest[..rest.find(quote)?])
}

fn parse_shape(header: &str) -> Option<Vec<u64>> {
    let rest = header_value(header, "shape")?.strip_prefix('(')?;
    let inner = &rest[..rest.find(')')?];
    inner
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(|d| d.trim_end_matches('L').parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_type() {
        let tensors = [
            HostTensor::from_f32(vec![2, 3], &[1.0, -2.5, 0.0, 3.0, f32::MAX, -0.0]),
            HostTensor::from_i32(vec![4], &[i32::MIN, -1, 0, 7]),
            HostTensor::from_u32(vec![1], &[u32::MAX]),
            HostTensor::new(ScalarType::F16, vec![3], vec![0x3c00, 0x8001, 0x7c00]).unwrap(),
            HostTensor::new(ScalarType::BF16, vec![1, 3], vec![0x3f80, 0xc020, 0x3dcd]).unwrap(),
        ];
        for tensor in tensors {
            let bytes = encode(&tensor);
            let size = tensor.elem().byte_size() as usize;
            assert_eq!(bytes.len() % 64, (tensor.len() * size) % 64);
            assert_eq!(decode(&bytes).unwrap(), tensor);
        }
    }

    #[test]
    fn header_is_numpy_format() {
        let bytes = encode(&HostTensor::from_f32(vec![3], &[1.0, 2.0, 3.0]));
        assert_eq!(&bytes[..8], b"\x93NUMPY\x01\x00");
        let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
        assert_eq!(header_len + 10, 128);
        let header = std::str::from_utf8(&bytes[10..10 + header_len]).unwrap();
        assert!(header.starts_with("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }"));
        assert!(header.ends_with(" \n"));
    }

    #[test]
    fn bool_is_written_as_u4_and_b1_is_read_as_bool() {
        let t = HostTensor::new(ScalarType::Bool, vec![2], vec![1, 0]).unwrap();
        assert!(String::from_utf8_lossy(&encode(&t)).contains("'<u4'"));
        // A `|b1` file: same header layout, one byte per element.
        let header = encode(&HostTensor::from_u32(vec![2], &[]));
        let mut bytes = replace(&header, b"<u4", b"|b1");
        bytes.extend_from_slice(&[0, 5]);
        let decoded = decode(&bytes).unwrap();
        assert_eq!(
            (decoded.elem(), decoded.to_bits()),
            (ScalarType::Bool, vec![0, 1])
        );
    }

    fn replace(haystack: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
        let at = haystack
            .windows(from.len())
            .position(|w| w == from)
            .unwrap();
        [&haystack[..at], to, &haystack[at + from.len()..]].concat()
    }

    /// The bytes `np.save` writes for `np.array([1.0, -2.5, 0.1],
    /// dtype=ml_dtypes.bfloat16)` (ml_dtypes 0.5, numpy 2) and for
    /// `np.array([1.0, -2.5], dtype=np.float16)`.
    #[test]
    fn reads_what_numpy_and_ml_dtypes_write() {
        let header = |descr: &str, shape: &str| {
            let text =
                format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
            let mut h = text.clone();
            h.push_str(&" ".repeat(117 - text.len()));
            h.push('\n');
            [b"\x93NUMPY\x01\x00v\x00".as_slice(), h.as_bytes()].concat()
        };
        let bf16 = [
            header("<V2", "(3,)"),
            vec![0x80, 0x3f, 0x20, 0xc0, 0xcd, 0x3d],
        ]
        .concat();
        let t = decode(&bf16).unwrap();
        assert_eq!(t.elem(), ScalarType::BF16);
        assert_eq!(
            t.to_f32(),
            vec![1.0, -2.5, mpmd_core::numerics::bf16_to_f32(0x3dcd)]
        );
        assert_eq!(
            encode(&t),
            bf16,
            "bf16 is written back as ml_dtypes writes it"
        );
        let f16 = [header("<f2", "(2,)"), vec![0x00, 0x3c, 0x00, 0xc1]].concat();
        let t = decode(&f16).unwrap();
        assert_eq!((t.elem(), t.to_f32()), (ScalarType::F16, vec![1.0, -2.5]));
        assert_eq!(encode(&t), f16);
        let mut odd = f16.clone();
        odd.pop();
        assert_eq!(
            decode(&odd).unwrap_err(),
            "shape (2,) needs 4 data bytes, the file has 3"
        );
    }

    #[test]
    fn rejects_short_data() {
        let mut bytes = encode(&HostTensor::from_i32(vec![2], &[1, 2]));
        bytes.pop();
        assert_eq!(
            decode(&bytes).unwrap_err(),
            "shape (2,) needs 8 data bytes, the file has 7"
        );
    }
}
