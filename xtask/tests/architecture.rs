//! Invariants of ARCHITECTURE.md that the compiler does not check, checked
//! here so that they cannot silently become false. Each test is named in
//! ARCHITECTURE.md beside the statement it enforces.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask sits in the workspace root")
        .to_path_buf()
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The names between backticks in `text`.
fn quoted(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// The workspace's members, from the root `Cargo.toml`.
fn members() -> Vec<String> {
    let manifest = read(&root().join("Cargo.toml"));
    let start = manifest.find("members = [").expect("a members list");
    let end = start + manifest[start..].find(']').expect("the list's end");
    manifest[start..end]
        .split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// A crate's name and the names of every crate it depends on, from every
/// dependency table of its manifest (`[dependencies]`, `[dev-dependencies]`,
/// `[build-dependencies]`, `[target.'cfg(..)'.dependencies]`, and the
/// `[dependencies.NAME]` form).
fn manifest_edges(manifest: &str) -> (String, BTreeSet<String>) {
    let mut name = None;
    let mut deps = BTreeSet::new();
    let mut section = String::new();
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line.trim_matches(|c| c == '[' || c == ']').to_string();
            // `[dependencies.NAME]`, `[target.X.dev-dependencies.NAME]`.
            for table in ["dependencies.", "dev-dependencies.", "build-dependencies."] {
                if let Some(at) = section.find(table) {
                    deps.insert(section[at + table.len()..].to_string());
                }
            }
            continue;
        }
        let key = line
            .split(['=', '.'])
            .next()
            .unwrap_or("")
            .trim()
            .trim_matches('"');
        if key.is_empty() || key.starts_with('#') {
            continue;
        }
        if section == "package" && key == "name" {
            name = line.split('"').nth(1).map(str::to_string);
        } else if section.ends_with("dependencies") {
            deps.insert(key.to_string());
        }
    }
    (name.expect("a package name"), deps)
}

/// The edges ARCHITECTURE.md documents: the sub-list of "Dependencies point
/// one way", each line `- \`crate\`: \`dep\`, \`dep\` (comment)` or `none`.
fn documented_edges() -> BTreeMap<String, BTreeSet<String>> {
    let text = read(&root().join("ARCHITECTURE.md"));
    let start = text
        .find("- **Dependencies point one way.**")
        .expect("the invariant in ARCHITECTURE.md");
    let mut edges = BTreeMap::new();
    for line in text[start..].lines().skip(1) {
        if !line.starts_with("  ") {
            break;
        }
        let Some(item) = line.trim_start().strip_prefix("- ") else {
            continue;
        };
        let (krate, deps) = item.split_once(':').expect("`crate`: deps");
        let deps = deps.split('(').next().unwrap_or("");
        let krate = quoted(krate).pop().expect("a crate in backticks");
        edges.insert(krate, quoted(deps).into_iter().collect());
    }
    edges
}

/// ARCHITECTURE.md, "Dependencies point one way": every workspace crate
/// depends on exactly the workspace crates the document lists for it.
#[test]
fn dependencies_are_the_documented_ones() {
    let documented = documented_edges();
    let mut found = BTreeMap::new();
    let mut workspace = BTreeSet::new();
    for member in members() {
        let (name, deps) = manifest_edges(&read(&root().join(&member).join("Cargo.toml")));
        workspace.insert(name.clone());
        found.insert(name, deps);
    }
    let found: BTreeMap<String, BTreeSet<String>> = found
        .into_iter()
        .map(|(name, deps)| {
            let ours = deps.into_iter().filter(|d| workspace.contains(d)).collect();
            (name, ours)
        })
        .collect();
    assert_eq!(
        found, documented,
        "the workspace's dependency edges (left) differ from ARCHITECTURE.md's list (right)"
    );
}

/// The parser above reads every form of dependency table.
#[test]
fn every_form_of_dependency_table_is_read() {
    let (name, deps) = manifest_edges(
        r#"
[package]
name = "a"
[dependencies]
b.workspace = true
"c" = { path = "../c" }
[target.'cfg(unix)'.dependencies]
d = "1"
[dev-dependencies]
e = "1"
[build-dependencies.f]
version = "1"
[features]
g = ["dep:b"]
"#,
    );
    assert_eq!(name, "a");
    assert_eq!(
        deps.into_iter().collect::<Vec<_>>(),
        ["b", "c", "d", "e", "f"]
    );
}

/// Owned collections that may grow without bound.
const UNBOUNDED: [&str; 5] = [
    "HashMap<",
    "BTreeMap<",
    "HashSet<",
    "BTreeSet<",
    "VecDeque<",
];

/// Fields and statics of the backends' long-lived state that are such
/// collections and are not caches, each with why it is bounded: (file,
/// `Struct.field` or `static NAME`, reason).
const BOUNDED_COLLECTIONS: &[(&str, &str, &str)] = &[
    (
        "backend-cuda/src/backend/mod.rs",
        "PreparedPlan.scalars",
        "one value per scalar operand of the prepared plan",
    ),
    (
        "backend-cuda/src/backend/mod.rs",
        "CudaBackend.residents",
        "the device-resident refs the caller set or its maps bind: the caller's state, one per resident name, freed with the backend",
    ),
    (
        "backend-cuda/src/backend/mod.rs",
        "CudaBackend.prepared",
        "the host-copy path's prepared plans, most recently used first, truncated to PREPARED_PLANS (the first PLANS_WITH_ARENA keep their memory)",
    ),
    (
        "backend-cuda/src/backend/mod.rs",
        "CudaBackend.pending",
        "the prepared maps enqueued since the last synchronisation, each once; `synchronize` empties it",
    ),
    (
        "backend-cuda/src/host_emulation.rs",
        "HostCudaBackend.residents",
        "the device-resident refs the caller set or its maps bind: the caller's state, one per resident name",
    ),
    (
        "backend-cuda/src/host_cache.rs",
        "static SWEPT",
        "one path per compiled-program folder the process used, each swept once",
    ),
    (
        "backend-wgpu/src/runtime/mod.rs",
        "WgpuBackend.residents",
        "the device-resident refs the caller set or its maps bind: the caller's state, one per resident name, freed with the backend",
    ),
    (
        "backend-wgpu/src/runtime/mod.rs",
        "WgpuBackend.run_cache",
        "the host-copy path's prepared maps, most recently used first, truncated to RUN_CACHE_CAPACITY",
    ),
    (
        "backend-wgpu/src/runtime/mod.rs",
        "WgpuBackend.pending",
        "the prepared maps enqueued since the last synchronisation, each once; `synchronize` empties it",
    ),
    (
        "backend-wgpu/src/runtime/cache.rs",
        "PoolBuffers.by_kind",
        "the buffer pool, bounded in bytes: `BufferPool::put` keeps at most POOL_MAX_BYTES",
    ),
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every owned unbounded collection in a struct field or a static of
/// `source`: `Struct.field` or `static NAME`. A backend itself (a struct
/// named `...Backend`) lives as long as its user keeps it, so its `Vec`s
/// count too (a most-recently-used list is a cache).
fn unbounded_collections(source: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut current: Option<(String, usize)> = None;
    for line in source.lines() {
        let indent = line.len() - line.trim_start().len();
        let trimmed = line.trim();
        if let Some((_, depth)) = &current {
            if indent == *depth && trimmed.starts_with('}') {
                current = None;
                continue;
            }
        }
        let words: Vec<&str> = trimmed.split_whitespace().collect();
        if let Some(at) = words.iter().position(|w| *w == "struct") {
            if trimmed.ends_with('{') && !trimmed.starts_with("//") {
                let name = words.get(at + 1).unwrap_or(&"?");
                let name = name.split(['<', '{']).next().unwrap_or(name);
                current = Some((name.to_string(), indent));
                continue;
            }
        }
        let owned = |ty: &str| {
            let ty = ty.trim();
            !ty.starts_with('&') && UNBOUNDED.iter().any(|c| ty.contains(c))
        };
        if let Some(at) = words.iter().position(|w| *w == "static") {
            if let Some((name, ty)) = words[at + 1..].join(" ").split_once(':') {
                if owned(ty) {
                    found.push(format!("static {}", name.trim()));
                }
            }
            continue;
        }
        if let Some((name, _)) = &current {
            let owned = |ty: &str| {
                owned(ty) || (name.ends_with("Backend") && ty.trim().starts_with("Vec<"))
            };
            let field = trimmed
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub(super) ")
                .trim_start_matches("pub ");
            if let Some((field, ty)) = field.split_once(':') {
                let is_name = !field.is_empty()
                    && field.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                if is_name && owned(ty) {
                    found.push(format!("{name}.{field}"));
                }
            }
        }
    }
    found
}

/// ARCHITECTURE.md, "Long-lived state is bounded": outside the emitters
/// (whose state lives for one emission), a backend holds no map, set or
/// queue that is not a `core::lru::Lru`, except those listed above with
/// why they are bounded. A new cache fails here until it is an `Lru` or
/// listed with its bound.
#[test]
fn backend_caches_are_bounded() {
    let root = root();
    let mut found = BTreeSet::new();
    for backend in ["backend-cuda/src", "backend-wgpu/src"] {
        let mut files = Vec::new();
        rust_files(&root.join(backend), &mut files);
        for file in files {
            let relative = file.strip_prefix(&root).expect("under the root");
            let shown = relative.to_string_lossy().replace('\\', "/");
            if ["/emit/", "/tests/", "/bin/"]
                .iter()
                .any(|d| shown.contains(d))
            {
                continue;
            }
            for item in unbounded_collections(&read(&file)) {
                found.insert((shown.clone(), item));
            }
        }
    }
    let allowed: BTreeSet<(String, String)> = BOUNDED_COLLECTIONS
        .iter()
        .map(|(file, item, _)| (file.to_string(), item.to_string()))
        .collect();
    let unlisted: Vec<_> = found.difference(&allowed).collect();
    assert!(
        unlisted.is_empty(),
        "backend state that may grow without bound: make it a core::lru::Lru, or list it in BOUNDED_COLLECTIONS with its bound: {unlisted:?}"
    );
    let stale: Vec<_> = allowed.difference(&found).collect();
    assert!(
        stale.is_empty(),
        "BOUNDED_COLLECTIONS lists what is gone: {stale:?}"
    );
}

/// The scan sees fields, statics and structs as the backends write them.
#[test]
fn the_collection_scan_finds_fields_and_statics() {
    let source = r#"
pub struct Backend {
    cache: Lru<String, u32>,
    pub(super) seen: HashMap<String, u32>,
    borrowed: &'a BTreeMap<u32, u32>,
    recent: Vec<Plan>,
}
struct Plan {
    shape: Vec<u32>,
}
fn f(x: &HashMap<u32, u32>) {
    static KEPT: Mutex<BTreeSet<u32>> = Mutex::new(BTreeSet::new());
    let local: HashMap<u32, u32> = HashMap::new();
}
"#;
    assert_eq!(
        unbounded_collections(source),
        ["Backend.seen", "Backend.recent", "static KEPT"]
    );
}

/// The names a crate's `lib.rs` makes public: every `pub use` (the name
/// after `as` where there is one) and every `pub` item defined there.
fn public_names(lib: &str) -> (BTreeSet<String>, Vec<String>) {
    let mut names = BTreeSet::new();
    let mut modules = Vec::new();
    let code: String = lib
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    for statement in code.split(';') {
        let statement = statement.trim();
        let Some(at) = statement.find("pub use ") else {
            continue;
        };
        let path = &statement[at + "pub use ".len()..];
        let list = match (path.find('{'), path.rfind('}')) {
            (Some(open), Some(close)) => path[open + 1..close].to_string(),
            _ => path.rsplit("::").next().unwrap_or(path).to_string(),
        };
        for item in list.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let name = item.rsplit(" as ").next().unwrap_or(item);
            names.insert(name.rsplit("::").next().unwrap_or(name).trim().to_string());
        }
    }
    for line in code.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["pub", "mod", name, ..] => modules.push(name.trim_end_matches(';').to_string()),
            ["pub", kind, name, ..]
                if ["fn", "struct", "enum", "const", "static", "trait", "type"].contains(kind) =>
            {
                let name = name.split(['(', '<', ':', '{']).next().unwrap_or(name);
                names.insert(name.to_string());
            }
            _ => {}
        }
    }
    (names, modules)
}

/// What `mpmd-cuda` exports (ARCHITECTURE.md, "Only what a user calls is
/// public"); a change here is a change of the public API.
const CUDA_API: &[&str] = &[
    "AssembleError",
    "AssembleReport",
    "BlockSchedule",
    "CHECK_ARCH",
    "CONTROL_WORDS",
    "CO_RESIDENT_BLOCKS",
    "CO_RESIDENT_THREADS",
    "CacheError",
    "CheckError",
    "CompileError",
    "CompileOptions",
    "CompileReport",
    "Cubin",
    "CudaBackend",
    "CudaBuffer",
    "CudaError",
    "CudaOptions",
    "CudaPrepared",
    "DeviceArgs",
    "EmitError",
    "Emulated",
    "EmittedModule",
    "HOST_CACHE_BYTES",
    "HOST_CXX_FLAGS",
    "HOST_MEMORY_PROGRAMS",
    "HostCompiler",
    "HostCudaBackend",
    "HostEmulationError",
    "HostOptions",
    "KernelParam",
    "KernelResources",
    "LOADED_KERNELS",
    "ModuleCache",
    "NvrtcOutput",
    "PLANS_WITH_ARENA",
    "PRELUDE",
    "PREPARED_PLANS",
    "Ptx",
    "TicketRange",
    "UNINITIALISED_WORD",
    "assemble",
    "buffer_words",
    "check_plan",
    "co_resident",
    "compile_cubin",
    "compile_ptx",
    "compile_with_cache",
    "cudarc",
    "driver_present",
    "driver_version",
    "emit",
    "emit_module",
    "emit_module_with",
    "emulate_words",
    "event_elapsed_ms",
    "host_compilations",
    "host_compiler",
    "nvrtc_present",
    "nvrtc_version",
    "ptxas_path",
    "supported_archs",
];

/// What `mpmd-wgpu` exports.
const WGPU_API: &[&str] = &[
    "AccuracyProfile",
    "AdapterInfo",
    "BindingLayout",
    "DeviceArgs",
    "Dispatch",
    "EmitError",
    "EmitOptions",
    "EmittedModule",
    "F16Choice",
    "F16Conversions",
    "FUSED_ENTRY_POINT",
    "FloatBehaviour",
    "MAX_PROBED_WORKGROUPS",
    "MAX_SPLIT_DISPATCHES",
    "PIPELINE_CACHE_CAPACITY",
    "POOL_MAX_BYTES",
    "RUN_CACHE_CAPACITY",
    "Residency",
    "RuntimeDir",
    "SUBNORMAL_TAG",
    "StorageBinding",
    "SubgroupFacts",
    "WarpChoice",
    "WarpPath",
    "WgpuBackend",
    "WgpuBuffer",
    "WgpuError",
    "WgpuOptions",
    "WgpuPrepared",
    "WordType",
    "accuracy_profile",
    "emit",
    "emit_module",
    "establish",
    "fused_workgroups",
    "fuses_programs",
    "lavapipe_candidate",
    "own_workgroup_bytes",
    "probe_adapter",
    "probe_once",
    "profile_for",
    "quiet_display_lookup",
    "validate_wgsl",
    "wgpu",
];

/// ARCHITECTURE.md, "Only what a user calls is public": each backend's
/// public API is its `lib.rs` exports, pinned here, and no module is public.
#[test]
fn backend_public_apis_are_pinned() {
    for (krate, pinned) in [("backend-cuda", CUDA_API), ("backend-wgpu", WGPU_API)] {
        let (names, modules) = public_names(&read(&root().join(krate).join("src/lib.rs")));
        assert!(
            modules.is_empty(),
            "{krate}: public modules {modules:?}; export what users call from lib.rs"
        );
        let pinned: BTreeSet<String> = pinned.iter().map(|s| s.to_string()).collect();
        let added: Vec<_> = names.difference(&pinned).collect();
        let removed: Vec<_> = pinned.difference(&names).collect();
        assert!(
            added.is_empty() && removed.is_empty(),
            "{krate}'s public API changed: added {added:?}, removed {removed:?}; \
             export only what a user calls (check every user in the workspace) and update the list"
        );
    }
}

/// The export scan reads lists, renames and items defined in lib.rs.
#[test]
fn the_export_scan_reads_every_form() {
    let (names, modules) = public_names(
        "mod a;\npub mod b;\n// pub use hidden::X;\npub use a::{c, d as e,\n    f::G};\n/// doc\npub use h;\npub use i::J as K;\npub fn check(x: u32) {}\npub const L: u32 = 1;\npub struct M<T> {}\n",
    );
    assert_eq!(modules, ["b"]);
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        ["G", "K", "L", "M", "c", "check", "e", "h"]
    );
}

/// The one rule for the words a buffer takes (`mpmd_core::host::words_for`,
/// ARCHITECTURE.md's `host.rs` row): no other library source packs 16-bit
/// elements two a word or rounds bytes up to words on its own (tests may, as
/// independent oracles).
#[test]
fn words_are_counted_in_one_place() {
    let root = root();
    let mut found = Vec::new();
    for member in members() {
        let src = root.join(&member).join("src");
        if !src.is_dir() {
            continue;
        }
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        for file in files {
            let shown = file
                .strip_prefix(&root)
                .expect("under the root")
                .to_string_lossy()
                .replace('\\', "/");
            if shown == "core/src/host.rs" || shown.contains("/tests/") {
                continue;
            }
            for (n, line) in read(&file).lines().enumerate() {
                if line.contains("div_ceil(2)") || line.contains("div_ceil(4)") {
                    found.push(format!("{shown}:{}: {}", n + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "words counted outside mpmd_core::host::words_for: {found:#?}"
    );
}

// ---- facts are computed once ---------------------------------------------------

/// Where validation builds its `ValidModule`: the one caller of the
/// expansion and of the facts' computation.
const VALIDATION_RESULT: &str = "core/src/validate/facts.rs";
/// The one expansion of a program's kernel.
const EXPANSION: &str = "core/src/expand.rs";

/// The lines of `text` that are code, numbered from 1: comments (doc
/// comments included) name things without calling them.
fn code_lines(text: &str) -> Vec<(usize, &str)> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim_start().starts_with("//"))
        .map(|(i, line)| (i + 1, line))
        .collect()
}

/// `file:line: code` of every code line of the members' sources, tests and
/// benches that contains `needle`, except in `allowed` and this file
/// (which names what it looks for).
fn code_uses(needle: &str, allowed: &[&str]) -> Vec<String> {
    let root = root();
    let mut files = Vec::new();
    for member in members() {
        for dir in ["src", "tests", "benches"] {
            let dir = root.join(&member).join(dir);
            if dir.is_dir() {
                rust_files(&dir, &mut files);
            }
        }
    }
    rust_files(&root.join("test-support"), &mut files);
    assert!(files.len() > 100, "found only {} sources", files.len());
    let mut found = Vec::new();
    for file in files {
        let shown = file
            .strip_prefix(&root)
            .expect("under the root")
            .to_string_lossy()
            .replace('\\', "/");
        if allowed.contains(&shown.as_str()) || shown == "xtask/tests/architecture.rs" {
            continue;
        }
        for (n, line) in code_lines(&read(&file)) {
            if line.contains(needle) {
                found.push(format!("{shown}:{n}: {}", line.trim()));
            }
        }
    }
    found
}

/// ARCHITECTURE.md's "Facts are computed once": a program's kernel is
/// expanded only where validation builds its `ValidModule`, once per
/// program; the lowering, the interpreter and conformance take it from there.
#[test]
fn kernels_are_expanded_only_by_validation() {
    assert_eq!(
        code_uses("program_kernel(", &[EXPANSION, VALIDATION_RESULT]),
        Vec::<String>::new(),
        "take the expanded kernel from validation's `ValidModule` (`ValidProgram::kernel`)"
    );
    let calls = code_lines(&read(&root().join(VALIDATION_RESULT)))
        .into_iter()
        .filter(|(_, line)| line.contains("program_kernel("))
        .count();
    assert_eq!(
        calls, 1,
        "one expansion per program, in {VALIDATION_RESULT}"
    );
}

/// ARCHITECTURE.md's "Facts are computed once": `ProgramFacts::of` is called
/// only where validation builds its `ValidModule`.
#[test]
fn facts_are_computed_only_by_validation() {
    assert_eq!(
        code_uses("ProgramFacts::of(", &[VALIDATION_RESULT]),
        Vec::<String>::new(),
        "take the facts from validation's `ValidModule` (`ValidProgram::facts`)"
    );
}

/// ARCHITECTURE.md's "Facts are computed once": the expansion imports
/// neither validation nor the lowering nor the interpreter, and validation
/// does not import the lowering (the lowering takes validation's result).
#[test]
fn the_expansion_sits_below_validation_and_the_lowering() {
    let root = root();
    let expansion = read(&root.join(EXPANSION));
    for layer in ["crate::validate", "crate::plan", "crate::interp", "super::"] {
        let found: Vec<usize> = code_lines(&expansion)
            .into_iter()
            .filter(|(_, line)| line.contains(layer))
            .map(|(n, _)| n)
            .collect();
        assert_eq!(found, Vec::<usize>::new(), "{EXPANSION} uses `{layer}`");
    }
    let mut validation = Vec::new();
    rust_files(&root.join("core/src/validate"), &mut validation);
    assert!(validation.len() > 5, "{validation:?}");
    for file in validation {
        for (n, line) in code_lines(&read(&file)) {
            assert!(
                !line.contains("crate::plan"),
                "{}:{n} uses the lowering: {}",
                file.display(),
                line.trim()
            );
        }
    }
}
