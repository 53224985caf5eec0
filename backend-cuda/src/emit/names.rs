//! How every identifier of a generated module is formed; ARCHITECTURE.md
//! ("CUDA backend", names) has the argument why no two can be equal.
//!
//! - **User names** are `<kind>_<name>` ([`user_name`]): `v` scalars of a
//!   body (`let`, `var`, `for`, atomic and `read` results), `p` scalar
//!   operands, `s` smem, `l` local arrays, `a` axis indices, `m` the
//!   kernel (from the map name). Buffers are `b<index>_<first operand>`,
//!   told apart by the index. The name is never extended by a suffix.
//! - **Generated names** start with `mpmd_` or `MPMD_` (the prelude, the
//!   kernel's skeleton); per-site temporaries are exactly
//!   `mpmd_<letter><digits>`, a form no prelude or skeleton name has.

use mpmd_core::plan::{BufferId, LaunchPlan};

/// The kind letters of user names ([`user_name`]).
pub(super) const USER_KINDS: &str = "vpslam";

/// The C name of a user name of kind `kind` (one letter of
/// [`USER_KINDS`]): `{kind}_{name}`. Names of a valid module are
/// identifiers (`[A-Za-z_][A-Za-z0-9_]*`, E0056) and are kept as they are;
/// any other string becomes `{kind}0_` and the hex of its bytes, so the map
/// stays injective even for plans built without validation.
pub(super) fn user_name(kind: char, name: &str) -> String {
    debug_assert!(USER_KINDS.contains(kind));
    if is_c_identifier(name) {
        format!("{kind}_{name}")
    } else {
        format!("{kind}0_{}", hex(name))
    }
}

/// The kernel's name for map `map`.
pub(super) fn kernel_name(map: &str) -> String {
    user_name('m', map)
}

/// The kernel parameter of scalar operand `operand`.
pub(super) fn scalar_name(operand: &str) -> String {
    user_name('p', operand)
}

/// The kernel parameter of plan buffer `index`.
pub(super) fn buffer_name(plan: &LaunchPlan, index: BufferId) -> String {
    let first = plan
        .buffer(index)
        .operands
        .first()
        .map(String::as_str)
        .unwrap_or("buffer");
    // The index (ended by the first `_`) tells buffers apart; the operand
    // name is only for the reader.
    if is_c_identifier(first) {
        format!("b{index}_{first}")
    } else {
        format!("b{index}_0{}", hex(first))
    }
}

fn hex(name: &str) -> String {
    name.bytes().map(|b| format!("{b:02x}")).collect()
}

fn is_c_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_prefixed() {
        assert_eq!(user_name('v', "int"), "v_int");
        assert_eq!(kernel_name("idx"), "m_idx");
        // Not an identifier: hex, in a form no identifier takes.
        assert_eq!(user_name('v', "my map"), "v0_6d79206d6170");
    }
}
