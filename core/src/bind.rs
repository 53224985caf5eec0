//! Runs on memory the caller owns (docs/design.md, "Front ends and embedding"): which operands
//! of a map a caller binds its own device buffers to, and the one check of
//! what it binds, which every backend's prepared run makes before it
//! launches anything.
//!
//! A run on caller memory binds a buffer to every input the host path
//! uploads and to every output (required), and may bind one to a
//! device-resident operand (otherwise the backend's own resident of that
//! name is used). Everything else (scratch, semaphores, `zeroed` inputs) is
//! the backend's own memory, prepared once with the map. Each buffer states
//! its element type and element count, and both must be exactly the
//! operand's: a buffer of another type would have its bits reinterpreted,
//! and a shorter one would be written past its end.

use std::collections::BTreeMap;

use crate::backend::RunError;
use crate::ir::{Literal, Name, ScalarType};
use crate::plan::{BufferInit, BufferPlan, LaunchPlan};

/// What a run needs to know of a caller's buffer: the element type and
/// element count it holds (the memory itself is the backend's own type).
pub trait DeviceMemory {
    fn elem(&self) -> ScalarType;
    /// Elements (not bytes) the buffer holds.
    fn element_count(&self) -> u64;
    /// Whether two bindings name the same memory (an input and the output
    /// aliased to it may both be given, and must then be one buffer).
    fn same_memory(&self, other: &Self) -> bool;
}

/// The arguments of one run on caller memory: a buffer per operand name
/// and a value per scalar parameter.
#[derive(Clone, Debug)]
pub struct DeviceArgs<B> {
    pub buffers: BTreeMap<Name, B>,
    pub scalars: BTreeMap<Name, Literal>,
}

impl<B> Default for DeviceArgs<B> {
    fn default() -> Self {
        DeviceArgs {
            buffers: BTreeMap::new(),
            scalars: BTreeMap::new(),
        }
    }
}

impl<B> DeviceArgs<B> {
    /// Binds operand `name` to `buffer`.
    pub fn buffer(mut self, name: &str, buffer: B) -> Self {
        self.buffers.insert(name.to_string(), buffer);
        self
    }

    /// Gives scalar parameter `name` the value `value`.
    pub fn scalar(mut self, name: &str, value: Literal) -> Self {
        self.scalars.insert(name.to_string(), value);
        self
    }
}

/// Who provides a plan buffer's memory in a run on caller memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Provider {
    /// The caller, always: an uploaded input or an output.
    Caller,
    /// The caller when it binds one, else the backend's resident.
    CallerOrResident,
    /// The backend (scratch, semaphores, `zeroed` inputs), prepared with the map.
    Backend,
}

/// Who provides `buffer`'s memory (see [`Provider`]).
pub fn provider(buffer: &BufferPlan) -> Provider {
    match &buffer.init {
        BufferInit::Resident(_) => Provider::CallerOrResident,
        BufferInit::Input(_) => Provider::Caller,
        _ if buffer.output.is_some() => Provider::Caller,
        _ => Provider::Backend,
    }
}

/// How a message names operand `name` of `buffer`: `input `x``, `output
/// `y`` or `resident `r``.
fn role(plan: &LaunchPlan, buffer: &BufferPlan, name: &str) -> String {
    let what = if matches!(buffer.init, BufferInit::Resident(_)) {
        "resident"
    } else if plan.map.inputs.iter().any(|o| o.name == name) {
        "input"
    } else if buffer.output.as_deref() == Some(name) {
        "output"
    } else {
        "operand"
    };
    format!("{what} `{name}`")
}

/// `256 `f32` elements`.
fn elements(len: u64, elem: ScalarType) -> String {
    format!("{len} `{elem}` element{}", if len == 1 { "" } else { "s" })
}

/// The caller's buffer for each plan buffer (`None`: the backend provides
/// it, or a resident the caller did not bind), after checking every binding:
/// each name is an operand the caller may bind, each buffer has exactly the
/// operand's element type and element count, the names an aliased buffer
/// goes by are bound to one buffer, and every input and output is bound.
pub fn bind<'a, B: DeviceMemory>(
    plan: &LaunchPlan,
    buffers: &'a BTreeMap<Name, B>,
) -> Result<Vec<Option<&'a B>>, RunError> {
    let map = &plan.map.name;
    let mut bound: Vec<Option<(&str, &'a B)>> = vec![None; plan.buffers.len()];
    for (name, given) in buffers {
        let Some(index) = plan
            .buffers
            .iter()
            .position(|b| b.operands.iter().any(|o| o == name))
        else {
            return Err(RunError::BadArguments(format!(
                "map `{map}` has no input, output or resident operand `{name}` (a run binds {})",
                bindable_names(plan)
            )));
        };
        let buffer = &plan.buffers[index];
        let what = role(plan, buffer, name);
        if provider(buffer) == Provider::Backend {
            let why = match buffer.init {
                BufferInit::Zeroed => "starts at zero in every call",
                _ => "is scratch",
            };
            return Err(RunError::BadArguments(format!(
                "{what} of map `{map}` {why}: the backend provides its memory, so a run binds no buffer to it"
            )));
        }
        if given.elem() != buffer.ty.elem || given.element_count() != buffer.len {
            return Err(RunError::BadArguments(format!(
                "{what} of map `{map}` is {}; the buffer given holds {}",
                elements(buffer.len, buffer.ty.elem),
                elements(given.element_count(), given.elem())
            )));
        }
        match bound[index] {
            Some((other, first)) if !first.same_memory(given) => {
                return Err(RunError::BadArguments(format!(
                    "`{other}` and `{name}` of map `{map}` are one buffer (aliased), but the run binds them to different buffers"
                )))
            }
            Some(_) => {}
            None => bound[index] = Some((name, given)),
        }
    }
    let missing: Vec<String> = plan
        .buffers
        .iter()
        .zip(&bound)
        .filter(|(buffer, given)| given.is_none() && provider(buffer) == Provider::Caller)
        .map(|(buffer, _)| {
            let names: Vec<String> = buffer
                .operands
                .iter()
                .map(|n| role(plan, buffer, n))
                .collect();
            names.join(" (or ") + if names.len() > 1 { ")" } else { "" }
        })
        .collect();
    if !missing.is_empty() {
        return Err(RunError::BadArguments(format!(
            "a run of map `{map}` binds a buffer to every input and output; missing: {}",
            missing.join(", ")
        )));
    }
    Ok(bound
        .into_iter()
        .map(|b| b.map(|(_, buffer)| buffer))
        .collect())
}

/// Every operand name a run may bind, for messages.
fn bindable_names(plan: &LaunchPlan) -> String {
    let names: Vec<String> = plan
        .buffers
        .iter()
        .filter(|b| provider(b) != Provider::Backend)
        .flat_map(|b| b.operands.iter().map(|n| format!("`{n}`")))
        .collect();
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A buffer as a test states it: an id standing for the memory.
    #[derive(Debug)]
    struct Fake(u32, ScalarType, u64);

    impl DeviceMemory for Fake {
        fn elem(&self) -> ScalarType {
            self.1
        }
        fn element_count(&self) -> u64 {
            self.2
        }
        fn same_memory(&self, other: &Self) -> bool {
            self.0 == other.0
        }
    }

    fn plan(src: &str, map: &str) -> LaunchPlan {
        let (module, _) = crate::text::parse(src).expect("parses");
        let module = crate::validate::validate(&module, &Default::default()).expect("valid");
        crate::plan::lower(&module, map).expect("lowers")
    }

    const AXPB: &str = "mesh m { grid [b = 4]; threads t = 64; }
        kernel k(x: gmem<f32[256]>, y: gmem<f32[256]>, s: sem<[4]>, tmp: gmem<f32[256]>, a: f32) {
          let i: u32 = axis_index(b) * axis_size(t) + axis_index(t);
          tmp[i] = x[i] * a;
          y[i] = tmp[i] + 1.0;
          signal(s[axis_index(b)], 1);
        }
        map axpb { programs [m: k]; inputs [x: gmem<f32[256]>]; outputs [y: gmem<f32[256]>];
          scalars [a: f32]; scratch [s: sem<[4]>, tmp: gmem<f32[256]>]; }";

    fn buffers(list: Vec<(&str, Fake)>) -> BTreeMap<Name, Fake> {
        list.into_iter().map(|(n, b)| (n.to_string(), b)).collect()
    }

    fn error(result: Result<Vec<Option<&Fake>>, RunError>) -> String {
        match result {
            Err(RunError::BadArguments(message)) => message,
            other => panic!("expected BadArguments, got {other:?}"),
        }
    }

    #[test]
    fn inputs_and_outputs_are_bound_and_the_rest_is_the_backends() {
        let plan = plan(AXPB, "axpb");
        let given = buffers(vec![
            ("x", Fake(1, ScalarType::F32, 256)),
            ("y", Fake(2, ScalarType::F32, 256)),
        ]);
        let bound = bind(&plan, &given).expect("binds");
        let ids: Vec<Option<u32>> = bound.iter().map(|b| b.map(|f| f.0)).collect();
        let names: Vec<&str> = plan
            .buffers
            .iter()
            .map(|b| b.operands[0].as_str())
            .collect();
        for (name, id) in names.iter().zip(ids) {
            let want = match *name {
                "x" => Some(1),
                "y" => Some(2),
                _ => None,
            };
            assert_eq!(id, want, "{name}");
        }
    }

    #[test]
    fn a_mismatch_names_the_operand_and_both_sides() {
        let plan = plan(AXPB, "axpb");
        let wrong_type = buffers(vec![
            ("x", Fake(1, ScalarType::I32, 256)),
            ("y", Fake(2, ScalarType::F32, 256)),
        ]);
        assert_eq!(
            error(bind(&plan, &wrong_type)),
            "input `x` of map `axpb` is 256 `f32` elements; the buffer given holds 256 `i32` elements"
        );
        let short = buffers(vec![
            ("x", Fake(1, ScalarType::F32, 256)),
            ("y", Fake(2, ScalarType::F32, 1)),
        ]);
        assert_eq!(
            error(bind(&plan, &short)),
            "output `y` of map `axpb` is 256 `f32` elements; the buffer given holds 1 `f32` element"
        );
    }

    #[test]
    fn missing_unknown_and_backend_operands_are_refused() {
        let plan = plan(AXPB, "axpb");
        assert_eq!(
            error(bind(
                &plan,
                &buffers(vec![("x", Fake(1, ScalarType::F32, 256))])
            )),
            "a run of map `axpb` binds a buffer to every input and output; missing: output `y`"
        );
        assert_eq!(
            error(bind(
                &plan,
                &buffers(vec![("z", Fake(1, ScalarType::F32, 256))])
            )),
            "map `axpb` has no input, output or resident operand `z` (a run binds `x`, `y`)"
        );
        assert_eq!(
            error(bind(&plan, &buffers(vec![("tmp", Fake(1, ScalarType::F32, 256))]))),
            "operand `tmp` of map `axpb` is scratch: the backend provides its memory, so a run binds no buffer to it"
        );
        assert_eq!(
            error(bind(&plan, &buffers(vec![("s", Fake(1, ScalarType::U32, 4))]))),
            "operand `s` of map `axpb` starts at zero in every call: the backend provides its memory, so a run binds no buffer to it"
        );
    }
}
