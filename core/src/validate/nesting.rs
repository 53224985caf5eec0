//! E0057: nesting past [`MAX_NESTING`] levels (docs/text-format.md,
//! "Nesting"). The parser refuses such input; the builder API can make it.
//! Everything after validation recurses over kernel bodies, so a kernel
//! that nests too deeply is reported here, measured without recursion, and
//! no other check walks its body.

use std::collections::HashSet;

use crate::ir::{IrPath, Module, PathStep};
use crate::text::{visit_nesting, MAX_NESTING};

use super::Sink;

/// Reports every statement nested too deeply; returns the kernels that hold one.
pub(super) fn check_nesting<'m>(module: &'m Module, sink: &mut Sink) -> HashSet<&'m str> {
    let mut too_deep = HashSet::new();
    for kernel in &module.kernels {
        let path = IrPath::root().child(PathStep::Kernel(kernel.name.clone()));
        visit_nesting(&path, &kernel.body, |here, _, nesting| {
            if nesting > MAX_NESTING {
                too_deep.insert(kernel.name.as_str());
                sink.report(
                    "E0057",
                    here.clone(),
                    format!(
                        "this statement of kernel `{}` nests {nesting} levels deep (blocks and expressions); at most {MAX_NESTING} are allowed",
                        kernel.name
                    ),
                    "bind inner parts of the expression to `let`s, or move inner blocks into separate statements",
                );
            }
        });
    }
    too_deep
}
