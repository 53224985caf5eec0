//! The compiled form of a kernel: registers, instructions, accesses and
//! the program code the executor runs (`compile.rs` produces it).

use crate::ir::{mma, AtomicOp, BlockOp, MathFn, RefType, ScalarType, SemOp, WarpOp};
use crate::plan::ProgramId;

pub(crate) type Reg = usize;

/// How a register is filled before a block runs.
#[derive(Clone, Copy, Debug)]
pub(crate) enum RegInit {
    /// A temporary or variable: written by instructions.
    Temp,
    /// The same value on every lane (literal, scalar parameter, axis size).
    Const(u32),
    /// The lane (thread) index.
    Lane,
    /// `(block_id / stride) % size`: a grid or cluster axis index.
    BlockAxis { stride: u64, size: u32 },
}

/// Which memory an access reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// A device buffer of the call (index into the call's buffers).
    Global(usize),
    /// A per-block `smem` slot of this program.
    Smem(usize),
    /// A per-thread local array.
    Local(usize),
}

/// Which instance of an owned ref plain indexing reaches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum OwnInstance {
    /// Unowned refs, `smem` and locals: the only instance.
    Zero,
    /// Owned by the program's own mesh: the block's own instance, whose
    /// coordinates (for reports) split the block id by these extents.
    Block(Vec<u32>),
}

/// A compiled ref access: the target, its per-dimension index registers and,
/// for `@[coords]`, the owner's block-coordinate registers.
#[derive(Clone, Debug)]
pub(crate) struct CompiledAccess {
    pub target: Target,
    pub name: String,
    /// (index register, extent, index type is signed).
    pub dims: Vec<(Reg, u32, bool)>,
    pub coords: Option<Vec<(Reg, u32, bool)>>,
    pub own: OwnInstance,
    /// Elements in one instance.
    pub inst_len: u64,
    pub elem: ScalarType,
    /// Its index in `ProgramCode::access_paths` (`u16::MAX`: none kept).
    pub site: u16,
    /// Every index and coordinate register is uniform
    /// (`ProgramCode::uniform`): all active lanes reach one element (of
    /// their own row, for a local array).
    pub uniform: bool,
}

/// A 16-bit float format (docs/design.md, "Types"): registers hold its bits in
/// the low half of a word, the high half zero; memory holds 2 bytes an element.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Half {
    F16,
    BF16,
}

impl Half {
    pub fn of(ty: ScalarType) -> Option<Half> {
        match ty {
            ScalarType::F16 => Some(Half::F16),
            ScalarType::BF16 => Some(Half::BF16),
            _ => None,
        }
    }

    pub fn ty(self) -> ScalarType {
        match self {
            Half::F16 => ScalarType::F16,
            Half::BF16 => ScalarType::BF16,
        }
    }
}

/// An f32 arithmetic operation; on a 16-bit type it runs on the exact widened
/// values and rounds once (`numerics`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum FloatBin {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    Min,
    Max,
    Pow,
}

/// A float comparison (on the values: NaN compares unordered, `-0 == 0`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum FloatCmp {
    Eq,
    Ne,
    Lt,
    Le,
}

/// A float function of one operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum FloatUn {
    Neg,
    Abs,
    Floor,
    Ceil,
    Sqrt,
    Rsqrt,
    Exp,
    Log,
    Sin,
    Cos,
    Tanh,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum BinKind {
    IAdd,
    ISub,
    IMul,
    SDiv,
    UDiv,
    SRem,
    URem,
    And,
    Or,
    Xor,
    Shl,
    SShr,
    UShr,
    LogicAnd,
    LogicOr,
    Eq,
    Ne,
    BEq,
    BNe,
    SLt,
    ULt,
    SLe,
    ULe,
    SMin,
    UMin,
    SMax,
    UMax,
    Float(FloatBin),
    FloatCmp(FloatCmp),
    Half(FloatBin, Half),
    HalfCmp(FloatCmp, Half),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum UnKind {
    Copy,
    /// Bitcast to a 16-bit float: the low half of the word.
    Low16,
    INeg,
    LogicNot,
    BitNot,
    IAbs,
    /// A bit operation (`MathFn::is_bit_operation`, `ir::fold::bit_operation`).
    Bits(MathFn),
    Float(FloatUn),
    Half(FloatUn, Half),
    F2I,
    F2U,
    I2F,
    U2F,
    F2B,
    I2B,
    B2F,
    B2I,
    F2H(Half),
    H2F(Half),
    I2H(Half),
    U2H(Half),
    B2H(Half),
    H2I(Half),
    H2U(Half),
    H2B(Half),
    H2H {
        from: Half,
        to: Half,
    },
}

impl BinKind {
    /// Whether its operands are f32 (a flushing adapter flushes them; the
    /// 16-bit operations flush their widened operands themselves).
    pub fn reads_f32(self) -> bool {
        matches!(self, BinKind::Float(_) | BinKind::FloatCmp(_))
    }

    /// Whether its result is an f32.
    pub fn gives_f32(self) -> bool {
        matches!(self, BinKind::Float(_))
    }
}

impl UnKind {
    /// Whether its operand is an f32 (a flushing adapter flushes it).
    pub fn reads_f32(self) -> bool {
        use UnKind::*;
        matches!(self, Float(_) | F2I | F2U | F2B | F2H(_))
    }

    /// Whether its result is an f32.
    pub fn gives_f32(self) -> bool {
        use UnKind::*;
        matches!(self, Float(_) | I2F | U2F | B2F | H2F(_))
    }
}

#[derive(Clone, Debug)]
pub(crate) enum Instr {
    Bin {
        op: BinKind,
        dst: Reg,
        a: Reg,
        b: Reg,
    },
    Un {
        op: UnKind,
        dst: Reg,
        a: Reg,
    },
    Select {
        dst: Reg,
        c: Reg,
        a: Reg,
        b: Reg,
    },
    /// `a * b + c` rounded once: in f32, or in a 16-bit format (`half`).
    Fma {
        dst: Reg,
        a: Reg,
        b: Reg,
        c: Reg,
        half: Option<Half>,
    },
    /// Masked copy (assignment to a variable).
    Mov {
        dst: Reg,
        src: Reg,
        /// `src` is a temporary of the assigned expression, not read
        /// again: when every lane is active the registers trade places.
        src_dies: bool,
    },
    /// Masked `var += 1` (loop step).
    Inc {
        var: Reg,
    },
    Load {
        dst: Reg,
        acc: Box<CompiledAccess>,
    },
    Store {
        acc: Box<CompiledAccess>,
        src: Reg,
    },
    Atomic {
        op: AtomicOp,
        signed: bool,
        acc: Box<CompiledAccess>,
        args: [Reg; 2],
        dst: Option<Reg>,
    },
    /// A `local` array declaration: its elements become unwritten.
    LocalDecl {
        id: usize,
    },
    /// Push the mask, narrow it to `cond`; jump to `else_pc` when no lane is left.
    IfThen {
        cond: Reg,
        else_pc: usize,
    },
    /// Mask = saved & !cond; jump to `end_pc` when no lane is left.
    Else {
        cond: Reg,
        end_pc: usize,
    },
    PushMask,
    PopMask,
    /// Narrow the mask to lanes with `var < end`; leave the loop when none is left.
    LoopTest {
        var: Reg,
        end: Reg,
        signed: bool,
        exit_pc: usize,
    },
    Jump {
        pc: usize,
    },
    /// `while`: narrow the mask to lanes whose condition holds; leave the
    /// loop when none is left. A lane still in after `count == max`
    /// iterations has reached the loop's limit: an error when
    /// `ProgramCode::loop_limit_is_error`, else it leaves the loop.
    WhileTest {
        cond: Reg,
        count: Reg,
        max: Reg,
        /// Index into `ProgramCode::while_conditions`.
        ordinal: u32,
        exit_pc: usize,
    },
    /// `break` / `continue`: the active lanes stop until the loop ends
    /// (`break`) or the next iteration (`continue`): they leave the mask
    /// and the top `levels` saved masks (those pushed inside the loop).
    LoopExit {
        levels: usize,
    },
    Barrier,
    Sem {
        op: SemOp,
        acc: Box<CompiledAccess>,
        amount: Reg,
        /// The amount is a `u32` (2^31 and more do not fit the counters).
        unsigned: bool,
    },
    SemRead {
        dst: Reg,
        acc: Box<CompiledAccess>,
    },
    /// A block collective over the block's active threads (all of them:
    /// validation keeps it in block-uniform control); a boundary, like
    /// `Barrier`, whose barrier it implies.
    BlockCollective {
        op: BlockOp,
        dst: Reg,
        value: Reg,
        /// The broadcast's source thread.
        source: Option<Reg>,
    },
    /// A warp collective over each active warp (all 32 lanes active).
    Warp {
        op: WarpOp,
        /// The value's type (how reductions combine).
        ty: ScalarType,
        dst: Reg,
        value: Reg,
        /// A shuffle's lane, delta or mask.
        lane: Option<Reg>,
    },
    /// `mma_m16n8k16` over each active warp (all 32 lanes active): the
    /// fragment registers of every lane (docs/text-format.md's layout).
    Mma(Box<MmaRegs>),
    End,
}

/// The registers of one `mma_m16n8k16`: the loaded fragments and the results.
#[derive(Clone, Debug)]
pub(crate) struct MmaRegs {
    /// `a` and `b` are `bf16` (else `f16`).
    pub bf16: bool,
    pub a: [Reg; mma::A_LEN as usize],
    pub b: [Reg; mma::B_LEN as usize],
    pub c: [Reg; mma::C_LEN as usize],
    pub d: [Reg; mma::C_LEN as usize],
}

impl Instr {
    /// Block-collective instructions: warp groups synchronise here.
    pub fn is_boundary(&self) -> bool {
        matches!(
            self,
            Instr::Barrier
                | Instr::BlockCollective { .. }
                | Instr::Sem { .. }
                | Instr::SemRead { .. }
                | Instr::End
        )
    }
}

/// A per-block array: a local array of the kernel (`len` elements per
/// thread) or an `smem` slot (`len` elements per block).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ArrayInfo {
    pub len: u64,
    pub elem: ScalarType,
}

/// Words that hold `len` elements of `elem`: the one rule, `host::words_for`.
pub(crate) use crate::host::words_for as words_of;

/// How a kernel parameter is bound in this call.
#[derive(Clone, Debug)]
pub(crate) enum ParamBinding {
    Scalar {
        ty: ScalarType,
        bits: u32,
    },
    Global {
        buffer: usize,
        ty: RefType,
    },
    Smem {
        slot: usize,
        ty: RefType,
    },
    /// `smem` of another program: not reachable from this one.
    Foreign,
}

/// One program compiled for one call.
#[derive(Debug)]
pub(crate) struct ProgramCode {
    pub program: ProgramId,
    pub kernel: String,
    pub code: Vec<Instr>,
    pub regs: Vec<RegInit>,
    /// Per register: uniform, i.e. wherever it is read, every active lane
    /// holds the same value in it (`compile::uniform`). An instruction whose
    /// result is uniform computes it once, on the first active lane, and
    /// copies it to the others.
    pub uniform: Vec<bool>,
    /// Elements per thread of each local array.
    pub locals: Vec<ArrayInfo>,
    /// Elements of each `smem` slot.
    pub smem: Vec<ArrayInfo>,
    pub threads: usize,
    pub block_count: u64,
    /// Whether it uses atomics or semaphores (then blocks are not independent).
    pub synchronises: bool,
    /// Flush subnormal f32 operands and results of float operations to zero
    /// (`InterpOptions::flush_subnormals`).
    pub flush_subnormals: bool,
    /// What `mma_m16n8k16` computes (`InterpOptions::mma_probe`).
    pub mma_probe: super::MmaProbe,
    /// The condition of each `while`, as the text format writes it, in
    /// source order (`ir::visit::while_loops`): how a limit error names it.
    pub while_conditions: Vec<String>,
    /// Whether reaching a `while`'s maximum is an error (checked mode) or
    /// leaves the loop (fast mode).
    pub loop_limit_is_error: bool,
    /// The statement of each access (`CompiledAccess::site`), in the kernel
    /// compiled, for race reports; the first 65,535 accesses only.
    pub access_paths: Vec<crate::ir::IrPath>,
}

/// Per buffer of a call whose programs are `codes`: whether a store or an
/// atomic of any of them may write it (every access that writes device
/// memory is one of these). Detection keeps no access history for the
/// others: every race has a write.
pub(crate) fn written_buffers(codes: &[ProgramCode], buffers: usize) -> Vec<bool> {
    buffers_reached(codes, buffers, false)
}

/// [`written_buffers`], and also the buffers a semaphore operation changes
/// (a signal adds to the count, a wait takes from it): every buffer whose
/// words the call may change. The others are read where they lie.
pub(crate) fn changed_buffers(codes: &[ProgramCode], buffers: usize) -> Vec<bool> {
    buffers_reached(codes, buffers, true)
}

fn buffers_reached(codes: &[ProgramCode], buffers: usize, semaphores: bool) -> Vec<bool> {
    let mut reached = vec![false; buffers];
    for instr in codes.iter().flat_map(|c| &c.code) {
        let acc = match instr {
            Instr::Store { acc, .. } | Instr::Atomic { acc, .. } => acc,
            Instr::Sem { acc, .. } if semaphores => acc,
            _ => continue,
        };
        if let Target::Global(b) = acc.target {
            if let Some(r) = reached.get_mut(b) {
                *r = true;
            }
        }
    }
    reached
}
