//! Where the plan's buffers live in WGSL: one storage binding per buffer, or
//! shared arenas by word type when the adapter allows fewer bindings; the
//! names of buffers and `smem` arrays; the module's global declarations.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use mpmd_core::ir::{MemorySpace, Name, ScalarType, Type};
use mpmd_core::plan::{BufferId, LaunchPlan, UnitId};
use mpmd_core::validate::OperandAccess;

use super::generate::ModuleState;
use super::syntax::{describe_ref_type, fixed_array};
use super::{
    fuses_programs, splits_blocks, EmitError, PARAMS_BINDING, STATUS_BINDING, STATUS_WORDS,
};

/// The WGSL type of one element of a storage binding or shared array.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WordType {
    F32,
    I32,
    U32,
    AtomicI32,
    AtomicU32,
}

impl WordType {
    pub fn wgsl(self) -> &'static str {
        match self {
            WordType::F32 => "f32",
            WordType::I32 => "i32",
            WordType::U32 => "u32",
            WordType::AtomicI32 => "atomic<i32>",
            WordType::AtomicU32 => "atomic<u32>",
        }
    }

    /// The type of the value a word holds (or an atomic word's load returns).
    pub fn value_type(self) -> ScalarType {
        match self {
            WordType::F32 => ScalarType::F32,
            WordType::I32 | WordType::AtomicI32 => ScalarType::I32,
            WordType::U32 | WordType::AtomicU32 => ScalarType::U32,
        }
    }

    pub fn is_atomic(self) -> bool {
        matches!(self, WordType::AtomicI32 | WordType::AtomicU32)
    }

    pub(super) fn for_elem(elem: ScalarType, atomic: bool) -> WordType {
        match (elem, atomic) {
            (ScalarType::F32, false) => WordType::F32,
            // f32 atomics are compare-exchange loops (and loads, stores,
            // exchanges) on the bits.
            (ScalarType::F32, true) => WordType::AtomicU32,
            (ScalarType::I32, false) => WordType::I32,
            (ScalarType::I32, true) => WordType::AtomicI32,
            (ScalarType::U32 | ScalarType::Bool, false) => WordType::U32,
            (ScalarType::U32 | ScalarType::Bool, true) => WordType::AtomicU32,
            // Two 16-bit elements a word; a stored buffer updates its halves atomically.
            (ScalarType::F16 | ScalarType::BF16, false) => WordType::U32,
            (ScalarType::F16 | ScalarType::BF16, true) => WordType::AtomicU32,
        }
    }
}

/// One storage binding of user data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StorageBinding {
    pub binding: u32,
    /// WGSL global name.
    pub global: String,
    pub word: WordType,
    /// Plan buffers stored in it, with their word offsets.
    pub members: Vec<(BufferId, u64)>,
    /// Total words.
    pub words: u64,
}

/// Where each plan buffer lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BindingLayout {
    pub bindings: Vec<StorageBinding>,
    /// Per plan buffer: index into `bindings` (this layout's own index
    /// space, not a plan buffer) and word offset; see [`BindingLayout::place`].
    pub places: Vec<(usize, u64)>,
    /// Whether buffers were packed into shared arenas.
    pub packed: bool,
}

impl BindingLayout {
    /// Where plan buffer `buffer` lives: index into `bindings` and word offset.
    pub fn place(&self, buffer: BufferId) -> (usize, u64) {
        self.places[buffer.index()]
    }
}

pub(super) fn sanitize(name: &str) -> String {
    // IR names are already `[A-Za-z_][A-Za-z0-9_]*`; keep anything else out anyway.
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

use mpmd_core::host::words_for;

/// Whether memory of element type `elem` that a program accesses as
/// `access` is held in atomic words: atomics and semaphore operations, and
/// 16-bit stores (one half of a word that another thread may be updating the
/// other half of).
pub(super) fn needs_atomic_words(access: OperandAccess, elem: ScalarType) -> bool {
    access.is_atomic() || (elem.is_16bit() && access.stored)
}

/// Which plan buffers are held in atomic words, from the programs' facts.
fn atomic_buffers(plan: &LaunchPlan) -> Vec<bool> {
    let mut atomic: Vec<bool> = plan
        .buffers
        .iter()
        .map(|b| b.atomic || b.ty.space == MemorySpace::Sem)
        .collect();
    for unit in &plan.units {
        for (access, operand) in unit.facts.accesses.iter().zip(&plan.operands) {
            if let Some(buffer) = operand.buffer {
                if needs_atomic_words(*access, plan.buffer(buffer).ty.elem) {
                    atomic[buffer.index()] = true;
                }
            }
        }
    }
    atomic
}

/// Assigns bindings: one per buffer, or shared arenas by word type when
/// there are more buffers than the adapter's storage-buffer limit allows
/// (two bindings are taken by the parameter and status buffers).
pub fn binding_layout(
    plan: &LaunchPlan,
    max_storage_buffers: u32,
) -> Result<BindingLayout, EmitError> {
    let atomic = atomic_buffers(plan);
    let words: Vec<WordType> = plan
        .buffers
        .iter()
        .zip(&atomic)
        .map(|(b, &a)| WordType::for_elem(b.ty.elem, a))
        .collect();
    let available = max_storage_buffers.saturating_sub(2);
    if plan.buffers.len() as u64 <= available as u64 {
        let bindings = plan
            .enumerate_buffers()
            .map(|(i, b)| StorageBinding {
                binding: 2 + i.index() as u32,
                global: buffer_global(i, &b.operands),
                word: words[i.index()],
                members: vec![(i, 0)],
                words: words_for(b.ty.elem, b.len),
            })
            .collect::<Vec<_>>();
        let places = (0..plan.buffers.len()).map(|i| (i, 0)).collect();
        return Ok(BindingLayout {
            bindings,
            places,
            packed: false,
        });
    }
    // Packed: plain words share one u32 arena, atomics one arena per type.
    let mut arenas: BTreeMap<u8, StorageBinding> = BTreeMap::new();
    let mut places = vec![(0usize, 0u64); plan.buffers.len()];
    for (i, b) in plan.enumerate_buffers() {
        let (key, word, global) = match words[i.index()] {
            WordType::AtomicI32 => (1u8, WordType::AtomicI32, "g_arena_atomic_i32"),
            WordType::AtomicU32 => (2u8, WordType::AtomicU32, "g_arena_atomic_u32"),
            _ => (0u8, WordType::U32, "g_arena"),
        };
        let arena = arenas.entry(key).or_insert_with(|| StorageBinding {
            binding: 0,
            global: global.to_string(),
            word,
            members: vec![],
            words: 0,
        });
        arena.members.push((i, arena.words));
        places[i.index()] = (key as usize, arena.words);
        arena.words += words_for(b.ty.elem, b.len);
    }
    let needed = 2 + arenas.len() as u32;
    if needed > max_storage_buffers {
        return Err(EmitError::TooManyBindings {
            needed,
            allowed: max_storage_buffers,
        });
    }
    let mut bindings = Vec::new();
    let mut index_of_key = HashMap::new();
    for (key, mut arena) in arenas {
        arena.binding = 2 + bindings.len() as u32;
        index_of_key.insert(key as usize, bindings.len());
        bindings.push(arena);
    }
    for place in &mut places {
        place.0 = index_of_key[&place.0];
    }
    Ok(BindingLayout {
        bindings,
        places,
        packed: true,
    })
}

/// The WGSL global of plan buffer `index` in the unpacked layout:
/// `g<index>_<first operand>`. The buffer index alone makes it unique (the
/// operand name is a hint for readers; aliases are listed in a comment), so
/// operands `x_y` and an alias `x -> y` cannot meet (see ARCHITECTURE.md,
/// "WGSL names").
fn buffer_global(index: BufferId, operands: &[Name]) -> String {
    let hint = operands.first().map(|n| sanitize(n)).unwrap_or_default();
    format!("g{index}_{hint}")
}

pub(super) fn smem_global(unit: UnitId, name: &str) -> String {
    format!("s{unit}_{}", sanitize(name))
}

impl ModuleState<'_> {
    pub(super) fn write_globals(&self, out: &mut String) {
        out.push_str(
            "// Scalar parameters, then literals that WGSL must not fold at shader creation.\n",
        );
        writeln!(
            out,
            "@group(0) @binding({PARAMS_BINDING}) var<storage, read> mpmd_params: array<u32>;"
        )
        .unwrap();
        out.push_str(
            "// Error record: count, kind, unit, block, thread, site, value count, values.\n",
        );
        writeln!(
            out,
            "@group(0) @binding({STATUS_BINDING}) var<storage, read_write> mpmd_status: array<atomic<u32>, {STATUS_WORDS}>;"
        )
        .unwrap();
        for b in &self.layout.bindings {
            let names: Vec<String> = b
                .members
                .iter()
                .map(|&(i, off)| {
                    let buf = self.plan.buffer(i);
                    let owner = buf
                        .ty
                        .owner
                        .as_ref()
                        .map(|m| format!(" @ {m}"))
                        .unwrap_or_default();
                    let at = if self.layout.packed {
                        format!(" at word {off}")
                    } else {
                        String::new()
                    };
                    format!(
                        "{} ({}{owner}, {} instance(s)){at}",
                        buf.operands.join(" = "),
                        describe_ref_type(&buf.ty),
                        buf.instances
                    )
                })
                .collect();
            writeln!(out, "// {}", names.join("; ")).unwrap();
            writeln!(
                out,
                "@group(0) @binding({}) var<storage, read_write> {}: array<{}>;",
                b.binding,
                b.global,
                b.word.wgsl()
            )
            .unwrap();
        }
        out.push('\n');
        out.push_str("// Where the current invocation is, for error records.\n");
        out.push_str("var<private> mpmd_unit: u32;\nvar<private> mpmd_block_id: u32;\nvar<private> mpmd_thread_id: u32;\n");
        if self.options.loop_cap.is_some() {
            out.push_str("// Iterations of every loop this invocation ran (see mpmd_loop_tick).\n");
            out.push_str("var<private> mpmd_loop_count: u32;\n");
            out.push_str("// Set when some invocation of the block passed the loop cap.\n");
            out.push_str("var<workgroup> mpmd_block_stop: u32;\n");
            out.push_str(
                "// Thread 0's loop count after a semaphore wait, shared with the block.\n",
            );
            out.push_str("var<workgroup> mpmd_shared_count: u32;\n");
        }
        if let Some(words) = super::warp::warp_exchange_words(self.plan, self.options) {
            out.push_str(
                "// Warp collectives: each invocation's word, read by its warp between barriers.\n",
            );
            writeln!(out, "var<workgroup> mpmd_warp_words: array<u32, {words}>;").unwrap();
        }
        if super::block::uses_block_collectives(self.plan) {
            out.push_str(
                "// Block collectives: the word every invocation loads, and the vote count.\n",
            );
            out.push_str("var<workgroup> mpmd_block_word: u32;\n");
            out.push_str("var<workgroup> mpmd_block_votes: atomic<u32>;\n");
        }
        out.push_str("// Block-collective broadcast of semaphore reads.\n");
        out.push_str("var<workgroup> mpmd_sem_value: i32;\n");
        if splits_blocks(self.plan, self.options) || fuses_programs(self.plan, self.options) {
            out.push_str(
                "// The workgroup's ticket (its block, or in a fused dispatch its program and block).\n",
            );
            out.push_str("var<workgroup> mpmd_ticket: u32;\n");
        }
        if fuses_programs(self.plan, self.options) {
            out.push_str("// An invocation beyond its program's threads in a fused workgroup.\n");
            out.push_str("var<private> mpmd_idle: bool;\n");
        }
        for (idx, unit) in self.plan.enumerate_units() {
            for slot in &unit.smem {
                let op = self.plan.operand_at(slot.operand);
                if let Type::Ref(r) = &op.ty {
                    let atomic = self.smem_atomic.contains(&(idx, op.name.clone()));
                    let word = WordType::for_elem(r.elem, atomic);
                    writeln!(
                        out,
                        "// smem {} of program {} ({})",
                        op.name,
                        unit.program,
                        describe_ref_type(r)
                    )
                    .unwrap();
                    writeln!(
                        out,
                        "var<workgroup> {}: {};",
                        smem_global(idx, &op.name),
                        fixed_array(word.wgsl(), r.elem, r.len())
                    )
                    .unwrap();
                }
            }
        }
        out.push('\n');
    }
}
