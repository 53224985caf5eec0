//! Run errors whose messages name options the front end's way: the library
//! names Rust options (`InterpOptions::time_limit`); the CLI names its flags
//! (`--timeout SECONDS`), the Python package its parameters
//! (`Interpreter(timeout=SECONDS)`), each from a table of its own.

use mpmd_core::RunError;

/// `text` with every Rust option of `table` replaced by its name there.
pub fn name_options(text: &str, table: &[(&str, &str)]) -> String {
    table.iter().fold(text.to_string(), |t, (option, name)| {
        t.replace(option, name)
    })
}

/// A run error whose messages name options as `table` says (the CLI's
/// flags, the Python package's parameters).
pub fn with_option_names(error: RunError, table: &[(&str, &str)]) -> RunError {
    let rename = |text: &str| name_options(text, table);
    match error {
        RunError::TimeLimit {
            at,
            limit_ms,
            option,
        } => RunError::TimeLimit {
            at,
            limit_ms,
            option: rename(&option),
        },
        RunError::MemoryLimit {
            what,
            needed,
            limit,
            option,
        } => RunError::MemoryLimit {
            what,
            needed,
            limit,
            option: rename(&option),
        },
        RunError::Deadlock { wait_for_graph } => RunError::Deadlock {
            wait_for_graph: rename(&wait_for_graph),
        },
        RunError::Nondeterministic { detail } => RunError::Nondeterministic {
            detail: rename(&detail),
        },
        RunError::Unsupported { reason } => RunError::Unsupported {
            reason: rename(&reason),
        },
        RunError::Refused { reason } => RunError::Refused {
            reason: rename(&reason),
        },
        RunError::BadArguments(text) => RunError::BadArguments(rename(&text)),
        RunError::Backend(text) => RunError::Backend(rename(&text)),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_renamed_in_every_message_that_names_one() {
        let table = [("InterpOptions::time_limit", "timeout=SECONDS")];
        let error = with_option_names(
            RunError::Refused {
                reason: "over InterpOptions::time_limit".into(),
            },
            &table,
        );
        assert_eq!(
            error.to_string(),
            "refused before launch: over timeout=SECONDS"
        );
        assert_eq!(
            name_options("InterpOptions::time_limit, WgpuOptions::time_limit", &table),
            "timeout=SECONDS, WgpuOptions::time_limit"
        );
    }
}
