//! The `mpmd` command line: `check`, `lower` and `run` on text-format files.
//!
//! The binary is a thin wrapper around [`main_with_args`], so that tests and
//! other tools can run the same code.

pub mod compare;
pub mod npy;

mod arrays;
mod backends;
mod error;
mod flags;
mod load;
mod lowering;
mod output;
mod run;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::Parser;

pub use crate::error::{for_cli, name_flags, CliError, OPTION_FLAGS};
pub use crate::flags::{ByteSize, Cli, Command, RunFlags, Seconds};
// What every front end shares (loading, backends by name, targets, option
// names) is mpmd-frontend's.
pub use crate::output::{file_name, shape_text, summarize};
pub use crate::run::{interp_options, RunRequest};
use mpmd_frontend::{files, load_file, load_module, resolve_backend_within, BackendKind, Target};

/// Parses `args` (the program name first) and runs the command: output on
/// stdout, errors on stderr.
pub fn main_with_args(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    match run_command(cli.command) {
        Ok(stdout) => {
            print!("{stdout}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            match &e {
                CliError::Rejected(rendered) => eprint!("{rendered}"),
                CliError::Mismatch { summary, report } => {
                    print!("{summary}");
                    eprint!("{report}");
                }
                other => eprintln!("error: {other}"),
            }
            ExitCode::from(1)
        }
    }
}

/// Runs one command; returns what it prints on success.
pub fn run_command(command: Command) -> Result<String, CliError> {
    match command {
        Command::Check { files } => load::check(&files),
        Command::Lower {
            target,
            file,
            map,
            out_dir,
        } => lowering::lower_command(target, &file, map.as_deref(), out_dir.as_deref()),
        Command::Run(flags) => run::run(&RunRequest::from(flags)),
    }
}
