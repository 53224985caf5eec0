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
    crate::files::write_replacing(path, &encode(tensor)).map_err(|source| NpyError::Write {
        path: path.display().to_string(),
        source,
    })
}

/// Bytes a header may take: numpy refuses headers over 10000 bytes unless
/// told otherwise (`max_header_size`), and the magic, version and length
/// come before it.
pub const MAX_HEADER_BYTES: u64 = 12 + 10_000;

/// Reads the `.npy` file at `path`, which must be a regular file of at most
/// [`MAX_HEADER_BYTES`] plus `max_data_bytes` bytes.
pub fn read_at_most(path: &Path, max_data_bytes: u64) -> Result<HostTensor, NpyError> {
    let bytes = crate::files::read_regular(path, MAX_HEADER_BYTES.saturating_add(max_data_bytes))
        .map_err(|source| NpyError::Read {
        path: path.display().to_string(),
        source,
    })?;
    decode(&bytes).map_err(|reason| NpyError::Format {
        path: path.display().to_string(),
        reason,
    })
}

/// Reads the `.npy` file at `path`, of any size a buffer may have.
pub fn read(path: &Path) -> Result<HostTensor, NpyError> {
    read_at_most(path, mpmd_core::ir::limits::MAX_BUFFER_BYTES)
}

/// What a `.npy` header says, read as numpy reads it.
#[derive(Debug, PartialEq, Eq)]
struct Header {
    descr: String,
    fortran_order: bool,
    shape: Vec<u64>,
}

/// Parses the bytes of a `.npy` file as `np.load` does: `|b1` arrays come
/// back as `bool` words (0 or 1); `<u4` arrays as `u32`; `<V2` (and `|V2`)
/// as `bf16`; big-endian (`>f4`, `>i4`, `>u4`, `>f2`) data is swapped and
/// Fortran-ordered data transposed into the row-major order of the shape.
pub fn decode(bytes: &[u8]) -> Result<HostTensor, String> {
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return Err("missing the \\x93NUMPY magic".into());
    }
    let (header_len, header_start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10usize),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        v => return Err(format!("unsupported format version {v}")),
    };
    let header_end = header_start
        .checked_add(header_len)
        .ok_or("truncated header")?;
    let header = bytes
        .get(header_start..header_end)
        .and_then(|h| std::str::from_utf8(h).ok())
        .ok_or("truncated or non-text header")?;
    let Header {
        descr,
        fortran_order,
        shape: dims,
    } = parse_header(header)?;
    let (elem, width, big_endian) = match descr.as_str() {
        "<f4" => (ScalarType::F32, 4u128, false),
        "<i4" => (ScalarType::I32, 4, false),
        "<u4" => (ScalarType::U32, 4, false),
        "|b1" => (ScalarType::Bool, 1, false),
        "<f2" => (ScalarType::F16, 2, false),
        "<V2" | "|V2" => (ScalarType::BF16, 2, false),
        ">f4" => (ScalarType::F32, 4u128, true),
        ">i4" => (ScalarType::I32, 4, true),
        ">u4" => (ScalarType::U32, 4, true),
        ">f2" => (ScalarType::F16, 2, true),
        other => {
            return Err(format!(
                "dtype `{other}` is not supported (use <f4, <i4, <u4, <f2 for f16, <V2 for bf16 as np.save writes an ml_dtypes.bfloat16 array, or |b1; >f4, >i4, >u4 and >f2 are swapped)"
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
    let width = width as usize;
    let mut data = data.to_vec();
    if big_endian {
        data.chunks_exact_mut(width).for_each(<[u8]>::reverse);
    }
    if fortran_order {
        data = fortran_to_row_major(&data, &shape, width);
    }
    if width == 1 {
        let words = data.iter().map(|&b| u32::from(b != 0)).collect();
        return HostTensor::new(elem, shape, words).map_err(|e| e.to_string());
    }
    HostTensor::from_bytes(elem, shape, &data).map_err(|e| e.to_string())
}

/// Elements of `width` bytes stored column-major (the first index varies
/// fastest) for `shape`, put in row-major order (the last index varies
/// fastest). `data` holds exactly the shape's elements.
fn fortran_to_row_major(data: &[u8], shape: &[u32], width: usize) -> Vec<u8> {
    if shape.len() < 2 || data.is_empty() {
        return data.to_vec();
    }
    // Column-major strides, in elements.
    let mut strides = Vec::with_capacity(shape.len());
    let mut stride = 1usize;
    for &d in shape {
        strides.push(stride);
        stride *= d as usize;
    }
    let mut out = Vec::with_capacity(data.len());
    let mut index = vec![0u32; shape.len()];
    let mut offset = 0usize;
    loop {
        out.extend_from_slice(&data[offset * width..(offset + 1) * width]);
        // Row-major odometer: the last index turns fastest.
        let mut axis = shape.len();
        loop {
            if axis == 0 {
                return out;
            }
            axis -= 1;
            index[axis] += 1;
            offset += strides[axis];
            if index[axis] < shape[axis] {
                break;
            }
            offset -= strides[axis] * shape[axis] as usize;
            index[axis] = 0;
        }
    }
}

/// The header dictionary, read as numpy reads it: a Python dict literal
/// (`ast.literal_eval`; a key given twice keeps its last value) holding
/// exactly the keys `descr` (a string), `fortran_order` (`True` or `False`)
/// and `shape` (a tuple of non-negative integers; `L` suffixes, which
/// Python 2 wrote, are accepted as numpy does). Anything else Python would
/// accept (escapes, comments, string concatenation, other value types) is
/// refused rather than guessed at.
fn parse_header(text: &str) -> Result<Header, String> {
    let mut p = HeaderParser { text, at: 0 };
    let (mut descr, mut fortran_order, mut shape) = (None, None, None);
    p.expect('{')?;
    loop {
        p.skip_space();
        if p.eat('}') {
            break;
        }
        let key = p.string()?;
        p.expect(':')?;
        match key {
            "descr" => {
                p.skip_space();
                if p.rest().starts_with('[') {
                    return Err(
                        "structured dtypes (a list as 'descr') are not supported".into()
                    );
                }
                descr = Some(p.string()?.to_string());
            }
            "fortran_order" => fortran_order = Some(p.boolean()?),
            "shape" => shape = Some(p.shape()?),
            other => {
                return Err(format!(
                    "the header has the key '{other}', and numpy reads only 'descr', 'fortran_order' and 'shape'"
                ))
            }
        }
        p.skip_space();
        if !p.eat(',') {
            p.expect('}')?;
            break;
        }
    }
    if !p
        .rest()
        .trim_matches([' ', '\t', '\n', '\r', '\x0c'])
        .is_empty()
    {
        return Err(format!(
            "the header has `{}` after its dictionary",
            p.rest().trim()
        ));
    }
    let missing = |key: &str| format!("the header has no '{key}'");
    Ok(Header {
        descr: descr.ok_or_else(|| missing("descr"))?,
        fortran_order: fortran_order.ok_or_else(|| missing("fortran_order"))?,
        shape: shape.ok_or_else(|| missing("shape"))?,
    })
}

struct HeaderParser<'h> {
    text: &'h str,
    at: usize,
}

impl<'h> HeaderParser<'h> {
    fn rest(&self) -> &'h str {
        &self.text[self.at..]
    }

    fn skip_space(&mut self) {
        let rest = self.rest();
        self.at += rest.len() - rest.trim_start_matches([' ', '\t', '\n', '\r']).len();
    }

    fn eat(&mut self, c: char) -> bool {
        self.skip_space();
        if self.rest().starts_with(c) {
            self.at += c.len_utf8();
            true
        } else {
            false
        }
    }

    /// What comes next, for messages.
    fn next_text(&self) -> String {
        let rest = self.rest().trim_end();
        match rest.char_indices().nth(20) {
            Some((end, _)) => format!("`{}...`", &rest[..end]),
            None if rest.is_empty() => "the end of the header".into(),
            None => format!("`{rest}`"),
        }
    }

    fn expected(&self, what: &str) -> String {
        format!(
            "the header is not a dictionary as numpy writes it: expected {what}, found {}",
            self.next_text()
        )
    }

    fn expect(&mut self, c: char) -> Result<(), String> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(self.expected(&format!("`{c}`")))
        }
    }

    /// A quoted string without escapes.
    fn string(&mut self) -> Result<&'h str, String> {
        self.skip_space();
        let rest = self.rest();
        let Some(quote) = rest.chars().next().filter(|c| *c == '\'' || *c == '"') else {
            return Err(self.expected("a quoted string"));
        };
        let body = &rest[1..];
        let Some(end) = body.find(quote) else {
            return Err(self.expected("a closed string"));
        };
        let value = &body[..end];
        if value.contains(['\\', '\n', '\r']) {
            return Err(format!(
                "the header string {quote}{value}{quote} has an escape or a line break, which numpy never writes"
            ));
        }
        self.at += 1 + end + 1;
        // `'a' 'b'` is one string to Python: refuse rather than misread.
        self.skip_space();
        if self.rest().starts_with(['\'', '"']) {
            return Err(self.expected("`,`, `:` or `}` after a string"));
        }
        Ok(value)
    }

    fn word(&mut self) -> &'h str {
        self.skip_space();
        let rest = self.rest();
        let len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        &rest[..len]
    }

    fn boolean(&mut self) -> Result<bool, String> {
        let value = match self.word() {
            "True" => true,
            "False" => false,
            _ => return Err(self.expected("`True` or `False` as 'fortran_order'")),
        };
        self.at += self.word().len();
        Ok(value)
    }

    /// `()`, `(16,)`, `(16, 16)`, `(16, 16,)`: a tuple of integers (`(16)`
    /// is an integer to Python, not a tuple).
    fn shape(&mut self) -> Result<Vec<u64>, String> {
        self.expect('(')?;
        let mut dims = Vec::new();
        loop {
            // `()`, or after a trailing comma.
            if self.eat(')') {
                break;
            }
            let word = self.word();
            let digits = word.strip_suffix('L').unwrap_or(word);
            let valid = !digits.is_empty()
                && digits.bytes().all(|b| b.is_ascii_digit())
                && (digits == "0" || !digits.starts_with('0'));
            let dim = valid
                .then(|| digits.parse::<u64>().ok())
                .flatten()
                .ok_or_else(|| self.expected("a non-negative integer in 'shape'"))?;
            self.at += word.len();
            dims.push(dim);
            if !self.eat(',') {
                self.expect(')')?;
                if dims.len() == 1 {
                    return Err(
                        "'shape' is `(n)`, an integer to Python: numpy writes `(n,)`".into(),
                    );
                }
                break;
            }
        }
        Ok(dims)
    }
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

    /// A version 1.0 file with `header` (padded as numpy pads it) and `data`.
    fn with_header(header: &str, data: &[u8]) -> Vec<u8> {
        let mut h = header.to_string();
        h.push_str(&" ".repeat((10 + h.len() + 1).next_multiple_of(64) - (10 + h.len() + 1)));
        h.push('\n');
        let len = (h.len() as u16).to_le_bytes();
        [b"\x93NUMPY\x01\x00".as_slice(), &len, h.as_bytes(), data].concat()
    }

    fn f32_bytes(values: impl IntoIterator<Item = f32>, big_endian: bool) -> Vec<u8> {
        values
            .into_iter()
            .flat_map(|v| {
                if big_endian {
                    v.to_be_bytes()
                } else {
                    v.to_le_bytes()
                }
            })
            .collect()
    }

    /// A key given twice keeps its last value, as `ast.literal_eval` (and
    /// so `np.load`) reads a dict literal.
    #[test]
    fn duplicate_keys_keep_the_last_value_as_numpy_does() {
        let iota = |n: u32| (0..n).map(|i| i as f32);
        let shape = with_header(
            "{'descr': '<f4', 'fortran_order': False, 'shape': (6,), 'shape': (2, 3)}",
            &f32_bytes(iota(6), false),
        );
        assert_eq!(decode(&shape).unwrap().shape(), &[2, 3]);
        let descr = with_header(
            "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'descr': '>f4'}",
            &f32_bytes([1.0, -2.5, 3.0], true),
        );
        assert_eq!(decode(&descr).unwrap().to_f32(), [1.0, -2.5, 3.0]);
        // np.arange(6).reshape(2, 3) saved in Fortran order: column by column.
        let fortran = with_header(
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'fortran_order': True}",
            &f32_bytes([0.0, 3.0, 1.0, 4.0, 2.0, 5.0], false),
        );
        let t = decode(&fortran).unwrap();
        assert_eq!(
            (t.shape(), t.to_f32()),
            (&[2u32, 3][..], iota(6).collect::<Vec<_>>())
        );
    }

    #[test]
    fn fortran_order_is_transposed_in_every_dimension() {
        // a[i, j, k] = 100 i + 10 j + k for shape (2, 3, 4), stored with i
        // fastest.
        let shape = [2u32, 3, 4];
        let mut column_major = Vec::new();
        for k in 0..4 {
            for j in 0..3 {
                for i in 0..2 {
                    column_major.push((100 * i + 10 * j + k) as f32);
                }
            }
        }
        let bytes = with_header(
            "{'descr': '>f4', 'fortran_order': True, 'shape': (2, 3, 4), }",
            &f32_bytes(column_major, true),
        );
        let t = decode(&bytes).unwrap();
        let mut row_major = Vec::new();
        for i in 0..2 {
            for j in 0..3 {
                for k in 0..4 {
                    row_major.push((100 * i + 10 * j + k) as f32);
                }
            }
        }
        assert_eq!((t.shape(), t.to_f32()), (&shape[..], row_major));
        // 16-bit and integer big-endian data is swapped too.
        let f16 = with_header(
            "{'descr': '>f2', 'fortran_order': False, 'shape': (1,), }",
            &[0x3c, 0x00],
        );
        assert_eq!(decode(&f16).unwrap().to_f32(), [1.0]);
        let i32s = with_header(
            "{'descr': '>i4', 'fortran_order': True, 'shape': (2,), }",
            &[0xff, 0xff, 0xff, 0xfe, 0, 0, 0, 7],
        );
        assert_eq!(decode(&i32s).unwrap().to_i32(), [-2, 7]);
    }

    #[test]
    fn headers_numpy_would_not_read_are_refused() {
        let data = f32_bytes([0.0; 4], false);
        let refused = |header: &str| decode(&with_header(header, &data)).unwrap_err();
        assert_eq!(
            refused(
                "{'descr': '<f4', 'x': \"'shape': (4,)\", 'fortran_order': False, 'shape': (4,)}"
            ),
            "the header has the key 'x', and numpy reads only 'descr', 'fortran_order' and 'shape'"
        );
        assert_eq!(
            refused("{'descr': '<f4', 'fortran_order': False, 'shape': (4)}"),
            "'shape' is `(n)`, an integer to Python: numpy writes `(n,)`"
        );
        assert_eq!(
            refused("{'descr': '<f4', 'shape': (4,)}"),
            "the header has no 'fortran_order'"
        );
        assert_eq!(
            refused("{'descr': '<f4', 'fortran_order': 0, 'shape': (4,)}"),
            "the header is not a dictionary as numpy writes it: expected `True` or `False` as 'fortran_order', found `0, 'shape': (4,)}`"
        );
        assert_eq!(
            refused("{'descr': '<f4', 'fortran_order': False, 'shape': (-4,)}"),
            "the header is not a dictionary as numpy writes it: expected a non-negative integer in 'shape', found `-4,)}`"
        );
        assert_eq!(
            refused("{'descr': '<' 'f4', 'fortran_order': False, 'shape': (4,)}"),
            "the header is not a dictionary as numpy writes it: expected `,`, `:` or `}` after a string, found `'f4', 'fortran_order...`"
        );
        assert_eq!(
            refused("{'descr': '<f\\x34', 'fortran_order': False, 'shape': (4,)}"),
            "the header string '<f\\x34' has an escape or a line break, which numpy never writes"
        );
        assert_eq!(
            refused("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (4,)}"),
            "structured dtypes (a list as 'descr') are not supported"
        );
        assert_eq!(
            refused("{'descr': '<f4', 'fortran_order': False, 'shape': (4,)} # (2, 2)"),
            "the header has `# (2, 2)` after its dictionary"
        );
        assert!(
            refused("{'descr': '<f8', 'fortran_order': False, 'shape': (2,)}")
                .starts_with("dtype `<f8` is not supported")
        );
        // What Python 2's numpy wrote: `L` suffixes, no trailing comma.
        let old = with_header(
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 2L)}",
            &data,
        );
        assert_eq!(decode(&old).unwrap().shape(), &[2, 2]);
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
