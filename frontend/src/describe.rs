//! A readable rendering of a [`LaunchPlan`] (`mpmd lower --target plan`,
//! `Module.lower("plan")` in Python).

use std::fmt::Write;

use mpmd_core::ir::Mesh;
use mpmd_core::plan::{BufferInit, IdSource, LaunchPlan};
use mpmd_core::text::{print_ref_type, print_type};

fn mesh_text(mesh: &Mesh) -> String {
    let axes = |list: &[mpmd_core::ir::Axis]| {
        list.iter()
            .map(|a| format!("{} = {}", a.name, a.size))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut text = format!("{}:", mesh.name);
    if !mesh.grid.is_empty() {
        let _ = write!(text, " grid [{}]", axes(&mesh.grid));
    }
    if !mesh.cluster.is_empty() {
        let _ = write!(text, " cluster [{}]", axes(&mesh.cluster));
    }
    let _ = write!(
        text,
        " threads {} = {}",
        mesh.threads.name, mesh.threads.size
    );
    text
}

fn none_if_empty(items: Vec<String>) -> String {
    if items.is_empty() {
        "none".to_string()
    } else {
        items.join(", ")
    }
}

/// Every field of the plan except the copies of the map and kernels.
pub fn describe(plan: &LaunchPlan) -> String {
    let mut out = String::new();
    let map = &plan.map;
    let _ = writeln!(
        out,
        "plan for map `{}`: {} program(s){}{}",
        map.name,
        map.programs.len(),
        if map.fast_math { ", fast_math" } else { "" },
        if map.debug { ", debug" } else { "" },
    );
    let _ = writeln!(out, "meshes:");
    for mesh in &plan.meshes {
        let _ = writeln!(out, "  {}", mesh_text(mesh));
    }
    let _ = writeln!(
        out,
        "external meshes: {}",
        none_if_empty(plan.external_meshes.clone())
    );
    let residents = plan
        .residents
        .iter()
        .map(|r| {
            format!(
                "{}: {}{}",
                r.name,
                print_ref_type(&r.ty),
                if r.zeroed { " zeroed" } else { "" }
            )
        })
        .collect();
    let _ = writeln!(out, "residents: {}", none_if_empty(residents));

    let _ = writeln!(out, "units (launch order):");
    for (index, unit) in plan.enumerate_units() {
        let _ = writeln!(
            out,
            "  unit {index}: program {} `{}` on mesh `{}`: {} block(s) x {} thread(s), smem {} bytes",
            unit.program,
            unit.kernel.name,
            unit.mesh.name,
            unit.block_count,
            unit.threads_per_block,
            unit.smem_bytes
        );
        let axes = unit
            .axes
            .iter()
            .map(|a| {
                let id = match a.source {
                    IdSource::Block => "block",
                    IdSource::Thread => "thread",
                };
                format!("{} = ({id} / {}) % {}", a.axis, a.stride, a.size)
            })
            .collect::<Vec<_>>();
        let _ = writeln!(out, "    axes: {}", axes.join(", "));
        for slot in &unit.smem {
            let name = plan
                .operands
                .get(slot.operand.index())
                .map_or("?", |o| o.name.as_str());
            let _ = writeln!(
                out,
                "    smem `{name}`: offset {} bytes, {} bytes",
                slot.offset_bytes, slot.size_bytes
            );
        }
    }

    let _ = writeln!(out, "operands:");
    for (index, operand) in plan.enumerate_operands() {
        let binding = match operand.buffer {
            Some(b) => format!("buffer {b}"),
            None => "no buffer".to_string(),
        };
        let _ = writeln!(
            out,
            "  {index}: {} `{}`: {} -> {binding}",
            operand.kind.keyword().trim_end_matches('s'),
            operand.name,
            print_type(&operand.ty)
        );
    }

    let _ = writeln!(out, "buffers:");
    for (index, buffer) in plan.enumerate_buffers() {
        let init = match &buffer.init {
            BufferInit::Input(name) => format!("from input `{name}`"),
            BufferInit::Zeroed => "zeroed".to_string(),
            BufferInit::Uninitialized => "uninitialised".to_string(),
            BufferInit::Resident(name) => format!("resident `{name}`"),
        };
        // Elements of the buffer's own size (2 bytes for f16 and bf16).
        let bytes = buffer
            .len
            .checked_mul(u64::from(buffer.ty.elem.byte_size()))
            .map_or_else(|| "more than 2^64".to_string(), |b| b.to_string());
        let mut line = format!(
            "  {index}: [{}] {} x {} instance(s) = {} elements ({bytes} bytes), {init}",
            buffer.operands.join(", "),
            print_ref_type(&buffer.ty),
            buffer.instances,
            buffer.len
        );
        if buffer.atomic {
            line.push_str(", atomic");
        }
        if let Some(output) = &buffer.output {
            let _ = write!(line, ", read back as `{output}`");
        }
        let _ = writeln!(out, "{line}");
    }

    let graph = &plan.graph;
    let edges = |list: &[mpmd_core::plan::DependencyEdge]| {
        none_if_empty(
            list.iter()
                .map(|e| format!("unit {} -> unit {} via `{}`", e.from, e.to, e.semaphore))
                .collect(),
        )
    };
    let _ = writeln!(out, "dependency graph:");
    let _ = writeln!(out, "  edges: {}", edges(&graph.edges));
    let _ = writeln!(out, "  intra-program: {}", edges(&graph.intra_program));
    let waits = graph
        .unsignaled_waits
        .iter()
        .map(|w| {
            format!(
                "unit {} on `{}` ({})",
                w.unit,
                w.semaphore,
                if w.resident {
                    "resident: may be satisfied by earlier calls"
                } else {
                    "not resident: deadlock"
                }
            )
        })
        .collect();
    let _ = writeln!(out, "  unsignaled waits: {}", none_if_empty(waits));
    let yes_no = |b: bool| if b { "yes" } else { "no" };
    let _ = writeln!(out, "  cycle: {}", yes_no(graph.has_cycle));
    let _ = writeln!(
        out,
        "  needs co-residency: {}",
        yes_no(plan.needs_co_residency())
    );
    out
}
