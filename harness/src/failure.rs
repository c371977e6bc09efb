//! What kind of failure stopped a command, as the library that met it says: bad input, could
//! not run, interrupted. A library says the kind and never a number; the command line alone
//! turns a kind, or a run's outcome, into an exit number (`cli/exit.rs`).

/// What kind of failure an error is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// The input is wrong — a flag, a file, a URL, a setting — and fixing it fixes the command.
    BadInput,
    /// The input is fine but the work could not be carried out: a target unreachable, a port in
    /// use, a file that cannot be written, a task that died.
    CouldNotRun,
    /// Ctrl-C or SIGTERM stopped the work before its end.
    Interrupted,
}
