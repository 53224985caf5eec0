//! The mpmd IR: one documented data structure that every other part reads.
//!
//! A [`Module`] holds meshes, kernels, MPMD maps, device-resident refs and a
//! sequence of calls. A file's `case` section is test data, not IR: it lives
//! in [`crate::case`]. The IR carries no source spans, so that
//! `parse(print(x)) == x` is plain structural equality; the parser records
//! spans on the side in a [`crate::text::SourceMap`] keyed by [`IrPath`].
//!
//! Conventions every part relies on (see ARCHITECTURE.md, "IR conventions"):
//! - every scalar is 32 bits wide; `bool` is stored as a `u32` holding 0 or 1;
//! - a mesh's *block coordinates* are its grid axes then its cluster axes; the
//!   linear block id is row-major over them (the last axis varies fastest);
//! - a ref type `T @ M` has one instance per block of `M`, laid out in memory
//!   by `M`'s linear block id, each instance row-major over `T`'s shape.

mod builder;
pub mod fold;
pub mod limits;
mod path;
mod typing;
pub mod visit;

pub use builder::*;
pub use path::{IrPath, PathStep};
pub use typing::{binary_symbol, type_of, unary_symbol, Scope, TypeError};

/// Identifiers: meshes, axes, kernels, maps, operands, locals.
pub type Name = String;

/// A 32-bit scalar type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ScalarType {
    F32,
    I32,
    U32,
    Bool,
    /// IEEE binary16, stored packed (2 bytes an element).
    F16,
    /// bfloat16 (the high half of an `f32`), stored packed (2 bytes an element).
    BF16,
}

impl std::fmt::Display for ScalarType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.keyword())
    }
}

impl ScalarType {
    pub const ALL: [ScalarType; 6] = [
        Self::F32,
        Self::I32,
        Self::U32,
        Self::Bool,
        Self::F16,
        Self::BF16,
    ];

    /// The keyword used by the text format (`f32`, `i32`, `u32`, `bool`, `f16`, `bf16`).
    pub fn keyword(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::I32 => "i32",
            Self::U32 => "u32",
            Self::Bool => "bool",
            Self::F16 => "f16",
            Self::BF16 => "bf16",
        }
    }

    /// Bytes one element takes in memory, on every backend (`bool` is a
    /// 32-bit word; 16-bit floats are packed).
    pub fn byte_size(self) -> u32 {
        if self.is_16bit() {
            2
        } else {
            4
        }
    }

    /// `f16` or `bf16`: stored in 2 bytes, computed in `f32` and rounded once.
    pub fn is_16bit(self) -> bool {
        matches!(self, Self::F16 | Self::BF16)
    }

    /// `f32`, `f16` or `bf16`.
    pub fn is_float(self) -> bool {
        matches!(self, Self::F32 | Self::F16 | Self::BF16)
    }

    pub fn is_integer(self) -> bool {
        matches!(self, Self::I32 | Self::U32)
    }

    pub fn is_numeric(self) -> bool {
        !matches!(self, Self::Bool)
    }
}

/// Where a ref lives and who sees it (docs/design.md, "The IR").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MemorySpace {
    /// Device memory, seen by every thread of every program.
    Gmem,
    /// Per block of one program.
    Smem,
    /// Device-memory `i32` counters, only through signal / wait / read.
    Sem,
    /// Per thread.
    Local,
}

impl MemorySpace {
    pub const ALL: [MemorySpace; 4] = [Self::Gmem, Self::Smem, Self::Sem, Self::Local];

    pub fn keyword(self) -> &'static str {
        match self {
            Self::Gmem => "gmem",
            Self::Smem => "smem",
            Self::Sem => "sem",
            Self::Local => "local",
        }
    }

    /// Device-resident spaces outlive a call and may belong to external meshes.
    pub fn is_device_resident(self) -> bool {
        matches!(self, Self::Gmem | Self::Sem)
    }
}

/// A statically shaped array in a memory space, optionally owned by a mesh.
///
/// For `sem`, `elem` is always [`ScalarType::I32`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RefType {
    pub space: MemorySpace,
    pub elem: ScalarType,
    /// Row-major extents, outermost first. At least one dimension.
    pub shape: Vec<u32>,
    /// `T @ M`: one instance of this array per block of mesh `M`.
    pub owner: Option<Name>,
}

impl RefType {
    /// Elements in one instance; `u64::MAX` when the count does not fit
    /// (validation refuses such refs, see [`limits`]; never wraps).
    pub fn len(&self) -> u64 {
        self.checked_len().unwrap_or(u64::MAX)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The type of a kernel parameter or map operand.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Type {
    Scalar(ScalarType),
    Ref(RefType),
}

impl Type {
    pub fn as_ref_type(&self) -> Option<&RefType> {
        match self {
            Type::Ref(r) => Some(r),
            Type::Scalar(_) => None,
        }
    }
}

/// A named axis of a mesh.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Axis {
    pub name: Name,
    pub size: u32,
}

/// A mesh: up to 3 grid axes, up to 3 cluster axes, one thread axis.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Mesh {
    pub name: Name,
    pub grid: Vec<Axis>,
    pub cluster: Vec<Axis>,
    pub threads: Axis,
}

impl Mesh {
    /// Grid axes, then cluster axes: the axes a block coordinate names.
    pub fn block_axes(&self) -> impl Iterator<Item = &Axis> {
        self.grid.iter().chain(self.cluster.iter())
    }

    /// Number of blocks: the product of the grid and cluster axis sizes;
    /// `u64::MAX` when it does not fit (validation refuses more than
    /// [`limits::MAX_BLOCKS`]; never wraps).
    pub fn block_count(&self) -> u64 {
        self.checked_block_count().unwrap_or(u64::MAX)
    }

    /// `shape()` of docs/design.md: grid axes, then cluster axes, then the thread axis.
    pub fn shape(&self) -> Vec<u32> {
        self.block_axes()
            .chain(std::iter::once(&self.threads))
            .map(|a| a.size)
            .collect()
    }

    pub fn axes(&self) -> impl Iterator<Item = &Axis> {
        self.block_axes().chain(std::iter::once(&self.threads))
    }

    pub fn axis(&self, name: &str) -> Option<&Axis> {
        self.axes().find(|a| a.name == name)
    }
}

/// Bit pattern of an `f32` literal, so that literals compare and hash exactly
/// (NaN == NaN, -0.0 != 0.0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct F32Bits(pub u32);

impl F32Bits {
    pub fn from_f32(v: f32) -> Self {
        F32Bits(v.to_bits())
    }
    pub fn to_f32(self) -> f32 {
        f32::from_bits(self.0)
    }
}

/// A typed constant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Literal {
    F32(F32Bits),
    I32(i32),
    U32(u32),
    Bool(bool),
    /// An `f16` as its 16 bits.
    F16(u16),
    /// A `bf16` as its 16 bits.
    BF16(u16),
}

impl Literal {
    pub fn f32(v: f32) -> Self {
        Literal::F32(F32Bits::from_f32(v))
    }

    pub fn ty(self) -> ScalarType {
        match self {
            Literal::F32(_) => ScalarType::F32,
            Literal::I32(_) => ScalarType::I32,
            Literal::U32(_) => ScalarType::U32,
            Literal::Bool(_) => ScalarType::Bool,
            Literal::F16(_) => ScalarType::F16,
            Literal::BF16(_) => ScalarType::BF16,
        }
    }

    /// The bits of this value (a 16-bit float in the low half, the high half zero).
    pub fn to_bits(self) -> u32 {
        match self {
            Literal::F32(b) => b.0,
            Literal::I32(v) => v as u32,
            Literal::U32(v) => v,
            Literal::Bool(v) => v as u32,
            Literal::F16(v) | Literal::BF16(v) => u32::from(v),
        }
    }

    /// The value of type `ty` stored as `bits` (any non-zero word is `true`;
    /// a 16-bit float takes the low half).
    pub fn from_bits(ty: ScalarType, bits: u32) -> Self {
        match ty {
            ScalarType::F32 => Literal::F32(F32Bits(bits)),
            ScalarType::I32 => Literal::I32(bits as i32),
            ScalarType::U32 => Literal::U32(bits),
            ScalarType::Bool => Literal::Bool(bits != 0),
            ScalarType::F16 => Literal::F16(bits as u16),
            ScalarType::BF16 => Literal::BF16(bits as u16),
        }
    }

    /// The value as an `f32` for a float literal (exact for 16-bit floats).
    pub fn as_f32(self) -> Option<f32> {
        match self {
            Literal::F32(b) => Some(b.to_f32()),
            Literal::F16(b) => Some(crate::numerics::f16_to_f32(b)),
            Literal::BF16(b) => Some(crate::numerics::bf16_to_f32(b)),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    /// Arithmetic negation (`-x`); wraps for integers.
    Neg,
    /// Logical not of a `bool` (`!x`).
    Not,
    /// Bitwise complement of an integer (`~x`).
    BitNot,
}

impl UnaryOp {
    pub const ALL: [UnaryOp; 3] = [Self::Neg, Self::Not, Self::BitNot];
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    /// Integer division by zero returns the dividend; `i32::MIN / -1` is `i32::MIN`.
    Div,
    /// Integer remainder by zero is 0; `i32::MIN % -1` is 0. Float `%` is C `fmodf`.
    Rem,
    BitAnd,
    BitOr,
    BitXor,
    /// Shift amounts are taken modulo 32.
    Shl,
    /// Arithmetic for `i32`, logical for `u32`; amount modulo 32.
    Shr,
    LogicAnd,
    LogicOr,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl BinaryOp {
    /// Every operator, in declaration order.
    pub const ALL: [BinaryOp; 18] = [
        Self::Add,
        Self::Sub,
        Self::Mul,
        Self::Div,
        Self::Rem,
        Self::BitAnd,
        Self::BitOr,
        Self::BitXor,
        Self::Shl,
        Self::Shr,
        Self::LogicAnd,
        Self::LogicOr,
        Self::Eq,
        Self::Ne,
        Self::Lt,
        Self::Le,
        Self::Gt,
        Self::Ge,
    ];

    /// The comparisons ([`BinaryOp::is_comparison`]): `bool` results of two
    /// operands of one type.
    pub const COMPARISONS: [BinaryOp; 6] =
        [Self::Eq, Self::Ne, Self::Lt, Self::Le, Self::Gt, Self::Ge];

    /// The operators a compound assignment (`+=`, `<<=`, ...) may use: the
    /// arithmetic and bitwise ones, not comparisons or `&&`/`||`.
    pub const COMPOUND: [BinaryOp; 10] = [
        Self::Add,
        Self::Sub,
        Self::Mul,
        Self::Div,
        Self::Rem,
        Self::BitAnd,
        Self::BitOr,
        Self::BitXor,
        Self::Shl,
        Self::Shr,
    ];

    pub fn is_comparison(self) -> bool {
        Self::COMPARISONS.contains(&self)
    }
}

/// Math functions; each has an entry in docs/numerics.md.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MathFn {
    Exp,
    Log,
    Sqrt,
    Rsqrt,
    Sin,
    Cos,
    Tanh,
    /// Also for integers (`abs(i32::MIN)` wraps to `i32::MIN`).
    Abs,
    /// Also for integers; with one NaN operand returns the other.
    Min,
    Max,
    Floor,
    Ceil,
    /// `fma(a, b, c)`: a*b+c with one rounding.
    Fma,
    Pow,
    /// The number of set bits of an `i32` or `u32` (CUDA `__popc`, WGSL
    /// `countOneBits`); the result has the operand's type.
    Popcount,
    /// The number of zero bits above the highest set bit; 32 for 0 (CUDA
    /// `__clz`, WGSL `countLeadingZeros`).
    Clz,
    /// The 1-based position of the lowest set bit; 0 for 0 (CUDA `__ffs`;
    /// WGSL `firstTrailingBit(x) + 1`).
    Ffs,
    /// The 32 bits in reverse order (CUDA `__brev`, WGSL `reverseBits`).
    Brev,
}

impl MathFn {
    pub const ALL: [MathFn; 18] = [
        Self::Exp,
        Self::Log,
        Self::Sqrt,
        Self::Rsqrt,
        Self::Sin,
        Self::Cos,
        Self::Tanh,
        Self::Abs,
        Self::Min,
        Self::Max,
        Self::Floor,
        Self::Ceil,
        Self::Fma,
        Self::Pow,
        Self::Popcount,
        Self::Clz,
        Self::Ffs,
        Self::Brev,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::Exp => "exp",
            Self::Log => "log",
            Self::Sqrt => "sqrt",
            Self::Rsqrt => "rsqrt",
            Self::Sin => "sin",
            Self::Cos => "cos",
            Self::Tanh => "tanh",
            Self::Abs => "abs",
            Self::Min => "min",
            Self::Max => "max",
            Self::Floor => "floor",
            Self::Ceil => "ceil",
            Self::Fma => "fma",
            Self::Pow => "pow",
            Self::Popcount => "popcount",
            Self::Clz => "clz",
            Self::Ffs => "ffs",
            Self::Brev => "brev",
        }
    }

    pub fn arity(self) -> usize {
        match self {
            Self::Min | Self::Max | Self::Pow => 2,
            Self::Fma => 3,
            _ => 1,
        }
    }

    /// Whether the function accepts integer operands (otherwise floats only).
    pub fn accepts_integers(self) -> bool {
        matches!(self, Self::Abs | Self::Min | Self::Max) || self.is_bit_operation()
    }

    /// The bit operations (`popcount`, `clz`, `ffs`, `brev`): `i32` and
    /// `u32` operands only, the result of the operand's type.
    pub fn is_bit_operation(self) -> bool {
        matches!(self, Self::Popcount | Self::Clz | Self::Ffs | Self::Brev)
    }

    /// Whether the function accepts float operands.
    pub fn accepts_floats(self) -> bool {
        !self.is_bit_operation()
    }
}

/// A use of a ref: `base[index...]`, or `base@[coords...][index...]` for the
/// instance that belongs to the block of the owner mesh at `coords`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RefAccess {
    pub base: Name,
    /// Block coordinates (grid axes then cluster axes) of the owner mesh.
    /// `None`: the current block's own instance (or the only instance of an
    /// unowned ref).
    pub block: Option<Vec<Expr>>,
    /// One index per dimension of the ref's shape.
    pub index: Vec<Expr>,
}

/// A pure expression. Memory reads are `Load`; atomics and semaphore reads are
/// statements so that expression evaluation order never matters.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Expr {
    Lit(Literal),
    /// A `let`, `var`, loop variable or scalar parameter.
    Var(Name),
    /// Index of the current point along a named axis of the program's own mesh (`u32`).
    AxisIndex(Name),
    /// Size of a named axis of any mesh in scope (`u32`).
    AxisSize(Name),
    /// The thread's lane in its logical warp or the warp's index in the
    /// block (`u32`): `lane_id()`, `warp_id()`. `plan::program_kernel`
    /// expands them into the thread axis's `axis_index`.
    WarpPosition(WarpPosition),
    Load(Box<RefAccess>),
    Unary(UnaryOp, Box<Expr>),
    Binary(BinaryOp, Box<Expr>, Box<Expr>),
    /// `select(cond, if_true, if_false)`.
    Select(Box<Expr>, Box<Expr>, Box<Expr>),
    /// Value conversion (`f32(x)`): float to int truncates and saturates, NaN to 0.
    Cast(ScalarType, Box<Expr>),
    /// Reinterpretation of the 32 bits (`bitcast<f32>(x)`).
    Bitcast(ScalarType, Box<Expr>),
    Math(MathFn, Vec<Expr>),
}

/// Where a thread stands among the logical warps of its block (`u32`
/// values): lane `l` of warp `w` is thread `32w + l` in linear thread order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WarpPosition {
    /// `lane_id()`: the linear thread index modulo 32.
    Lane,
    /// `warp_id()`: the linear thread index divided by 32.
    Warp,
}

impl WarpPosition {
    pub const ALL: [WarpPosition; 2] = [Self::Lane, Self::Warp];

    /// Text-format function name (`lane_id`, `warp_id`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Lane => "lane_id",
            Self::Warp => "warp_id",
        }
    }

    /// The expression it stands for in a program whose thread axis is
    /// `thread_axis`: `axis_index(t) % 32u` or `axis_index(t) / 32u`.
    pub fn expansion(self, thread_axis: &str) -> Expr {
        let op = match self {
            Self::Lane => BinaryOp::Rem,
            Self::Warp => BinaryOp::Div,
        };
        Expr::Binary(
            op,
            Box::new(Expr::AxisIndex(thread_axis.to_string())),
            Box::new(Expr::Lit(Literal::U32(WARP_SIZE))),
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AtomicOp {
    Load,
    Store,
    Add,
    Min,
    Max,
    And,
    Or,
    Xor,
    Exchange,
    CompareExchange,
}

impl AtomicOp {
    pub const ALL: [AtomicOp; 10] = [
        Self::Load,
        Self::Store,
        Self::Add,
        Self::Min,
        Self::Max,
        Self::And,
        Self::Or,
        Self::Xor,
        Self::Exchange,
        Self::CompareExchange,
    ];

    /// Text-format function name (`atomic_add`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Self::Load => "atomic_load",
            Self::Store => "atomic_store",
            Self::Add => "atomic_add",
            Self::Min => "atomic_min",
            Self::Max => "atomic_max",
            Self::And => "atomic_and",
            Self::Or => "atomic_or",
            Self::Xor => "atomic_xor",
            Self::Exchange => "atomic_exchange",
            Self::CompareExchange => "atomic_compare_exchange",
        }
    }

    /// Number of value operands after the target.
    pub fn arity(self) -> usize {
        match self {
            Self::Load => 0,
            Self::CompareExchange => 2,
            _ => 1,
        }
    }

    /// Whether the op produces a value (loads and read-modify-writes return the old value).
    pub fn returns_value(self) -> bool {
        !matches!(self, Self::Store)
    }

    /// Whether the op applies to elements of `elem` (E0050): every op to
    /// `i32` and `u32`; to `f32` the ops whose meaning is the value's (load,
    /// store, exchange, and add, min and max through a compare-exchange on the
    /// bits where the hardware has none), not the bitwise ones nor
    /// compare-exchange, whose success would hang on the sign of zero and the
    /// NaN payload, which the language leaves unspecified.
    pub fn applies_to(self, elem: ScalarType) -> bool {
        match elem {
            ScalarType::I32 | ScalarType::U32 => true,
            ScalarType::F32 => matches!(
                self,
                Self::Load | Self::Store | Self::Add | Self::Min | Self::Max | Self::Exchange
            ),
            ScalarType::Bool | ScalarType::F16 | ScalarType::BF16 => false,
        }
    }
}

/// A typed binding introduced by a statement.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Binding {
    pub name: Name,
    pub ty: ScalarType,
}

/// Threads in a logical warp: warp collectives act on 32 consecutive
/// threads of a block in linear thread order.
pub const WARP_SIZE: u32 = 32;

/// Warp collectives (docs/design.md, "Semantics"): every thread of a logical warp
/// takes part, in warp-uniform control flow. docs/text-format.md defines each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum WarpOp {
    /// `shfl_idx(v, lane)`: `v` of lane `lane % 32`.
    ShuffleIdx,
    /// `shfl_up(v, d)`: `v` of lane `l - d % 32`, or the thread's own `v` below lane 0.
    ShuffleUp,
    /// `shfl_down(v, d)`: `v` of lane `l + d % 32`, or the thread's own `v` past lane 31.
    ShuffleDown,
    /// `shfl_xor(v, m)`: `v` of lane `l ^ (m % 32)`.
    ShuffleXor,
    /// `vote_any(p)`: whether `p` holds in some lane.
    VoteAny,
    /// `vote_all(p)`: whether `p` holds in every lane.
    VoteAll,
    /// `ballot(p)`: a `u32` whose bit `l` is lane `l`'s `p`.
    Ballot,
    /// `reduce_add(v)`: the sum over the warp (i32/u32 wrap; f32 in the
    /// fixed butterfly order of docs/numerics.md).
    ReduceAdd,
    /// `reduce_min(v)`: the minimum over the warp (the language's `min`).
    ReduceMin,
    /// `reduce_max(v)`: the maximum over the warp (the language's `max`).
    ReduceMax,
}

impl WarpOp {
    pub const ALL: [WarpOp; 10] = [
        Self::ShuffleIdx,
        Self::ShuffleUp,
        Self::ShuffleDown,
        Self::ShuffleXor,
        Self::VoteAny,
        Self::VoteAll,
        Self::Ballot,
        Self::ReduceAdd,
        Self::ReduceMin,
        Self::ReduceMax,
    ];

    /// Text-format function name.
    pub fn name(self) -> &'static str {
        match self {
            Self::ShuffleIdx => "shfl_idx",
            Self::ShuffleUp => "shfl_up",
            Self::ShuffleDown => "shfl_down",
            Self::ShuffleXor => "shfl_xor",
            Self::VoteAny => "vote_any",
            Self::VoteAll => "vote_all",
            Self::Ballot => "ballot",
            Self::ReduceAdd => "reduce_add",
            Self::ReduceMin => "reduce_min",
            Self::ReduceMax => "reduce_max",
        }
    }

    /// Number of arguments: the value, and for shuffles the `u32` lane,
    /// delta or mask.
    pub fn arity(self) -> usize {
        if self.is_shuffle() {
            2
        } else {
            1
        }
    }

    pub fn is_shuffle(self) -> bool {
        matches!(
            self,
            Self::ShuffleIdx | Self::ShuffleUp | Self::ShuffleDown | Self::ShuffleXor
        )
    }

    /// The result type for a first argument of type `value`, or `None` when
    /// the op does not take that type.
    pub fn result_type(self, value: ScalarType) -> Option<ScalarType> {
        use ScalarType as T;
        match self {
            // Every 32-bit and 16-bit type (bool travels as its u32 word).
            _ if self.is_shuffle() => Some(value),
            Self::VoteAny | Self::VoteAll => (value == T::Bool).then_some(T::Bool),
            Self::Ballot => (value == T::Bool).then_some(T::U32),
            _ => matches!(value, T::I32 | T::U32 | T::F32).then_some(value),
        }
    }

    /// Whether every lane of the warp gets the same result.
    pub fn result_is_warp_uniform(self) -> bool {
        !self.is_shuffle()
    }
}

/// Block collectives (docs/text-format.md, "Block collectives"): every
/// thread of the block takes part, in block-uniform control flow; each
/// implies a `barrier` and its result is block-uniform. CUDA's
/// `__syncthreads_or/and/count` and a broadcast through shared memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum BlockOp {
    /// `block_broadcast(v, src)`: `v` of thread `src` (a block-uniform
    /// `u32`; out of range: an out-of-bounds error in checked mode, an
    /// unspecified value in fast mode).
    Broadcast,
    /// `block_any(p)`: whether `p` holds in some thread of the block.
    Any,
    /// `block_all(p)`: whether `p` holds in every thread of the block.
    All,
    /// `block_count(p)`: the number of threads of the block where `p` holds.
    Count,
}

impl BlockOp {
    pub const ALL: [BlockOp; 4] = [Self::Broadcast, Self::Any, Self::All, Self::Count];

    /// Text-format function name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Broadcast => "block_broadcast",
            Self::Any => "block_any",
            Self::All => "block_all",
            Self::Count => "block_count",
        }
    }

    /// The op whose text-format name is `name`.
    pub fn from_name(name: &str) -> Option<BlockOp> {
        Self::ALL.into_iter().find(|op| op.name() == name)
    }

    /// Number of arguments: the value, and for the broadcast the `u32`
    /// source thread.
    pub fn arity(self) -> usize {
        match self {
            Self::Broadcast => 2,
            _ => 1,
        }
    }

    /// The result type for a first argument of type `value`, or `None` when
    /// the op does not take that type.
    pub fn result_type(self, value: ScalarType) -> Option<ScalarType> {
        use ScalarType as T;
        match self {
            Self::Broadcast => matches!(value, T::I32 | T::U32 | T::F32 | T::Bool).then_some(value),
            Self::Any | Self::All => (value == T::Bool).then_some(T::Bool),
            Self::Count => (value == T::Bool).then_some(T::U32),
        }
    }
}

/// The warp-collective matrix multiply-accumulate `mma_m16n8k16(d, a, b, c);`
/// (docs/design.md, "Semantics"): the shape of PTX
/// `mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32`. Each
/// lane holds its fragments in `local` arrays, in PTX's layout
/// (docs/text-format.md, "Matrix multiply-accumulate"): with `g = lane >> 2`
/// and `q = lane % 4`: [`mma::a_position`], [`mma::b_position`] and
/// [`mma::c_position`].
pub mod mma {
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

    /// The input operands a fragment load fills: `mma_load_a` loads the
    /// lane's A fragment of a 16x16 block, `mma_load_b` its B fragment of
    /// a 16x8 (K x N) block, each of a row-major tile whose top-left element
    /// the source access names.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum Operand {
        A,
        B,
    }

    impl Operand {
        pub const ALL: [Operand; 2] = [Self::A, Self::B];

        /// The text-format name of the load.
        pub fn load_name(self) -> &'static str {
            match self {
                Self::A => "mma_load_a",
                Self::B => "mma_load_b",
            }
        }

        /// The operand's role in `mma_m16n8k16(d, a, b, c)`.
        pub fn role(self) -> &'static str {
            match self {
                Self::A => "a",
                Self::B => "b",
            }
        }

        /// Elements of the fragment one lane holds.
        pub fn fragment_len(self) -> u32 {
            match self {
                Self::A => A_LEN,
                Self::B => B_LEN,
            }
        }

        /// (rows, columns) of the block: 16x16 (M x K) for A, 16x8 (K x N)
        /// for B.
        pub fn block_shape(self) -> (u32, u32) {
            match self {
                Self::A => (M, K),
                Self::B => (K, N),
            }
        }

        /// `(row, col)` in the block of element `i` of lane `lane`'s
        /// fragment: [`a_position`] or [`b_position`].
        pub fn position(self, lane: u32, i: u32) -> (u32, u32) {
            match self {
                Self::A => a_position(lane, i),
                Self::B => b_position(lane, i),
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
            Operand::A => (g, two_q),
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
}

/// Semaphore operations; all block-collective (docs/design.md, "Semantics").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SemOp {
    /// Barrier, then one release atomic add of `amount`.
    Signal,
    /// Wait until the counter is at least `amount`, subtract it, then barrier.
    Wait,
    /// Wait until the counter is at least `amount`, without subtracting.
    WaitNodec,
}

impl SemOp {
    pub const ALL: [SemOp; 3] = [Self::Signal, Self::Wait, Self::WaitNodec];

    pub fn name(self) -> &'static str {
        match self {
            Self::Signal => "signal",
            Self::Wait => "wait",
            Self::WaitNodec => "wait_nodec",
        }
    }
}

/// A structured statement.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Stmt {
    /// `let name: ty = value;` (immutable).
    Let { var: Binding, value: Expr },
    /// `var name: ty = init;` (mutable scalar local).
    Var { var: Binding, init: Expr },
    /// `name = value;` for a `var`.
    Assign { name: Name, value: Expr },
    /// `local name: elem[shape];` a per-thread array.
    LocalArray {
        name: Name,
        elem: ScalarType,
        shape: Vec<u32>,
    },
    /// `target = value;`
    Store { target: RefAccess, value: Expr },
    /// `[let dest: ty =] atomic_op(target, args...);`
    Atomic {
        dest: Option<Binding>,
        op: AtomicOp,
        target: RefAccess,
        args: Vec<Expr>,
    },
    If {
        cond: Expr,
        then_body: Vec<Stmt>,
        else_body: Vec<Stmt>,
    },
    /// `for var: ty in start..end { body }`; step 1, `end` exclusive.
    For {
        var: Binding,
        start: Expr,
        end: Expr,
        body: Vec<Stmt>,
    },
    /// `while cond max limit { body }`: runs `body` while `cond` holds, at
    /// most `max` times (a `u32`, constant or block-uniform). A thread whose
    /// condition still holds after `max` iterations has reached the loop's
    /// limit: an error in checked mode (`loop_limit`), a loop exit in fast
    /// mode (docs/design.md: every loop is bounded).
    While {
        cond: Expr,
        max: Expr,
        body: Vec<Stmt>,
    },
    /// `break;` leaves the innermost `for` or `while`.
    Break,
    /// `continue;` goes on with the next iteration of the innermost loop
    /// (a `for` steps its variable first).
    Continue,
    /// `name op= value;` for a `var` (`acc += x;`): sugar for
    /// `name = name op value;` that the printer keeps.
    CompoundAssign {
        name: Name,
        op: BinaryOp,
        value: Expr,
    },
    /// `target op= value;` (`y[i] += x;`): sugar for
    /// `target = target op value;`, the index evaluated once per use.
    CompoundStore {
        target: RefAccess,
        op: BinaryOp,
        value: Expr,
    },
    /// `[let dest: ty =] helper(args...);` a call of a module-level helper
    /// function, inlined where it is called (`plan::inline_call`). A ref
    /// parameter takes the name of a ref in scope; a scalar one any value.
    Call {
        dest: Option<Binding>,
        function: Name,
        args: Vec<Expr>,
    },
    /// `return value;` the last statement of a helper function's body (with
    /// a value exactly when the function has a result type).
    Return { value: Option<Expr> },
    /// Block barrier; block-uniform control flow only.
    Barrier,
    /// `signal(s[i], n);`, `wait(s[i], n);`, `wait_nodec(s[i], n);`
    Sem {
        op: SemOp,
        sem: RefAccess,
        amount: Expr,
    },
    /// `let dest: i32 = read(s[i]);` (block-collective).
    SemRead { dest: Name, sem: RefAccess },
    /// `let dest: ty = warp_op(args...);` a warp collective (warp-uniform
    /// control flow only).
    Warp {
        dest: Binding,
        op: WarpOp,
        args: Vec<Expr>,
    },
    /// `let dest: ty = block_op(args...);` a block collective
    /// ([`BlockOp`]): block-uniform control flow only; implies a barrier;
    /// the result is block-uniform.
    BlockCollective {
        dest: Binding,
        op: BlockOp,
        args: Vec<Expr>,
    },
    /// `mma_m16n8k16(d, a, b, c);` the warp-collective matrix
    /// multiply-accumulate D = A B + C over the `local` fragments of every
    /// lane ([`mma`]); `d` may name `c`. Warp-uniform control flow only.
    Mma {
        d: Fragment,
        a: Fragment,
        b: Fragment,
        c: Fragment,
    },
    /// `mma_load_a(dest, src[.., r0, k0]);` or `mma_load_b(...)`: the
    /// warp-collective load of every lane's fragment of the block of
    /// `source` whose top-left element `source` names ([`mma::Operand`]).
    /// The origin indices are warp-uniform; warp-uniform control flow only.
    MmaLoad {
        operand: mma::Operand,
        dest: Fragment,
        source: RefAccess,
    },
}

/// A fragment operand of `mma_m16n8k16` and of the fragment loads: a
/// `local` array of the fragment's length (`fa`), or one row of a 2-D
/// `local` array whose last extent is that length (`fa[i]`, `i` a `u32`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Fragment {
    pub array: Name,
    pub row: Option<Expr>,
}

impl From<&str> for Fragment {
    fn from(array: &str) -> Fragment {
        Fragment::whole(array)
    }
}

impl Fragment {
    /// The whole local array `array`.
    pub fn whole(array: &str) -> Fragment {
        Fragment {
            array: array.to_string(),
            row: None,
        }
    }

    /// Row `row` of the 2-D local array `array`.
    pub fn row(array: &str, row: Expr) -> Fragment {
        Fragment {
            array: array.to_string(),
            row: Some(row),
        }
    }

    /// The access of the fragment's element `i`: `array[i]` or
    /// `array[row, i]`.
    pub fn element(&self, i: u32) -> RefAccess {
        let i = Expr::Lit(Literal::U32(i));
        RefAccess {
            base: self.array.clone(),
            block: None,
            index: match &self.row {
                None => vec![i],
                Some(row) => vec![row.clone(), i],
            },
        }
    }
}

/// A kernel parameter.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Param {
    pub name: Name,
    pub ty: Type,
}

/// A kernel: what one thread of a program does.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Kernel {
    pub name: Name,
    pub params: Vec<Param>,
    pub body: Vec<Stmt>,
}

/// One (mesh, kernel) pair of a map.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Program {
    pub mesh: Name,
    pub kernel: Name,
}

/// The four operand lists of a map, in kernel-parameter order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OperandKind {
    Input,
    Output,
    Scalar,
    Scratch,
}

impl OperandKind {
    /// In kernel-parameter order.
    pub const ALL: [OperandKind; 4] = [Self::Input, Self::Output, Self::Scalar, Self::Scratch];

    pub fn keyword(self) -> &'static str {
        match self {
            Self::Input => "inputs",
            Self::Output => "outputs",
            Self::Scalar => "scalars",
            Self::Scratch => "scratch",
        }
    }
}

/// An operand of a map.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Operand {
    pub name: Name,
    pub ty: Type,
    /// Outputs and gmem scratch start zeroed (otherwise uninitialised).
    pub zeroed: bool,
    /// Bound to the module's device-resident ref of the same name, which
    /// persists across calls (and may be written even when an input).
    pub resident: bool,
}

/// Input `input` and output `output` share one buffer; the output starts with
/// the input's contents.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Alias {
    pub input: Name,
    pub output: Name,
}

/// An MPMD map: programs that run together over shared operands.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MpmdMap {
    pub name: Name,
    pub programs: Vec<Program>,
    pub inputs: Vec<Operand>,
    pub outputs: Vec<Operand>,
    pub scalars: Vec<Operand>,
    pub scratch: Vec<Operand>,
    pub aliases: Vec<Alias>,
    pub fast_math: bool,
    /// The map's debug flag (`debug;`), which docs/design.md gives every map. It
    /// is parsed, printed and shown in `mpmd lower --target plan`, and
    /// changes neither lowering nor any run: checks are chosen per run
    /// ([`crate::Mode::Checked`], `mpmd run --checked`).
    pub debug: bool,
}

impl MpmdMap {
    /// All operands in kernel-parameter order: inputs, outputs, scalars, scratch.
    pub fn operands(&self) -> impl Iterator<Item = (OperandKind, &Operand)> {
        fn tagged(
            k: OperandKind,
            list: &[Operand],
        ) -> impl Iterator<Item = (OperandKind, &Operand)> {
            list.iter().map(move |o| (k, o))
        }
        tagged(OperandKind::Input, &self.inputs)
            .chain(tagged(OperandKind::Output, &self.outputs))
            .chain(tagged(OperandKind::Scalar, &self.scalars))
            .chain(tagged(OperandKind::Scratch, &self.scratch))
    }

    pub fn operand(&self, name: &str) -> Option<(OperandKind, &Operand)> {
        self.operands().find(|(_, o)| o.name == name)
    }
}

/// A device-resident ref declared at module level; it outlives calls.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Resident {
    pub name: Name,
    pub ty: RefType,
    /// Zero-filled when first created (semaphores always are).
    pub zeroed: bool,
}

/// One call of a map, with its scalar parameter values.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Call {
    pub map: Name,
    pub scalars: Vec<(Name, Literal)>,
}

/// A module-level constant (`const TILE: u32 = 16u;`): a name for a
/// literal, usable in expressions, loop bounds and (resolved by the parser)
/// array extents.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Const {
    pub name: Name,
    pub value: Literal,
}

/// A helper function (`fn row_major(r: u32, c: u32) -> u32 { ... }`):
/// statements that kernels call by name and that are inlined at every call
/// (there is no recursion). Its body ends with `return value;` exactly when
/// it has a result type.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Function {
    pub name: Name,
    pub params: Vec<Param>,
    pub result: Option<ScalarType>,
    pub body: Vec<Stmt>,
}

/// A whole `.mpmd` file.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Module {
    pub consts: Vec<Const>,
    pub meshes: Vec<Mesh>,
    pub kernels: Vec<Kernel>,
    pub maps: Vec<MpmdMap>,
    pub residents: Vec<Resident>,
    pub functions: Vec<Function>,
    /// The calls to run, in order. Empty means: call the only map once.
    pub calls: Vec<Call>,
}

impl Module {
    pub fn mesh(&self, name: &str) -> Option<&Mesh> {
        self.meshes.iter().find(|m| m.name == name)
    }
    pub fn constant(&self, name: &str) -> Option<&Const> {
        self.consts.iter().find(|c| c.name == name)
    }
    pub fn function(&self, name: &str) -> Option<&Function> {
        self.functions.iter().find(|f| f.name == name)
    }
    pub fn kernel(&self, name: &str) -> Option<&Kernel> {
        self.kernels.iter().find(|k| k.name == name)
    }
    pub fn map(&self, name: &str) -> Option<&MpmdMap> {
        self.maps.iter().find(|m| m.name == name)
    }
    pub fn resident(&self, name: &str) -> Option<&Resident> {
        self.residents.iter().find(|r| r.name == name)
    }

    /// The calls to run: the explicit ones, or one call of the only map.
    pub fn effective_calls(&self) -> Vec<Call> {
        if !self.calls.is_empty() {
            return self.calls.clone();
        }
        match self.maps.as_slice() {
            [only] => vec![Call {
                map: only.name.clone(),
                scalars: vec![],
            }],
            _ => vec![],
        }
    }
}
