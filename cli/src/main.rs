//! `mpmd`: check, lower and run `.mpmd` files (see `mpmd --help`).

fn main() -> std::process::ExitCode {
    // SAFETY: first thing in `main`, before any thread starts.
    let _runtime_dir = unsafe { mpmd_wgpu::quiet_display_lookup() };
    mpmd_cli::main_with_args(std::env::args_os())
}
