//! The operators of expressions and statements: unary, binary and math
//! functions, atomics, warp and block collectives, semaphore operations.

use super::ScalarType;

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
    /// Shift amounts (`i32` or `u32`, whatever the left operand's type) are
    /// taken modulo 32; the result has the left operand's type.
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
