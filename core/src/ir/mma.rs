//! The warp-collective matrix multiply-accumulate `mma_m16n8k16(d, a, b, c);`
//! (docs/design.md, "Semantics"): the shape of PTX
//! `mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32`. Each
//! lane holds its fragments in `local` arrays, in PTX's layout
//! (docs/text-format.md, "Matrix multiply-accumulate"): with `g = lane >> 2`
//! and `q = lane % 4`: [`a_position`], [`b_position`] and
//! [`c_position`].

use super::{BinaryOp, Expr, Fragment, Literal, RefAccess, ScalarType, Stmt, WARP_SIZE};

/// The text-format name of the statement.
pub const NAME: &str = "mma_m16n8k16";
/// Rows of A, C and D.
pub const M: u32 = 16;
/// Columns of B, C and D.
pub const N: u32 = 8;
/// Columns of A, rows of B: the products summed per element.
pub const K: u32 = 16;
/// Elements of A one lane holds (`local f16[8]` or `bf16[8]`).
pub const A_LEN: u32 = 8;
/// Elements of B one lane holds (`local f16[4]` or `bf16[4]`, A's type).
pub const B_LEN: u32 = 4;
/// Elements of C and D one lane holds (`local f32[4]`).
pub const C_LEN: u32 = 4;

/// The element types A and B may have (both the same).
pub const INPUT_TYPES: [ScalarType; 2] = [ScalarType::F16, ScalarType::BF16];

/// `(row, col)` in the 16x16 row-major A of element `i` of lane `lane`'s
/// A fragment.
pub fn a_position(lane: u32, i: u32) -> (u32, u32) {
    let (g, q) = (lane >> 2, lane % 4);
    (g + 8 * ((i / 2) % 2), 2 * q + (i % 2) + 8 * (i / 4))
}

/// `(k, n)` in the 16x8 B (K rows, N columns) of element `i` of lane
/// `lane`'s B fragment.
pub fn b_position(lane: u32, i: u32) -> (u32, u32) {
    let (g, q) = (lane >> 2, lane % 4);
    (2 * q + (i % 2) + 8 * (i / 2), g)
}

/// `(row, col)` in the 16x8 C (and D) of element `i` of lane `lane`'s
/// C (and D) fragment.
pub fn c_position(lane: u32, i: u32) -> (u32, u32) {
    let (g, q) = (lane >> 2, lane % 4);
    (g + 8 * (i / 2), 2 * q + (i % 2))
}

/// The fragment loads: `mma_load_a` loads the lane's A fragment of a
/// 16x16 block, `mma_load_b` its B fragment of a 16x8 (K x N) block, and
/// `mma_load_b_kmajor` its B fragment from B stored K-major, that is Bᵀ
/// row-major: an 8x16 (N x K) block (the keys of Q·Kᵀ, stored one key a
/// row). Each reads a row-major tile whose top-left element the source
/// access names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operand {
    A,
    B,
    /// B from its transpose: element `(k, n)` of B is element `(n, k)` of
    /// the block.
    BKMajor,
}

impl Operand {
    pub const ALL: [Operand; 3] = [Self::A, Self::B, Self::BKMajor];

    /// The text-format name of the load.
    pub fn load_name(self) -> &'static str {
        match self {
            Self::A => "mma_load_a",
            Self::B => "mma_load_b",
            Self::BKMajor => "mma_load_b_kmajor",
        }
    }

    /// The operand's role in `mma_m16n8k16(d, a, b, c)`.
    pub fn role(self) -> &'static str {
        match self {
            Self::A => "a",
            Self::B | Self::BKMajor => "b",
        }
    }

    /// Elements of the fragment one lane holds.
    pub fn fragment_len(self) -> u32 {
        match self {
            Self::A => A_LEN,
            Self::B | Self::BKMajor => B_LEN,
        }
    }

    /// (rows, columns) of the block: 16x16 (M x K) for A, 16x8 (K x N)
    /// for B, 8x16 (N x K) for K-major B.
    pub fn block_shape(self) -> (u32, u32) {
        match self {
            Self::A => (M, K),
            Self::B => (K, N),
            Self::BKMajor => (N, K),
        }
    }

    /// `(row, col)` in the block of element `i` of lane `lane`'s
    /// fragment: [`a_position`], [`b_position`], or for K-major B
    /// [`b_position`] transposed, `(n, k)`.
    pub fn position(self, lane: u32, i: u32) -> (u32, u32) {
        match self {
            Self::A => a_position(lane, i),
            Self::B => b_position(lane, i),
            Self::BKMajor => {
                let (k, n) = b_position(lane, i);
                (n, k)
            }
        }
    }
}

/// What `operand`'s load into `dest` from `source` means: one element
/// store a fragment element, `dest[i] = source[.., r0 + row, k0 + col]`
/// with `(row, col)` = [`Operand::position`] of the lane (`lane` =
/// `axis_index(thread_axis) % 32u`), the sums `u32` additions as `+`
/// computes them. The interpreter and the WGSL backend run these; the
/// CUDA backend too, except where `ldmatrix` does the same.
pub fn element_loads(
    operand: Operand,
    dest: &Fragment,
    source: &RefAccess,
    thread_axis: &str,
) -> Vec<Stmt> {
    let u32_lit = |v: u32| Expr::Lit(Literal::U32(v));
    let bin = |op, a: Expr, b: Expr| Expr::Binary(op, Box::new(a), Box::new(b));
    let plus = |a: Expr, v: u32| match v {
        0 => a,
        v => bin(BinaryOp::Add, a, u32_lit(v)),
    };
    let lane = bin(
        BinaryOp::Rem,
        Expr::AxisIndex(thread_axis.to_string()),
        u32_lit(WARP_SIZE),
    );
    // The lane's part of each position: g = lane >> 2 and 2q = 2 (lane % 4).
    let g = bin(BinaryOp::Shr, lane.clone(), u32_lit(2));
    let two_q = bin(
        BinaryOp::Mul,
        bin(BinaryOp::Rem, lane, u32_lit(4)),
        u32_lit(2),
    );
    let (row_lane, col_lane) = match operand {
        Operand::A | Operand::BKMajor => (g, two_q),
        Operand::B => (two_q, g),
    };
    let dims = source.index.len();
    (0..operand.fragment_len())
        .map(|i| {
            // Lane 0's position is the constant part.
            let (row, col) = operand.position(0, i);
            let mut index = source.index.clone();
            if dims >= 2 {
                let origin_row = index[dims - 2].clone();
                let origin_col = index[dims - 1].clone();
                index[dims - 2] = bin(BinaryOp::Add, origin_row, plus(row_lane.clone(), row));
                index[dims - 1] = bin(BinaryOp::Add, origin_col, plus(col_lane.clone(), col));
            }
            Stmt::Store {
                target: dest.element(i),
                value: Expr::Load(Box::new(RefAccess {
                    base: source.base.clone(),
                    block: source.block.clone(),
                    index,
                })),
            }
        })
        .collect()
}
