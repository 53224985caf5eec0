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
pub mod mma;
mod ops;
mod path;
mod typing;
pub mod visit;

pub use builder::*;
pub use ops::{AtomicOp, BinaryOp, BlockOp, MathFn, SemOp, UnaryOp, WarpOp, WARP_SIZE};
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
    /// The linear thread axis (threads per block). For a block of several
    /// thread axes it is named [`LINEAR_THREADS`] and its size is their
    /// product.
    pub threads: Axis,
    /// The thread axes of `threads [tx = 32, ty = 2]`, the first fastest:
    /// thread `(x, y)` is linear thread `x + 32 y`. Empty for one thread
    /// axis (`threads t = 64`). `expand::program_kernel` writes their
    /// `axis_index` as arithmetic on the linear axis.
    pub thread_axes: Vec<Axis>,
}

/// The name of the linear thread axis of a mesh with several thread axes:
/// a keyword, so that no axis of a file can take it.
pub const LINEAR_THREADS: &str = "threads";

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

    /// Grid axes, cluster axes, then the thread axis or, for a block of
    /// several, the thread axes (the axes a program may name).
    pub fn axes(&self) -> impl Iterator<Item = &Axis> {
        let threads: &[Axis] = if self.thread_axes.is_empty() {
            std::slice::from_ref(&self.threads)
        } else {
            &self.thread_axes
        };
        self.block_axes().chain(threads)
    }

    /// `(stride, size)` of the thread axis `name` of a block of several
    /// (`axis_index(name)` is `linear / stride % size`); `None` for any
    /// other name. Strides saturate (validation bounds the block).
    pub fn thread_axis_stride(&self, name: &str) -> Option<(u32, u32)> {
        let mut stride = 1u32;
        for axis in &self.thread_axes {
            if axis.name == name {
                return Some((stride, axis.size));
            }
            stride = stride.saturating_mul(axis.size);
        }
        None
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
    /// block (`u32`): `lane_id()`, `warp_id()`. `expand::program_kernel`
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

/// A typed binding introduced by a statement.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Binding {
    pub name: Name,
    pub ty: ScalarType,
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
    /// function, inlined where it is called (`expand::inline_call`). A ref
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

/// A module-level constant table (`const LUT: f32[4] = [0.5, 1.0, 2.0,
/// 4.0];`): read-only values a kernel indexes like a one-dimensional
/// array (`LUT[i]`). `expand::program_kernel` gives each kernel that reads
/// it a `local` array of the values, so every backend runs it as one.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ConstTable {
    pub name: Name,
    pub elem: ScalarType,
    pub values: Vec<Literal>,
}

impl ConstTable {
    /// The type a kernel reads it through: `local<elem[len]>`.
    pub fn ref_type(&self) -> RefType {
        RefType {
            space: MemorySpace::Local,
            elem: self.elem,
            shape: vec![u32::try_from(self.values.len()).unwrap_or(u32::MAX)],
            owner: None,
        }
    }
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
    /// Constant tables, printed after the scalar constants.
    pub tables: Vec<ConstTable>,
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
    pub fn table(&self, name: &str) -> Option<&ConstTable> {
        self.tables.iter().find(|t| t.name == name)
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
