//! A Rust builder API for the IR that reads like the text format.
//!
//! ```
//! use mpmd_core::ir::*;
//! use ScalarType::*;
//!
//! let mesh = MeshBuilder::new("m").grid("b", 4).threads("t", 128).build();
//! let map = MapBuilder::new("scale")
//!     .program("m", "scale")
//!     .input("x", gmem(F32, [512]))
//!     .output("y", gmem(F32, [512]))
//!     .scalar("alpha", F32)
//!     .build();
//! let kernel = KernelBuilder::new("scale", map.params()).body(|b| {
//!     let i = b.let_("i", U32, axis_index("b") * axis_size("t") + axis_index("t"));
//!     b.store(at("y", [i.clone()]), load("x", [i]) * var("alpha"));
//! });
//! let module = Module { meshes: vec![mesh], kernels: vec![kernel], maps: vec![map], ..Default::default() };
//! assert_eq!(module.effective_calls().len(), 1);
//! ```

use std::ops;

use super::*;

// ---- types -------------------------------------------------------------

/// `gmem<elem[shape]>`
pub fn gmem(elem: ScalarType, shape: impl Into<Vec<u32>>) -> RefType {
    RefType {
        space: MemorySpace::Gmem,
        elem,
        shape: shape.into(),
        owner: None,
    }
}

/// `smem<elem[shape]>`
pub fn smem(elem: ScalarType, shape: impl Into<Vec<u32>>) -> RefType {
    RefType {
        space: MemorySpace::Smem,
        elem,
        shape: shape.into(),
        owner: None,
    }
}

/// `sem<[shape]>` (always `i32` counters).
pub fn sem(shape: impl Into<Vec<u32>>) -> RefType {
    RefType {
        space: MemorySpace::Sem,
        elem: ScalarType::I32,
        shape: shape.into(),
        owner: None,
    }
}

impl RefType {
    /// `T @ mesh`: one instance per block of `mesh`.
    pub fn owned_by(mut self, mesh: &str) -> Self {
        self.owner = Some(mesh.to_string());
        self
    }
}

impl From<RefType> for Type {
    fn from(r: RefType) -> Self {
        Type::Ref(r)
    }
}

impl From<ScalarType> for Type {
    fn from(s: ScalarType) -> Self {
        Type::Scalar(s)
    }
}

// ---- meshes ------------------------------------------------------------

/// Builds a [`Mesh`]; axes are added in order.
pub struct MeshBuilder {
    mesh: Mesh,
}

impl MeshBuilder {
    pub fn new(name: &str) -> Self {
        MeshBuilder {
            mesh: Mesh {
                name: name.to_string(),
                grid: vec![],
                cluster: vec![],
                threads: Axis {
                    name: "t".to_string(),
                    size: 1,
                },
                thread_axes: vec![],
            },
        }
    }

    pub fn grid(mut self, axis: &str, size: u32) -> Self {
        self.mesh.grid.push(Axis {
            name: axis.to_string(),
            size,
        });
        self
    }

    pub fn cluster(mut self, axis: &str, size: u32) -> Self {
        self.mesh.cluster.push(Axis {
            name: axis.to_string(),
            size,
        });
        self
    }

    pub fn threads(mut self, axis: &str, size: u32) -> Self {
        self.mesh.threads = Axis {
            name: axis.to_string(),
            size,
        };
        self
    }

    pub fn build(self) -> Mesh {
        self.mesh
    }
}

// ---- maps --------------------------------------------------------------

/// Builds an [`MpmdMap`].
pub struct MapBuilder {
    map: MpmdMap,
    /// The list the most recent operand went into, for `resident()`.
    last_kind: Option<OperandKind>,
}

fn operand(name: &str, ty: impl Into<Type>) -> Operand {
    Operand {
        name: name.to_string(),
        ty: ty.into(),
        zeroed: false,
        resident: false,
    }
}

impl MapBuilder {
    pub fn new(name: &str) -> Self {
        MapBuilder {
            map: MpmdMap {
                name: name.to_string(),
                programs: vec![],
                inputs: vec![],
                outputs: vec![],
                scalars: vec![],
                scratch: vec![],
                aliases: vec![],
                fast_math: false,
                debug: false,
            },
            last_kind: None,
        }
    }

    fn push_operand(mut self, kind: OperandKind, op: Operand) -> Self {
        match kind {
            OperandKind::Input => self.map.inputs.push(op),
            OperandKind::Output => self.map.outputs.push(op),
            OperandKind::Scalar => self.map.scalars.push(op),
            OperandKind::Scratch => self.map.scratch.push(op),
        }
        self.last_kind = Some(kind);
        self
    }

    /// Adds the program `kernel` running over `mesh`.
    pub fn program(mut self, mesh: &str, kernel: &str) -> Self {
        self.map.programs.push(Program {
            mesh: mesh.to_string(),
            kernel: kernel.to_string(),
        });
        self
    }

    pub fn input(self, name: &str, ty: RefType) -> Self {
        self.push_operand(OperandKind::Input, operand(name, ty))
    }

    pub fn output(self, name: &str, ty: RefType) -> Self {
        self.push_operand(OperandKind::Output, operand(name, ty))
    }

    /// An output that starts zero-filled.
    pub fn output_zeroed(self, name: &str, ty: RefType) -> Self {
        let op = Operand {
            zeroed: true,
            ..operand(name, ty)
        };
        self.push_operand(OperandKind::Output, op)
    }

    pub fn scalar(self, name: &str, ty: ScalarType) -> Self {
        self.push_operand(OperandKind::Scalar, operand(name, ty))
    }

    pub fn scratch(self, name: &str, ty: RefType) -> Self {
        self.push_operand(OperandKind::Scratch, operand(name, ty))
    }

    pub fn scratch_zeroed(self, name: &str, ty: RefType) -> Self {
        let op = Operand {
            zeroed: true,
            ..operand(name, ty)
        };
        self.push_operand(OperandKind::Scratch, op)
    }

    /// Marks the most recently added operand as bound to the module's
    /// device-resident ref of the same name.
    pub fn resident(mut self) -> Self {
        let list = match self.last_kind {
            Some(OperandKind::Input) => &mut self.map.inputs,
            Some(OperandKind::Output) => &mut self.map.outputs,
            Some(OperandKind::Scalar) => &mut self.map.scalars,
            Some(OperandKind::Scratch) => &mut self.map.scratch,
            None => return self,
        };
        if let Some(op) = list.last_mut() {
            op.resident = true;
        }
        self
    }

    /// Input `input` and output `output` share one buffer.
    pub fn alias(mut self, input: &str, output: &str) -> Self {
        self.map.aliases.push(Alias {
            input: input.to_string(),
            output: output.to_string(),
        });
        self
    }

    pub fn fast_math(mut self) -> Self {
        self.map.fast_math = true;
        self
    }

    /// Sets the map's debug flag ([`MpmdMap::debug`]: recorded, no effect on runs).
    pub fn debug(mut self) -> Self {
        self.map.debug = true;
        self
    }

    pub fn build(self) -> MpmdMap {
        self.map
    }
}

impl MpmdMap {
    /// The parameter list every kernel of this map must have.
    pub fn params(&self) -> Vec<Param> {
        self.operands()
            .map(|(_, o)| Param {
                name: o.name.clone(),
                ty: o.ty.clone(),
            })
            .collect()
    }
}

// ---- expressions -------------------------------------------------------

/// A scalar variable, `let`, loop variable or scalar parameter.
pub fn var(name: &str) -> Expr {
    Expr::Var(name.to_string())
}

pub fn axis_index(axis: &str) -> Expr {
    Expr::AxisIndex(axis.to_string())
}

pub fn axis_size(axis: &str) -> Expr {
    Expr::AxisSize(axis.to_string())
}

/// `base[index...]` as a place (for stores, atomics and semaphores).
pub fn at(base: &str, index: impl IntoIterator<Item = Expr>) -> RefAccess {
    RefAccess {
        base: base.to_string(),
        block: None,
        index: index.into_iter().collect(),
    }
}

/// `base@[block...][index...]`: the instance of the owner's block at `block`.
pub fn at_block(
    base: &str,
    block: impl IntoIterator<Item = Expr>,
    index: impl IntoIterator<Item = Expr>,
) -> RefAccess {
    RefAccess {
        base: base.to_string(),
        block: Some(block.into_iter().collect()),
        index: index.into_iter().collect(),
    }
}

/// `base[index...]` as a value.
pub fn load(base: &str, index: impl IntoIterator<Item = Expr>) -> Expr {
    Expr::Load(Box::new(at(base, index)))
}

impl RefAccess {
    pub fn load(self) -> Expr {
        Expr::Load(Box::new(self))
    }
}

pub fn select(cond: Expr, if_true: Expr, if_false: Expr) -> Expr {
    Expr::Select(Box::new(cond), Box::new(if_true), Box::new(if_false))
}

pub fn math(f: MathFn, args: impl IntoIterator<Item = Expr>) -> Expr {
    Expr::Math(f, args.into_iter().collect())
}

impl Expr {
    pub fn cast(self, to: ScalarType) -> Expr {
        Expr::Cast(to, Box::new(self))
    }
    pub fn bitcast(self, to: ScalarType) -> Expr {
        Expr::Bitcast(to, Box::new(self))
    }
    fn binary(self, op: BinaryOp, rhs: impl Into<Expr>) -> Expr {
        Expr::Binary(op, Box::new(self), Box::new(rhs.into()))
    }
    pub fn eq(self, rhs: impl Into<Expr>) -> Expr {
        self.binary(BinaryOp::Eq, rhs)
    }
    pub fn ne(self, rhs: impl Into<Expr>) -> Expr {
        self.binary(BinaryOp::Ne, rhs)
    }
    pub fn lt(self, rhs: impl Into<Expr>) -> Expr {
        self.binary(BinaryOp::Lt, rhs)
    }
    pub fn le(self, rhs: impl Into<Expr>) -> Expr {
        self.binary(BinaryOp::Le, rhs)
    }
    pub fn gt(self, rhs: impl Into<Expr>) -> Expr {
        self.binary(BinaryOp::Gt, rhs)
    }
    pub fn ge(self, rhs: impl Into<Expr>) -> Expr {
        self.binary(BinaryOp::Ge, rhs)
    }
    pub fn and(self, rhs: impl Into<Expr>) -> Expr {
        self.binary(BinaryOp::LogicAnd, rhs)
    }
    pub fn or(self, rhs: impl Into<Expr>) -> Expr {
        self.binary(BinaryOp::LogicOr, rhs)
    }
    /// `~e`: bitwise complement of an integer (`!e` is the logical not).
    pub fn bit_not(self) -> Expr {
        Expr::Unary(UnaryOp::BitNot, Box::new(self))
    }
}

impl ops::Not for Expr {
    type Output = Expr;
    fn not(self) -> Expr {
        Expr::Unary(UnaryOp::Not, Box::new(self))
    }
}

macro_rules! binary_operator {
    ($trait:ident, $method:ident, $op:ident) => {
        impl<R: Into<Expr>> ops::$trait<R> for Expr {
            type Output = Expr;
            fn $method(self, rhs: R) -> Expr {
                self.binary(BinaryOp::$op, rhs)
            }
        }
    };
}

binary_operator!(Add, add, Add);
binary_operator!(Sub, sub, Sub);
binary_operator!(Mul, mul, Mul);
binary_operator!(Div, div, Div);
binary_operator!(Rem, rem, Rem);
binary_operator!(BitAnd, bitand, BitAnd);
binary_operator!(BitOr, bitor, BitOr);
binary_operator!(BitXor, bitxor, BitXor);
binary_operator!(Shl, shl, Shl);
binary_operator!(Shr, shr, Shr);

impl ops::Neg for Expr {
    type Output = Expr;
    fn neg(self) -> Expr {
        Expr::Unary(UnaryOp::Neg, Box::new(self))
    }
}

impl From<Literal> for Expr {
    fn from(l: Literal) -> Self {
        Expr::Lit(l)
    }
}
impl From<f32> for Expr {
    fn from(v: f32) -> Self {
        Expr::Lit(Literal::f32(v))
    }
}
impl From<i32> for Expr {
    fn from(v: i32) -> Self {
        Expr::Lit(Literal::I32(v))
    }
}
impl From<u32> for Expr {
    fn from(v: u32) -> Self {
        Expr::Lit(Literal::U32(v))
    }
}
impl From<bool> for Expr {
    fn from(v: bool) -> Self {
        Expr::Lit(Literal::Bool(v))
    }
}

// ---- statements and kernels --------------------------------------------

/// Collects the statements of a body. Methods that bind a name return an
/// [`Expr`] that refers to it.
#[derive(Default)]
pub struct BodyBuilder {
    stmts: Vec<Stmt>,
}

impl BodyBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds a nested body.
    pub fn nested(f: impl FnOnce(&mut BodyBuilder)) -> Vec<Stmt> {
        let mut b = BodyBuilder::new();
        f(&mut b);
        b.stmts
    }

    pub fn push(&mut self, stmt: Stmt) {
        self.stmts.push(stmt);
    }

    pub fn let_(&mut self, name: &str, ty: ScalarType, value: impl Into<Expr>) -> Expr {
        self.push(Stmt::Let {
            var: Binding {
                name: name.to_string(),
                ty,
            },
            value: value.into(),
        });
        var(name)
    }

    pub fn var(&mut self, name: &str, ty: ScalarType, init: impl Into<Expr>) -> Expr {
        self.push(Stmt::Var {
            var: Binding {
                name: name.to_string(),
                ty,
            },
            init: init.into(),
        });
        var(name)
    }

    pub fn assign(&mut self, name: &str, value: impl Into<Expr>) {
        self.push(Stmt::Assign {
            name: name.to_string(),
            value: value.into(),
        });
    }

    pub fn local_array(&mut self, name: &str, elem: ScalarType, shape: impl Into<Vec<u32>>) {
        self.push(Stmt::LocalArray {
            name: name.to_string(),
            elem,
            shape: shape.into(),
        });
    }

    pub fn store(&mut self, target: RefAccess, value: impl Into<Expr>) {
        self.push(Stmt::Store {
            target,
            value: value.into(),
        });
    }

    /// An atomic whose result is discarded.
    pub fn atomic(
        &mut self,
        op: AtomicOp,
        target: RefAccess,
        args: impl IntoIterator<Item = Expr>,
    ) {
        self.push(Stmt::Atomic {
            dest: None,
            op,
            target,
            args: args.into_iter().collect(),
        });
    }

    /// An atomic whose old value is bound to `name`.
    pub fn atomic_let(
        &mut self,
        name: &str,
        ty: ScalarType,
        op: AtomicOp,
        target: RefAccess,
        args: impl IntoIterator<Item = Expr>,
    ) -> Expr {
        self.push(Stmt::Atomic {
            dest: Some(Binding {
                name: name.to_string(),
                ty,
            }),
            op,
            target,
            args: args.into_iter().collect(),
        });
        var(name)
    }

    pub fn if_(&mut self, cond: Expr, then_body: impl FnOnce(&mut BodyBuilder)) {
        self.push(Stmt::If {
            cond,
            then_body: Self::nested(then_body),
            else_body: vec![],
        });
    }

    pub fn if_else(
        &mut self,
        cond: Expr,
        then_body: impl FnOnce(&mut BodyBuilder),
        else_body: impl FnOnce(&mut BodyBuilder),
    ) {
        self.push(Stmt::If {
            cond,
            then_body: Self::nested(then_body),
            else_body: Self::nested(else_body),
        });
    }

    /// `for name: ty in start..end { body }`; the closure receives the loop variable.
    pub fn for_(
        &mut self,
        name: &str,
        ty: ScalarType,
        start: impl Into<Expr>,
        end: impl Into<Expr>,
        body: impl FnOnce(&mut BodyBuilder, Expr),
    ) {
        let v = var(name);
        self.push(Stmt::For {
            var: Binding {
                name: name.to_string(),
                ty,
            },
            start: start.into(),
            end: end.into(),
            body: Self::nested(|b| body(b, v)),
        });
    }

    /// `while cond max max { body }`.
    pub fn while_(
        &mut self,
        cond: Expr,
        max: impl Into<Expr>,
        body: impl FnOnce(&mut BodyBuilder),
    ) {
        self.push(Stmt::While {
            cond,
            max: max.into(),
            body: Self::nested(body),
        });
    }

    pub fn barrier(&mut self) {
        self.push(Stmt::Barrier);
    }

    pub fn signal(&mut self, sem: RefAccess, amount: impl Into<Expr>) {
        self.sem_op(SemOp::Signal, sem, amount);
    }

    pub fn wait(&mut self, sem: RefAccess, amount: impl Into<Expr>) {
        self.sem_op(SemOp::Wait, sem, amount);
    }

    pub fn wait_nodec(&mut self, sem: RefAccess, amount: impl Into<Expr>) {
        self.sem_op(SemOp::WaitNodec, sem, amount);
    }

    fn sem_op(&mut self, op: SemOp, sem: RefAccess, amount: impl Into<Expr>) {
        self.push(Stmt::Sem {
            op,
            sem,
            amount: amount.into(),
        });
    }

    /// `let name: i32 = read(sem);`
    pub fn sem_read(&mut self, name: &str, sem: RefAccess) -> Expr {
        self.push(Stmt::SemRead {
            dest: name.to_string(),
            sem,
        });
        var(name)
    }

    /// `let name: ty = op(args...);` a warp collective.
    pub fn warp(&mut self, name: &str, ty: ScalarType, op: WarpOp, args: Vec<Expr>) -> Expr {
        self.push(Stmt::Warp {
            dest: Binding {
                name: name.to_string(),
                ty,
            },
            op,
            args,
        });
        var(name)
    }

    /// `let name: ty = op(args...);` a block collective.
    pub fn block_collective(
        &mut self,
        name: &str,
        ty: ScalarType,
        op: BlockOp,
        args: Vec<Expr>,
    ) -> Expr {
        self.push(Stmt::BlockCollective {
            dest: Binding {
                name: name.to_string(),
                ty,
            },
            op,
            args,
        });
        var(name)
    }

    /// `mma_m16n8k16(d, a, b, c);` on the fragments given: a `&str` names a
    /// whole `local` array, a [`Fragment`] may be a row (`Fragment::row`).
    pub fn mma(
        &mut self,
        d: impl Into<Fragment>,
        a: impl Into<Fragment>,
        b: impl Into<Fragment>,
        c: impl Into<Fragment>,
    ) {
        self.push(Stmt::Mma {
            d: d.into(),
            a: a.into(),
            b: b.into(),
            c: c.into(),
        });
    }

    /// `mma_load_a(dest, source);` or `mma_load_b(dest, source);`: the
    /// lane's fragment of the block whose top-left element `source` names.
    pub fn mma_load(
        &mut self,
        operand: mma::Operand,
        dest: impl Into<Fragment>,
        source: RefAccess,
    ) {
        self.push(Stmt::MmaLoad {
            operand,
            dest: dest.into(),
            source,
        });
    }

    pub fn finish(self) -> Vec<Stmt> {
        self.stmts
    }
}

/// Builds a [`Kernel`] from its parameters (usually [`MpmdMap::params`]).
pub struct KernelBuilder {
    name: Name,
    params: Vec<Param>,
}

impl KernelBuilder {
    pub fn new(name: &str, params: Vec<Param>) -> Self {
        KernelBuilder {
            name: name.to_string(),
            params,
        }
    }

    pub fn body(self, f: impl FnOnce(&mut BodyBuilder)) -> Kernel {
        Kernel {
            name: self.name,
            params: self.params,
            body: BodyBuilder::nested(f),
        }
    }
}
