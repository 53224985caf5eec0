//! Compiles a kernel body to a flat, register-based bytecode.
//!
//! Every register is a vector with one 32-bit word per thread of the block;
//! every instruction processes all lanes of the block in one tight loop, so
//! dispatch overhead is paid once per block, not once per thread. Control flow
//! is flat (jumps plus a mask stack) so that a block can suspend at any
//! instruction, e.g. a semaphore wait, and resume from its program counter.

use std::collections::HashMap;

use crate::backend::RunError;
use crate::ir::{
    mma, BinaryOp, Expr, Fragment, IrPath, Kernel, MathFn, MemorySpace, Mesh, PathStep, RefAccess,
    RefType, ScalarType, Stmt, UnaryOp,
};
use crate::plan::ProgramId;

pub(crate) use super::code::*;

mod kinds;
mod uniform;

use kinds::*;
use uniform::Construct;

#[derive(Clone, Debug)]
enum Sym {
    Scalar { reg: Reg, ty: ScalarType },
    Ref { target: Target, ty: RefType },
    Foreign,
}

struct Compiler<'a> {
    kernel: &'a Kernel,
    mesh: &'a Mesh,
    meshes: &'a [Mesh],
    code: Vec<Instr>,
    regs: Vec<RegInit>,
    mutable: Vec<bool>,
    consts: HashMap<u32, Reg>,
    lane_reg: Option<Reg>,
    block_axis_regs: HashMap<String, Reg>,
    scope: Vec<(String, Sym)>,
    locals: Vec<ArrayInfo>,
    synchronises: bool,
    /// Saved masks on the stack at the statement being compiled.
    mask_depth: usize,
    /// For each enclosing loop, the mask depth inside it (after the push
    /// that saves the mask the loop started with).
    loop_depths: Vec<usize>,
    while_conditions: Vec<String>,
    /// The statement being compiled (steps below the kernel's).
    path: Vec<PathStep>,
    /// The statement of each access compiled so far (`access_paths`).
    access_paths: Vec<IrPath>,
    /// The control constructs (ifs and loops) compiled so far, the one the
    /// code being compiled is in, where each instruction's construct
    /// changes (code index, construct), the construct each register was
    /// declared in and the loops being compiled: what `uniform::analyse`
    /// needs.
    constructs: Vec<Construct>,
    current: Option<usize>,
    construct_marks: Vec<(usize, Option<usize>)>,
    declared_in: Vec<Option<usize>>,
    loop_constructs: Vec<usize>,
}

/// Largest memory, in 32-bit words, one buffer or per-block array may have
/// (two 16-bit elements a word).
pub(crate) const MAX_WORDS: u64 = 1 << 31;

/// Elements of a shape, or `None` when the count overflows.
pub(crate) fn checked_len(shape: &[u32]) -> Option<u64> {
    crate::ir::limits::checked_product(shape.iter().map(|&d| u64::from(d)))
}

fn invalid(kernel: &str, msg: impl std::fmt::Display) -> RunError {
    RunError::Backend(format!(
        "cannot run kernel `{kernel}`: {msg} (the validator should reject this)"
    ))
}

/// Compiles `kernel` for a program on `mesh`, with parameters bound as given.
pub(crate) fn compile(
    program: ProgramId,
    kernel: &Kernel,
    mesh: &Mesh,
    meshes: &[Mesh],
    bindings: &[ParamBinding],
    smem: Vec<ArrayInfo>,
) -> Result<ProgramCode, RunError> {
    if kernel.params.len() != bindings.len() {
        return Err(invalid(
            &kernel.name,
            format!(
                "it has {} parameters but the map has {} operands",
                kernel.params.len(),
                bindings.len()
            ),
        ));
    }
    let threads = mesh.threads.size as usize;
    if threads == 0 || threads > 1024 {
        return Err(invalid(
            &kernel.name,
            format!("mesh `{}` has {threads} threads per block", mesh.name),
        ));
    }
    let block_axes: Vec<u32> = mesh.block_axes().map(|a| a.size).collect();
    let block_count = checked_len(&block_axes)
        .filter(|&n| n <= u32::MAX as u64)
        .ok_or_else(|| RunError::Refused {
            reason: format!("mesh `{}` has more than {} blocks", mesh.name, u32::MAX),
        })?;
    let mut c = Compiler {
        kernel,
        mesh,
        meshes,
        code: vec![],
        regs: vec![],
        mutable: vec![],
        consts: HashMap::new(),
        lane_reg: None,
        block_axis_regs: HashMap::new(),
        scope: vec![],
        locals: vec![],
        synchronises: false,
        mask_depth: 0,
        loop_depths: vec![],
        while_conditions: vec![],
        path: vec![],
        access_paths: vec![],
        constructs: vec![],
        current: None,
        construct_marks: vec![],
        declared_in: vec![],
        loop_constructs: vec![],
    };
    for (param, binding) in kernel.params.iter().zip(bindings) {
        let sym = match binding {
            ParamBinding::Scalar { ty, bits } => Sym::Scalar {
                reg: c.constant(*bits),
                ty: *ty,
            },
            ParamBinding::Global { buffer, ty } => Sym::Ref {
                target: Target::Global(*buffer),
                ty: ty.clone(),
            },
            ParamBinding::Smem { slot, ty } => Sym::Ref {
                target: Target::Smem(*slot),
                ty: ty.clone(),
            },
            ParamBinding::Foreign => Sym::Foreign,
        };
        c.scope.push((param.name.clone(), sym));
    }
    c.body(&kernel.body)?;
    c.code.push(Instr::End);
    let uniform = uniform::analyse(
        &mut c.code,
        &c.regs,
        &uniform::Declarations {
            mutable: &c.mutable,
            declared_in: &c.declared_in,
            constructs: &c.constructs,
            marks: &c.construct_marks,
        },
    );
    Ok(ProgramCode {
        program,
        kernel: kernel.name.clone(),
        code: c.code,
        regs: c.regs,
        uniform,
        locals: c.locals,
        smem,
        threads,
        block_count,
        synchronises: c.synchronises,
        flush_subnormals: false,
        mma_probe: super::MmaProbe::Off,
        while_conditions: c.while_conditions,
        loop_limit_is_error: false,
        access_paths: c.access_paths,
    })
}

impl Compiler<'_> {
    fn err(&self, msg: impl std::fmt::Display) -> RunError {
        invalid(&self.kernel.name, msg)
    }

    fn new_reg(&mut self, init: RegInit, mutable: bool) -> Reg {
        self.regs.push(init);
        self.mutable.push(mutable);
        self.declared_in.push(self.current);
        self.regs.len() - 1
    }

    /// Starts a construct (an `if` or a loop) whose lanes are chosen by
    /// `conds`; the code compiled until [`Self::close`] is in it.
    fn open(&mut self, conds: Vec<Reg>) -> usize {
        let id = self.constructs.len();
        self.constructs.push(Construct {
            parent: self.current,
            conds,
            exits: false,
        });
        self.current = Some(id);
        self.construct_marks.push((self.code.len(), self.current));
        id
    }

    fn close(&mut self, id: usize) {
        self.current = self.constructs[id].parent;
        self.construct_marks.push((self.code.len(), self.current));
    }

    fn temp(&mut self) -> Reg {
        self.new_reg(RegInit::Temp, false)
    }

    fn constant(&mut self, bits: u32) -> Reg {
        if let Some(&r) = self.consts.get(&bits) {
            return r;
        }
        let r = self.new_reg(RegInit::Const(bits), false);
        self.consts.insert(bits, r);
        r
    }

    /// Whether `reg`, the value of an expression compiled when the first
    /// new register was `first_new`, is a temporary of that expression:
    /// nothing reads it after the assignment that takes it.
    fn dies(&self, reg: Reg, first_new: Reg) -> bool {
        reg >= first_new && !self.mutable[reg] && matches!(self.regs[reg], RegInit::Temp)
    }

    /// A register whose value will not change while the caller relies on it.
    fn stable(&mut self, reg: Reg) -> Reg {
        if !self.mutable[reg] {
            return reg;
        }
        let t = self.temp();
        self.code.push(Instr::Mov {
            dst: t,
            src: reg,
            src_dies: false,
        });
        t
    }

    fn lookup(&self, name: &str) -> Option<&Sym> {
        self.scope
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, s)| s)
    }

    fn find_axis_size(&self, name: &str) -> Option<u32> {
        self.mesh
            .axis(name)
            .or_else(|| self.meshes.iter().find_map(|m| m.axis(name)))
            .map(|a| a.size)
    }

    fn body(&mut self, stmts: &[Stmt]) -> Result<(), RunError> {
        let depth = self.scope.len();
        for (i, s) in stmts.iter().enumerate() {
            self.path.push(PathStep::Stmt(i));
            self.stmt(s)?;
            self.path.pop();
        }
        self.scope.truncate(depth);
        Ok(())
    }

    /// `body` compiled as the statements under `step` of the current one.
    fn body_at(&mut self, step: PathStep, body: &[Stmt]) -> Result<(), RunError> {
        self.path.push(step);
        self.body(body)?;
        self.path.pop();
        Ok(())
    }

    /// The site of an access of the current statement: its index in
    /// `access_paths`, or `u16::MAX` past the first 65,535.
    fn access_site(&mut self) -> u16 {
        match u16::try_from(self.access_paths.len()) {
            Ok(site) if site < u16::MAX => {
                let mut steps = vec![PathStep::Kernel(self.kernel.name.clone())];
                steps.extend(self.path.iter().cloned());
                self.access_paths.push(IrPath(steps));
                site
            }
            _ => u16::MAX,
        }
    }

    /// A loop body between a push and a pop of the iteration's mask, so
    /// that lanes that `continue` come back for the next iteration. A body
    /// without a `break` or `continue` of its own ends with the mask it
    /// started with (every construct in it restores the mask it found):
    /// nothing to save.
    fn loop_body(&mut self, body: &[Stmt]) -> Result<(), RunError> {
        if !exits_loop(body) {
            self.loop_depths.push(self.mask_depth);
            self.body_at(PathStep::Body, body)?;
            self.loop_depths.pop();
            return Ok(());
        }
        self.code.push(Instr::PushMask);
        self.mask_depth += 1;
        self.loop_depths.push(self.mask_depth);
        self.body_at(PathStep::Body, body)?;
        self.loop_depths.pop();
        self.code.push(Instr::PopMask);
        self.mask_depth -= 1;
        Ok(())
    }

    fn stmt(&mut self, stmt: &Stmt) -> Result<(), RunError> {
        match stmt {
            Stmt::Let { var, value } => {
                let (r, _) = self.expr(value)?;
                let r = self.stable(r);
                self.scope
                    .push((var.name.clone(), Sym::Scalar { reg: r, ty: var.ty }));
            }
            Stmt::Var { var, init } => {
                let first_new = self.regs.len();
                let (src, _) = self.expr(init)?;
                let src_dies = self.dies(src, first_new);
                let r = self.new_reg(RegInit::Temp, true);
                self.code.push(Instr::Mov {
                    dst: r,
                    src,
                    src_dies,
                });
                self.scope
                    .push((var.name.clone(), Sym::Scalar { reg: r, ty: var.ty }));
            }
            Stmt::Assign { name, value } => {
                let first_new = self.regs.len();
                let (src, _) = self.expr(value)?;
                let src_dies = self.dies(src, first_new);
                let dst = match self.lookup(name) {
                    Some(Sym::Scalar { reg, .. }) if self.mutable[*reg] => *reg,
                    _ => return Err(self.err(format!("`{name}` is not a variable"))),
                };
                if dst != src {
                    self.code.push(Instr::Mov { dst, src, src_dies });
                }
            }
            Stmt::LocalArray { name, elem, shape } => {
                let id = self.locals.len();
                let ty = RefType {
                    space: MemorySpace::Local,
                    elem: *elem,
                    shape: shape.clone(),
                    owner: None,
                };
                let len = checked_len(&ty.shape)
                    .filter(|&n| {
                        n.checked_mul(u64::from(self.mesh.threads.size))
                            .is_some_and(|elements| words_of(*elem, elements) <= MAX_WORDS)
                    })
                    .ok_or_else(|| RunError::Refused {
                        reason: format!(
                            "local array `{name}` is larger than {MAX_WORDS} words per block"
                        ),
                    })?;
                self.locals.push(ArrayInfo { len, elem: *elem });
                self.code.push(Instr::LocalDecl { id });
                self.scope.push((
                    name.clone(),
                    Sym::Ref {
                        target: Target::Local(id),
                        ty,
                    },
                ));
            }
            Stmt::Store { target, value } => {
                let (src, _) = self.expr(value)?;
                let acc = self.access(target)?;
                self.code.push(Instr::Store {
                    acc: Box::new(acc),
                    src,
                });
            }
            Stmt::Atomic {
                dest,
                op,
                target,
                args,
            } => {
                if args.len() != op.arity() {
                    return Err(self.err(format!("`{}` takes {} operands", op.name(), op.arity())));
                }
                let mut regs = [0; 2];
                for (i, a) in args.iter().enumerate() {
                    regs[i] = self.expr(a)?.0;
                }
                let acc = self.access(target)?;
                if acc.elem.is_16bit() {
                    return Err(self.err(format!(
                        "atomic `{}` on `{}`, a ref of `{}` (atomics are 32-bit)",
                        op.name(),
                        acc.name,
                        acc.elem
                    )));
                }
                let signed = acc.elem == ScalarType::I32;
                self.synchronises = true;
                let dst = dest.as_ref().map(|_| self.temp());
                self.code.push(Instr::Atomic {
                    op: *op,
                    signed,
                    acc: Box::new(acc),
                    args: regs,
                    dst,
                });
                if let (Some(d), Some(b)) = (dst, dest) {
                    self.scope
                        .push((b.name.clone(), Sym::Scalar { reg: d, ty: b.ty }));
                }
            }
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => {
                let (c, _) = self.expr(cond)?;
                let c = self.stable(c);
                let if_at = self.code.len();
                self.code.push(Instr::IfThen {
                    cond: c,
                    else_pc: 0,
                });
                let construct = self.open(vec![c]);
                self.mask_depth += 1;
                self.body_at(PathStep::Then, then_body)?;
                let else_pc = self.code.len();
                if !else_body.is_empty() {
                    self.code.push(Instr::Else { cond: c, end_pc: 0 });
                    self.body_at(PathStep::Else, else_body)?;
                    let end = self.code.len();
                    if let Instr::Else { end_pc, .. } = &mut self.code[else_pc] {
                        *end_pc = end;
                    }
                }
                if let Instr::IfThen { else_pc: e, .. } = &mut self.code[if_at] {
                    *e = else_pc;
                }
                self.close(construct);
                self.code.push(Instr::PopMask);
                self.mask_depth -= 1;
            }
            Stmt::For {
                var,
                start,
                end,
                body,
            } => {
                let signed = match var.ty {
                    ScalarType::I32 => true,
                    ScalarType::U32 => false,
                    t => {
                        return Err(self.err(format!("loop variable `{}` has type `{t}`", var.name)))
                    }
                };
                let (s, _) = self.expr(start)?;
                let (e, _) = self.expr(end)?;
                let e = self.stable(e);
                let v = self.new_reg(RegInit::Temp, true);
                self.code.push(Instr::Mov {
                    dst: v,
                    src: s,
                    src_dies: false,
                });
                // The variable belongs to the loop: lanes that left it
                // never read it again.
                let construct = self.open(vec![v, e]);
                self.declared_in[v] = Some(construct);
                self.loop_constructs.push(construct);
                self.code.push(Instr::PushMask);
                self.mask_depth += 1;
                let head = self.code.len();
                self.code.push(Instr::LoopTest {
                    var: v,
                    end: e,
                    signed,
                    exit_pc: 0,
                });
                self.scope
                    .push((var.name.clone(), Sym::Scalar { reg: v, ty: var.ty }));
                self.loop_body(body)?;
                self.scope.pop();
                self.code.push(Instr::Inc { var: v });
                self.code.push(Instr::Jump { pc: head });
                self.loop_constructs.pop();
                self.close(construct);
                let exit = self.code.len();
                if let Instr::LoopTest { exit_pc, .. } = &mut self.code[head] {
                    *exit_pc = exit;
                }
                self.code.push(Instr::PopMask);
                self.mask_depth -= 1;
            }
            Stmt::While { cond, max, body } => {
                let ordinal = u32::try_from(self.while_conditions.len())
                    .map_err(|_| self.err("too many `while` loops"))?;
                self.while_conditions.push(crate::text::print_expr(cond));
                let (m, _) = self.expr(max)?;
                let max = self.stable(m);
                let zero = self.constant(0);
                let count = self.new_reg(RegInit::Temp, true);
                self.code.push(Instr::Mov {
                    dst: count,
                    src: zero,
                    src_dies: false,
                });
                let construct = self.open(vec![count, max]);
                self.declared_in[count] = Some(construct);
                self.loop_constructs.push(construct);
                self.code.push(Instr::PushMask);
                self.mask_depth += 1;
                let head = self.code.len();
                let (c, _) = self.expr(cond)?;
                let c = self.stable(c);
                self.constructs[construct].conds.push(c);
                let test = self.code.len();
                self.code.push(Instr::WhileTest {
                    cond: c,
                    count,
                    max,
                    ordinal,
                    exit_pc: 0,
                });
                self.loop_body(body)?;
                self.code.push(Instr::Inc { var: count });
                self.code.push(Instr::Jump { pc: head });
                self.loop_constructs.pop();
                self.close(construct);
                let exit = self.code.len();
                if let Instr::WhileTest { exit_pc, .. } = &mut self.code[test] {
                    *exit_pc = exit;
                }
                self.code.push(Instr::PopMask);
                self.mask_depth -= 1;
            }
            Stmt::Break | Stmt::Continue => {
                let Some(&inside) = self.loop_depths.last() else {
                    return Err(self.err("`break` or `continue` outside a loop"));
                };
                // `break` also clears the lanes from the iteration's saved
                // mask (the push at `inside`), `continue` only from those
                // pushed after it, so they come back for the next iteration.
                let levels = match stmt {
                    Stmt::Break => self.mask_depth + 1 - inside,
                    _ => self.mask_depth - inside,
                };
                // Lanes may leave on their own: the loop's control is not
                // uniform (conservatively, whatever the condition above).
                if let Some(&l) = self.loop_constructs.last() {
                    self.constructs[l].exits = true;
                }
                self.code.push(Instr::LoopExit { levels });
            }
            Stmt::CompoundAssign { .. }
            | Stmt::CompoundStore { .. }
            | Stmt::Call { .. }
            | Stmt::Return { .. } => return Err(self.err(
                "a compound assignment or helper call was not expanded (expand::program_kernel)",
            )),
            Stmt::Barrier => self.code.push(Instr::Barrier),
            Stmt::Sem { op, sem, amount } => {
                let (amount, ty) = self.expr(amount)?;
                let acc = self.access(sem)?;
                self.synchronises = true;
                self.code.push(Instr::Sem {
                    op: *op,
                    acc: Box::new(acc),
                    amount,
                    unsigned: ty == ScalarType::U32,
                });
            }
            Stmt::Mma { d, a, b, c } => {
                let bf16 = match self.lookup(&a.array) {
                    Some(Sym::Ref { ty, .. }) => ty.elem == ScalarType::BF16,
                    _ => return Err(self.err(format!("`{}` is not a local array", a.array))),
                };
                // Element loads and stores (a row's index is part of each):
                // the interpreter's bounds, initialisation and race checks
                // apply to every element.
                let fragment = |this: &mut Self, fragment: &Fragment, len: u32| {
                    (0..len)
                        .map(|i| {
                            let load = Expr::Load(Box::new(fragment.element(i)));
                            this.expr(&load).map(|(r, _)| r)
                        })
                        .collect::<Result<Vec<Reg>, RunError>>()
                };
                let regs = MmaRegs {
                    bf16,
                    a: array(fragment(self, a, mma::A_LEN)?),
                    b: array(fragment(self, b, mma::B_LEN)?),
                    c: array(fragment(self, c, mma::C_LEN)?),
                    d: std::array::from_fn(|_| self.temp()),
                };
                let results = regs.d;
                self.code.push(Instr::Mma(Box::new(regs)));
                for (i, src) in (0..).zip(results) {
                    let acc = self.access(&d.element(i))?;
                    self.code.push(Instr::Store {
                        acc: Box::new(acc),
                        src,
                    });
                }
            }
            Stmt::MmaLoad {
                operand,
                dest,
                source,
            } => {
                // Exactly the element loads it means: each checked as a load.
                let thread_axis = self.mesh.threads.name.clone();
                // Statements of this one: their accesses are this statement's.
                let depth = self.scope.len();
                for load in mma::element_loads(*operand, dest, source, &thread_axis) {
                    self.stmt(&load)?;
                }
                self.scope.truncate(depth);
            }
            Stmt::Warp { dest, op, args } => {
                let mut regs = Vec::with_capacity(args.len());
                let mut value_ty = dest.ty;
                for (i, arg) in args.iter().enumerate() {
                    let (r, ty) = self.expr(arg)?;
                    if i == 0 {
                        value_ty = ty;
                    }
                    regs.push(r);
                }
                let (Some(&value), lane) = (regs.first(), regs.get(1).copied()) else {
                    return Err(RunError::Backend(format!(
                        "`{}` without its value (validation refuses this)",
                        op.name()
                    )));
                };
                let dst = self.temp();
                self.code.push(Instr::Warp {
                    op: *op,
                    ty: value_ty,
                    dst,
                    value,
                    lane,
                });
                self.scope.push((
                    dest.name.clone(),
                    Sym::Scalar {
                        reg: dst,
                        ty: dest.ty,
                    },
                ));
            }
            Stmt::BlockCollective { dest, op, args } => {
                let mut regs = Vec::with_capacity(args.len());
                for arg in args {
                    regs.push(self.expr(arg)?.0);
                }
                let (Some(&value), source) = (regs.first(), regs.get(1).copied()) else {
                    return Err(RunError::Backend(format!(
                        "`{}` without its value (validation refuses this)",
                        op.name()
                    )));
                };
                let dst = self.temp();
                self.code.push(Instr::BlockCollective {
                    op: *op,
                    dst,
                    value,
                    source,
                });
                self.scope.push((
                    dest.name.clone(),
                    Sym::Scalar {
                        reg: dst,
                        ty: dest.ty,
                    },
                ));
            }
            Stmt::SemRead { dest, sem } => {
                let acc = self.access(sem)?;
                self.synchronises = true;
                let d = self.temp();
                self.code.push(Instr::SemRead {
                    dst: d,
                    acc: Box::new(acc),
                });
                self.scope.push((
                    dest.clone(),
                    Sym::Scalar {
                        reg: d,
                        ty: ScalarType::I32,
                    },
                ));
            }
        }
        Ok(())
    }

    fn access(&mut self, ra: &RefAccess) -> Result<CompiledAccess, RunError> {
        let (target, ty) = match self.lookup(&ra.base) {
            Some(Sym::Ref { target, ty }) => (*target, ty.clone()),
            Some(Sym::Foreign) => {
                return Err(self.err(format!("`{}` is smem of another program's mesh", ra.base)))
            }
            _ => return Err(self.err(format!("`{}` is not a ref", ra.base))),
        };
        if ra.index.len() != ty.shape.len() {
            return Err(self.err(format!(
                "`{}` has {} dimensions but is indexed with {}",
                ra.base,
                ty.shape.len(),
                ra.index.len()
            )));
        }
        let mut dims = Vec::with_capacity(ra.index.len());
        for (e, &extent) in ra.index.iter().zip(&ty.shape) {
            let (r, t) = self.expr(e)?;
            dims.push((r, extent, t == ScalarType::I32));
        }
        let mut own = OwnInstance::Zero;
        let coords = match (&ra.block, &ty.owner) {
            (Some(cs), Some(owner)) => {
                if matches!(target, Target::Smem(_) | Target::Local(_)) {
                    return Err(RunError::Unsupported {
                        reason: format!("`{}@[...]`: access to another block's smem", ra.base),
                    });
                }
                let sizes: Vec<u32> = match self.meshes.iter().find(|m| &m.name == owner) {
                    Some(m) => m.block_axes().map(|a| a.size).collect(),
                    None => return Err(self.err(format!("unknown owner mesh `{owner}`"))),
                };
                if sizes.len() != cs.len() {
                    return Err(self.err(format!(
                        "`{}@[...]` needs {} block coordinates, found {}",
                        ra.base,
                        sizes.len(),
                        cs.len()
                    )));
                }
                let mut out = Vec::with_capacity(cs.len());
                for (e, size) in cs.iter().zip(sizes) {
                    let (r, t) = self.expr(e)?;
                    out.push((r, size, t == ScalarType::I32));
                }
                Some(out)
            }
            (Some(_), None) => {
                return Err(self.err(format!(
                    "`{}` has no owner mesh to index with `@[...]`",
                    ra.base
                )))
            }
            (None, Some(owner)) => {
                if owner != &self.mesh.name {
                    return Err(self.err(format!(
                        "`{}` is owned by mesh `{owner}`; a program on `{}` must use `{}@[...]`",
                        ra.base, self.mesh.name, ra.base
                    )));
                }
                if matches!(target, Target::Global(_)) {
                    own = OwnInstance::Block(self.mesh.block_axes().map(|a| a.size).collect());
                }
                None
            }
            (None, None) => None,
        };
        Ok(CompiledAccess {
            target,
            name: ra.base.clone(),
            dims,
            coords,
            own,
            inst_len: checked_len(&ty.shape).unwrap_or(u64::MAX),
            elem: ty.elem,
            site: self.access_site(),
            uniform: false,
        })
    }

    /// `a && b` / `a || b` whose right operand loads: the right operand runs
    /// only on the lanes the left one does not decide (docs/design.md: no load,
    /// no out-of-bounds report, no race there). Without a load the right
    /// operand cannot fail, so evaluating it everywhere gives the same values.
    fn short_circuit(
        &mut self,
        op: BinaryOp,
        a: &Expr,
        b: &Expr,
    ) -> Result<(Reg, ScalarType), RunError> {
        let (ra, _) = self.expr(a)?;
        let ra = self.stable(ra);
        let dst = self.new_reg(RegInit::Temp, true);
        self.code.push(Instr::Mov {
            dst,
            src: ra,
            src_dies: false,
        });
        let if_at = self.code.len();
        self.code.push(Instr::IfThen {
            cond: ra,
            else_pc: 0,
        });
        let construct = self.open(vec![ra]);
        let else_pc = if op == BinaryOp::LogicOr {
            // Nothing to do where `a` holds; `b` decides where it does not.
            let else_pc = self.code.len();
            self.code.push(Instr::Else {
                cond: ra,
                end_pc: 0,
            });
            else_pc
        } else {
            0
        };
        let (rb, _) = self.expr(b)?;
        self.code.push(Instr::Mov {
            dst,
            src: rb,
            src_dies: false,
        });
        self.close(construct);
        let end = self.code.len();
        match op {
            BinaryOp::LogicOr => {
                if let Instr::IfThen { else_pc: e, .. } = &mut self.code[if_at] {
                    *e = else_pc;
                }
                if let Instr::Else { end_pc, .. } = &mut self.code[else_pc] {
                    *end_pc = end;
                }
            }
            _ => {
                if let Instr::IfThen { else_pc: e, .. } = &mut self.code[if_at] {
                    *e = end;
                }
            }
        }
        self.code.push(Instr::PopMask);
        Ok((dst, ScalarType::Bool))
    }

    fn expr(&mut self, e: &Expr) -> Result<(Reg, ScalarType), RunError> {
        use ScalarType::*;
        Ok(match e {
            Expr::Lit(l) => (self.constant(l.to_bits()), l.ty()),
            Expr::WarpPosition(p) => {
                return Err(self.err(format!(
                    "`{}()` is expanded by `expand::program_kernel` before the interpreter",
                    p.name()
                )))
            }
            Expr::Var(name) => match self.lookup(name) {
                Some(Sym::Scalar { reg, ty }) => (*reg, *ty),
                _ => return Err(self.err(format!("unknown scalar `{name}`"))),
            },
            Expr::AxisIndex(name) => {
                if *name == self.mesh.threads.name {
                    let r = match self.lane_reg {
                        Some(r) => r,
                        None => {
                            let r = self.new_reg(RegInit::Lane, false);
                            self.lane_reg = Some(r);
                            r
                        }
                    };
                    return Ok((r, U32));
                }
                if let Some(&r) = self.block_axis_regs.get(name) {
                    return Ok((r, U32));
                }
                let axes: Vec<_> = self.mesh.block_axes().collect();
                let Some(k) = axes.iter().position(|a| &a.name == name) else {
                    return Err(self.err(format!(
                        "`{name}` is not an axis of mesh `{}`",
                        self.mesh.name
                    )));
                };
                let stride: u64 = axes[k + 1..].iter().map(|a| a.size as u64).product();
                let r = self.new_reg(
                    RegInit::BlockAxis {
                        stride,
                        size: axes[k].size,
                    },
                    false,
                );
                self.block_axis_regs.insert(name.clone(), r);
                (r, U32)
            }
            Expr::AxisSize(name) => match self.find_axis_size(name) {
                Some(s) => (self.constant(s), U32),
                None => return Err(self.err(format!("unknown axis `{name}`"))),
            },
            Expr::Load(ra) => {
                let acc = self.access(ra)?;
                let ty = acc.elem;
                let dst = self.temp();
                self.code.push(Instr::Load {
                    dst,
                    acc: Box::new(acc),
                });
                (dst, ty)
            }
            Expr::Unary(op, a) => {
                let (a, t) = self.expr(a)?;
                let k = match (op, t) {
                    (UnaryOp::Neg, F32) => UnKind::Float(FloatUn::Neg),
                    (UnaryOp::Neg, F16 | BF16) => float_un(FloatUn::Neg, t),
                    (UnaryOp::Neg, _) => UnKind::INeg,
                    (UnaryOp::Not, _) => UnKind::LogicNot,
                    (UnaryOp::BitNot, _) => UnKind::BitNot,
                };
                (self.un(k, a), t)
            }
            Expr::Binary(op @ (BinaryOp::LogicAnd | BinaryOp::LogicOr), a, b)
                if contains_load(b) =>
            {
                return self.short_circuit(*op, a, b);
            }
            Expr::Binary(op, a, b) => {
                let (ra, t) = self.expr(a)?;
                let (rb, _) = self.expr(b)?;
                let (k, swap) = bin_kind(*op, t);
                let (x, y) = if swap { (rb, ra) } else { (ra, rb) };
                let dst = self.temp();
                self.code.push(Instr::Bin {
                    op: k,
                    dst,
                    a: x,
                    b: y,
                });
                (dst, if op.is_comparison() { Bool } else { t })
            }
            Expr::Select(c, a, b) => {
                let (c, _) = self.expr(c)?;
                let (a, t) = self.expr(a)?;
                let (b, _) = self.expr(b)?;
                let dst = self.temp();
                self.code.push(Instr::Select { dst, c, a, b });
                (dst, t)
            }
            Expr::Cast(to, a) => {
                let (a, from) = self.expr(a)?;
                let k = cast_kind(from, *to);
                (self.un(k, a), *to)
            }
            Expr::Bitcast(to, a) => {
                let (a, from) = self.expr(a)?;
                // To 16 bits from a 32-bit integer the low half is kept; a
                // 16-bit value's high half is already zero.
                let k = if to.is_16bit() && !from.is_16bit() {
                    UnKind::Low16
                } else {
                    UnKind::Copy
                };
                (self.un(k, a), *to)
            }
            Expr::Math(f, args) => {
                if args.len() != f.arity() {
                    return Err(self.err(format!("`{}` takes {} arguments", f.name(), f.arity())));
                }
                let mut regs = Vec::with_capacity(3);
                let mut ty = F32;
                for (i, a) in args.iter().enumerate() {
                    let (r, t) = self.expr(a)?;
                    if i == 0 {
                        ty = t;
                    }
                    regs.push(r);
                }
                let float = ty.is_float();
                let signed = ty == I32;
                let fl = |op: FloatUn| Some(float_un(op, ty));
                let unary = match f {
                    MathFn::Exp => fl(FloatUn::Exp),
                    MathFn::Log => fl(FloatUn::Log),
                    MathFn::Sqrt => fl(FloatUn::Sqrt),
                    MathFn::Rsqrt => fl(FloatUn::Rsqrt),
                    MathFn::Sin => fl(FloatUn::Sin),
                    MathFn::Cos => fl(FloatUn::Cos),
                    MathFn::Tanh => fl(FloatUn::Tanh),
                    MathFn::Floor => fl(FloatUn::Floor),
                    MathFn::Ceil => fl(FloatUn::Ceil),
                    MathFn::Abs if float => fl(FloatUn::Abs),
                    MathFn::Abs if signed => Some(UnKind::IAbs),
                    MathFn::Abs => Some(UnKind::Copy),
                    f if f.is_bit_operation() => Some(UnKind::Bits(*f)),
                    _ => None,
                };
                if let Some(k) = unary {
                    return Ok((self.un(k, regs[0]), ty));
                }
                let dst = self.temp();
                let bin = |k| Instr::Bin {
                    op: k,
                    dst,
                    a: regs[0],
                    b: regs[1],
                };
                let instr = match f {
                    MathFn::Min => bin(if float {
                        float_bin(FloatBin::Min, ty)
                    } else if signed {
                        BinKind::SMin
                    } else {
                        BinKind::UMin
                    }),
                    MathFn::Max => bin(if float {
                        float_bin(FloatBin::Max, ty)
                    } else if signed {
                        BinKind::SMax
                    } else {
                        BinKind::UMax
                    }),
                    MathFn::Pow => bin(float_bin(FloatBin::Pow, ty)),
                    _ => Instr::Fma {
                        dst,
                        a: regs[0],
                        b: regs[1],
                        c: regs[2],
                        half: Half::of(ty),
                    },
                };
                self.code.push(instr);
                (dst, ty)
            }
        })
    }

    fn un(&mut self, k: UnKind, a: Reg) -> Reg {
        let dst = self.temp();
        self.code.push(Instr::Un { op: k, dst, a });
        dst
    }
}
