//! A quiet Vulkan start where no desktop session is: Mesa's device-select
//! layer (`VK_LAYER_MESA_device_select`, installed with lavapipe) asks
//! libwayland for the session's display when an instance enables
//! `VK_KHR_wayland_surface` (wgpu enables every surface extension there
//! is), and libwayland prints `error: XDG_RUNTIME_DIR is invalid or not set
//! in the environment.` to stderr where that variable is unset: twice on
//! every wgpu run of a headless machine, though nothing failed.

use std::path::PathBuf;

/// The private runtime directory [`quiet_display_lookup`] made: removed
/// when this is dropped (at the end of `main`).
#[derive(Debug)]
pub struct RuntimeDir {
    path: Option<PathBuf>,
}

impl RuntimeDir {
    /// The directory made, `None` where `XDG_RUNTIME_DIR` was set already
    /// (or no directory could be made: the look-up then complains as before).
    pub fn path(&self) -> Option<&std::path::Path> {
        self.path.as_deref()
    }
}

impl Drop for RuntimeDir {
    fn drop(&mut self) {
        if let Some(path) = &self.path {
            let _ = std::fs::remove_dir(path);
        }
    }
}

/// Where `XDG_RUNTIME_DIR` is unset, points it at a new, empty directory of
/// this process (mode 0700, as the XDG rule asks), so that the display
/// look-up finds no session and fails as quietly as it would on a desktop
/// without Wayland; where it is set, changes nothing. A binary calls it
/// first thing in `main` and keeps the guard until it returns.
///
/// # Safety
///
/// It sets an environment variable: no other thread may read or write the
/// environment while it runs (call it before the program starts threads).
pub unsafe fn quiet_display_lookup() -> RuntimeDir {
    if std::env::var_os("XDG_RUNTIME_DIR").is_some() {
        return RuntimeDir { path: None };
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let path = std::env::temp_dir().join(format!("mpmd-runtime-{}-{nanos}", std::process::id()));
    let mut builder = std::fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    // A new directory only (`create` fails on any existing path, a planted
    // link included): nothing else is ever used as the runtime directory.
    if builder.create(&path).is_err() {
        return RuntimeDir { path: None };
    }
    std::env::set_var("XDG_RUNTIME_DIR", &path);
    RuntimeDir { path: Some(path) }
}
