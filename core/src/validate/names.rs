//! E0056: every name must be an identifier the text format can print and
//! read back. The parser never produces a bad name; the builder API can.

use std::collections::HashSet;

use crate::ir::{IrPath, Module, PathStep, Stmt};
use crate::text::is_valid_name;

use super::Sink;

/// `too_deep`: kernels whose bodies are not walked (E0057).
pub(super) fn check_names(module: &Module, too_deep: &HashSet<&str>, sink: &mut Sink) {
    for function in &module.functions {
        if crate::text::is_builtin_function(&function.name) {
            sink.report(
                "E0056",
                IrPath::root().child(PathStep::Function(function.name.clone())),
                format!(
                    "helper function `{}` has the name of a builtin function",
                    function.name
                ),
                "rename the helper",
            );
        }
    }
    let mut check = |name: &str, path: &IrPath, what: &str| {
        if !is_valid_name(name) {
            sink.report(
                "E0056",
                path.clone(),
                format!("{what} `{name}` is not a valid name"),
                "use an identifier (letters, digits, `_`, not starting with a digit) that is not a keyword",
            );
        }
    };
    let root = IrPath::root();
    for mesh in &module.meshes {
        let path = root.child(PathStep::Mesh(mesh.name.clone()));
        check(&mesh.name, &path, "mesh");
        for axis in mesh.axes() {
            check(&axis.name, &path, "axis");
        }
    }
    for resident in &module.residents {
        let path = root.child(PathStep::Resident(resident.name.clone()));
        check(&resident.name, &path, "resident");
    }
    for kernel in &module.kernels {
        let path = root.child(PathStep::Kernel(kernel.name.clone()));
        check(&kernel.name, &path, "kernel");
        for param in &kernel.params {
            check(
                &param.name,
                &path.child(PathStep::Param(param.name.clone())),
                "parameter",
            );
        }
        if !too_deep.contains(kernel.name.as_str()) {
            check_body(&kernel.body, &path, &mut check);
        }
    }
    for constant in &module.consts {
        let path = root.child(PathStep::Const(constant.name.clone()));
        check(&constant.name, &path, "constant");
    }
    for table in &module.tables {
        let path = root.child(PathStep::Const(table.name.clone()));
        check(&table.name, &path, "constant table");
    }
    for function in &module.functions {
        let path = root.child(PathStep::Function(function.name.clone()));
        check(&function.name, &path, "helper function");
        for param in &function.params {
            check(
                &param.name,
                &path.child(PathStep::Param(param.name.clone())),
                "parameter",
            );
        }
        if crate::text::body_nesting(&function.body) <= crate::text::MAX_NESTING {
            check_body(&function.body, &path, &mut check);
        }
    }
    for map in &module.maps {
        let path = root.child(PathStep::Map(map.name.clone()));
        check(&map.name, &path, "map");
        for (_, operand) in map.operands() {
            check(
                &operand.name,
                &path.child(PathStep::Operand(operand.name.clone())),
                "operand",
            );
        }
    }
}

fn check_body(body: &[Stmt], path: &IrPath, check: &mut impl FnMut(&str, &IrPath, &str)) {
    for (i, stmt) in body.iter().enumerate() {
        let here = path.child(PathStep::Stmt(i));
        match stmt {
            Stmt::Let { var, .. }
            | Stmt::Var { var, .. }
            | Stmt::Warp { dest: var, .. }
            | Stmt::BlockCollective { dest: var, .. } => check(&var.name, &here, "variable"),
            Stmt::Atomic {
                dest: Some(var), ..
            } => check(&var.name, &here, "variable"),
            Stmt::SemRead { dest, .. } => check(dest, &here, "variable"),
            Stmt::LocalArray { name, .. } => check(name, &here, "local array"),
            Stmt::For { var, body, .. } => {
                check(&var.name, &here, "loop variable");
                check_body(body, &here.child(PathStep::Body), check);
            }
            Stmt::While { body, .. } => check_body(body, &here.child(PathStep::Body), check),
            Stmt::Call {
                dest: Some(var), ..
            } => check(&var.name, &here, "variable"),
            Stmt::If {
                then_body,
                else_body,
                ..
            } => {
                check_body(then_body, &here.child(PathStep::Then), check);
                check_body(else_body, &here.child(PathStep::Else), check);
            }
            _ => {}
        }
    }
}
