//! The one place an outcome or a failure becomes the process's exit number (as cargo-nextest's
//! `NextestExitCode`): the commands return a run's [`Outcome`] or an error whose
//! [`FailureKind`] the library that met it chose, and only this file knows the numbers. CI
//! reads them (docs/src/reference/exit-codes.md).

use std::process::ExitCode;

use reports::Outcome;

use crate::failure::FailureKind;

/// Every check that judged passed (or a command with no checks did its work).
pub const PASSED: u8 = 0;
/// A check failed, a run decided nothing, the command `harness exec` ran exited non-zero, or
/// `harness report --compare` found a regression.
pub const FAILED: u8 = 1;
/// Bad input: usage, a scenario file, a journal, a flag's value.
pub const BAD_INPUT: u8 = 2;
/// The run could not be carried out: a target unreachable, a port in use.
pub const COULD_NOT_RUN: u8 = 3;
/// Ctrl-C or SIGTERM stopped the run; what was done was still judged and reported.
pub const INTERRUPTED: u8 = 4;
/// A second Ctrl-C: the process ends at once, as a shell reports one killed by SIGINT.
pub const SIGINT_AGAIN: u8 = 130;
/// A SIGTERM after the first signal: the process ends at once, as one killed by SIGTERM.
pub const SIGTERM_AGAIN: u8 = 143;

/// A command that could not do its work: its kind, and the message that says why.
#[derive(Debug)]
pub(super) enum CliError {
    /// Bad input.
    Input(String),
    /// Could not run.
    Run(String),
}

impl CliError {
    /// What kind of failure it is.
    pub(super) fn kind(&self) -> FailureKind {
        match self {
            CliError::Input(_) => FailureKind::BadInput,
            CliError::Run(_) => FailureKind::CouldNotRun,
        }
    }

    /// The error's own kind with `message`, for an error of the library that said its kind.
    pub(super) fn of_kind(kind: FailureKind, message: String) -> CliError {
        match kind {
            FailureKind::BadInput => CliError::Input(message),
            FailureKind::CouldNotRun | FailureKind::Interrupted => CliError::Run(message),
        }
    }
}

/// The exit number of a run with this outcome.
pub fn of_outcome(outcome: Outcome) -> u8 {
    match outcome {
        Outcome::Passed => PASSED,
        Outcome::Failed | Outcome::NoVerdict => FAILED,
        Outcome::Interrupted => of_failure(FailureKind::Interrupted),
    }
}

/// The exit number of a command that failed with this kind of failure.
pub fn of_failure(kind: FailureKind) -> u8 {
    match kind {
        FailureKind::BadInput => BAD_INPUT,
        FailureKind::CouldNotRun => COULD_NOT_RUN,
        FailureKind::Interrupted => INTERRUPTED,
    }
}

/// The process's status when a command returned: the outcome's number, or the error printed
/// and its kind's number.
pub(super) fn status(result: Result<Outcome, CliError>) -> ExitCode {
    match result {
        Ok(outcome) => ExitCode::from(of_outcome(outcome)),
        Err(e) => {
            match &e {
                CliError::Input(m) | CliError::Run(m) => eprintln!("error: {m}"),
            }
            ExitCode::from(of_failure(e.kind()))
        }
    }
}

/// The status after the command line could not be parsed (`--help` and `--version` print and
/// succeed: clap reports them as errors that go to stdout).
pub(super) fn usage(e: &clap::Error) -> ExitCode {
    let _ = e.print();
    if e.use_stderr() {
        ExitCode::from(BAD_INPUT)
    } else {
        ExitCode::from(PASSED)
    }
}

/// The status when nothing could start (the async runtime).
pub(super) fn could_not_start(why: &str) -> ExitCode {
    eprintln!("error: {why}");
    ExitCode::from(COULD_NOT_RUN)
}

/// A signal the command line stops on.
#[derive(Debug, Clone, Copy)]
pub(super) enum Signal {
    /// Ctrl-C.
    Interrupt,
    /// SIGTERM (what CI sends when it cancels a job).
    Terminate,
}

/// Ends the process at once, on a second signal, with the number a shell gives a process that
/// signal killed.
pub(super) fn at_once(signal: Signal) -> ! {
    std::process::exit(i32::from(match signal {
        Signal::Interrupt => SIGINT_AGAIN,
        Signal::Terminate => SIGTERM_AGAIN,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_outcome_and_kind_has_its_documented_number() {
        assert_eq!(of_outcome(Outcome::Passed), 0);
        assert_eq!(of_outcome(Outcome::Failed), 1);
        assert_eq!(of_outcome(Outcome::NoVerdict), 1);
        assert_eq!(of_outcome(Outcome::Interrupted), 4);
        assert_eq!(of_failure(FailureKind::BadInput), 2);
        assert_eq!(of_failure(FailureKind::CouldNotRun), 3);
        assert_eq!(CliError::Input(String::new()).kind(), FailureKind::BadInput);
        assert_eq!(
            CliError::Run(String::new()).kind(),
            FailureKind::CouldNotRun
        );
    }
}
