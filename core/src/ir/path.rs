//! IR paths: where in a module something is, without source spans.

use std::fmt;

use super::Name;

/// One step of an [`IrPath`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PathStep {
    /// A module-level `const`.
    Const(Name),
    Mesh(Name),
    /// A helper function.
    Function(Name),
    Kernel(Name),
    Map(Name),
    Resident(Name),
    /// Index into `Module::calls`.
    Call(usize),
    /// A map operand, by name.
    Operand(Name),
    /// Index into `MpmdMap::programs`.
    Program(usize),
    /// A kernel parameter, by name.
    Param(Name),
    /// Index of a statement in the enclosing statement list.
    Stmt(usize),
    /// The `then` branch of an `if`.
    Then,
    /// The `else` branch of an `if`.
    Else,
    /// The body of a `for`.
    Body,
    /// The test-case section.
    Case,
}

/// A path from the module root to an item or statement, e.g.
/// `kernel consume / stmt 2 / then / stmt 0`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IrPath(pub Vec<PathStep>);

impl IrPath {
    pub fn root() -> Self {
        IrPath(Vec::new())
    }

    /// This path with one more step.
    pub fn child(&self, step: PathStep) -> Self {
        let mut steps = self.0.clone();
        steps.push(step);
        IrPath(steps)
    }

    /// The longest prefix that names an item or statement (used to find the
    /// nearest recorded source span).
    pub fn parent(&self) -> Option<Self> {
        if self.0.is_empty() {
            None
        } else {
            Some(IrPath(self.0[..self.0.len() - 1].to_vec()))
        }
    }
}

impl fmt::Display for PathStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathStep::Const(n) => write!(f, "const {n}"),
            PathStep::Mesh(n) => write!(f, "mesh {n}"),
            PathStep::Function(n) => write!(f, "fn {n}"),
            PathStep::Kernel(n) => write!(f, "kernel {n}"),
            PathStep::Map(n) => write!(f, "map {n}"),
            PathStep::Resident(n) => write!(f, "resident {n}"),
            PathStep::Call(i) => write!(f, "call {i}"),
            PathStep::Operand(n) => write!(f, "operand {n}"),
            PathStep::Program(i) => write!(f, "program {i}"),
            PathStep::Param(n) => write!(f, "param {n}"),
            PathStep::Stmt(i) => write!(f, "stmt {i}"),
            PathStep::Then => write!(f, "then"),
            PathStep::Else => write!(f, "else"),
            PathStep::Body => write!(f, "body"),
            PathStep::Case => write!(f, "case"),
        }
    }
}

impl fmt::Display for IrPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return write!(f, "module");
        }
        for (i, step) in self.0.iter().enumerate() {
            if i > 0 {
                write!(f, " / ")?;
            }
            write!(f, "{step}")?;
        }
        Ok(())
    }
}

impl super::Module {
    /// The statement at `path` (`kernel K / stmt 2 / then / stmt 0`, or in
    /// a helper `fn F / ...`), if there is one.
    pub fn stmt_at(&self, path: &IrPath) -> Option<&super::Stmt> {
        use super::Stmt;
        let (first, steps) = path.0.split_first()?;
        let mut stmts: &[Stmt] = match first {
            PathStep::Kernel(name) => &self.kernel(name)?.body,
            PathStep::Function(name) => &self.function(name)?.body,
            _ => return None,
        };
        let mut found: Option<&Stmt> = None;
        for step in steps {
            stmts = match (step, found) {
                (PathStep::Stmt(i), _) => {
                    found = Some(stmts.get(*i)?);
                    continue;
                }
                (PathStep::Then, Some(Stmt::If { then_body, .. })) => then_body,
                (PathStep::Else, Some(Stmt::If { else_body, .. })) => else_body,
                (PathStep::Body, Some(Stmt::For { body, .. } | Stmt::While { body, .. })) => body,
                _ => return None,
            };
            found = None;
        }
        found
    }
}
