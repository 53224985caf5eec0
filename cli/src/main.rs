//! `mpmd`: check, lower and run `.mpmd` files (see `mpmd --help`).

fn main() -> std::process::ExitCode {
    mpmd_cli::main_with_args(std::env::args_os())
}
