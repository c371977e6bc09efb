//! `harness exec SCENARIO -- CMD`: the scenario's fault server started, CMD run against it (and
//! the scenario's phases, if any, against CMD's service), then the checks on what happened.

use std::io::Write;
use std::os::fd::AsFd;
use std::path::Path;
use std::time::Duration;

use reports::Outcome;

use super::args::{overrides, Common};
use super::exit::CliError;
use super::output::emit;
use super::signals::stop_on_signals;
use crate::scenario;

pub(super) async fn exec(
    path: &Path,
    common: &Common,
    wait: Duration,
    command: &[String],
) -> Result<Outcome, CliError> {
    let plan =
        scenario::load(path, &overrides(common)).map_err(|e| CliError::Input(e.to_string()))?;
    // With phases, the command may be the service under test itself (a webhook consumer the
    // phases deliver to); without them it is the load, and needs a server to load.
    if plan.server.is_none() && plan.phases.is_empty() {
        return Err(CliError::Input(format!(
            "{}: at `server`: `harness exec` needs an embedded fault server to point the command at (or phases that drive the command's service)",
            path.display()
        )));
    }
    let stop = stop_on_signals();
    let mut session = crate::run::Session::start(&plan)
        .await
        .map_err(|e| CliError::Run(e.to_string()))?;
    let url = session.server_url().unwrap_or_default();
    let (program, args) = command
        .split_first()
        .ok_or_else(|| CliError::Input("no command given after --".into()))?;
    // The command's stdout goes to our stderr: stdout carries the report (`--format json` must
    // stay parseable).
    let stdout = std::io::stderr()
        .as_fd()
        .try_clone_to_owned()
        .map(std::process::Stdio::from)
        .unwrap_or_else(|_| std::process::Stdio::inherit());
    // A fault server with a certificate of its own: the command gets it to trust, as a file.
    let ca_file = match session.certificate_pem() {
        Some(pem) => {
            let f = tempfile::Builder::new()
                .prefix("harness-fault-ca")
                .suffix(".pem")
                .tempfile()
                .and_then(|mut f| {
                    f.write_all(pem.as_bytes())?;
                    Ok(f)
                })
                .map_err(|e| CliError::Run(format!("cannot write the fault server's CA: {e}")))?;
            Some(f)
        }
        None => None,
    };
    let mut cmd = tokio::process::Command::new(program);
    if let Some(f) = &ca_file {
        cmd.env("HARNESS_FAULT_CA", f.path());
    }
    if session.server_url().is_some() {
        cmd.env("HARNESS_FAULT_URL", &url);
    }
    cmd.envs(session.proxy_env());
    let mut child = cmd
        .args(args)
        .stdout(stdout)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| CliError::Run(format!("cannot start {program:?}: {e}")))?;
    let drove = !plan.phases.is_empty();
    let live = common.dashboard.start(&plan.name).await?;
    session.watch(live.clone(), &plan);
    let driven = session
        .drive(&plan, stop.clone(), crate::progress::wanted(), wait)
        .await;
    let exit_code = if drove {
        // The command is a service under test, still serving: it is stopped once the checks
        // have asked its system of record (the verify step), and its stop is no failure.
        match child.try_wait() {
            Ok(Some(status)) => status.code(),
            _ => Some(0),
        }
    } else {
        tokio::select! {
            status = child.wait() => status.ok().and_then(|s| s.code()),
            () = stop.cancelled() => {
                session.interrupt();
                let _ = child.start_kill();
                child.wait().await.ok().and_then(|s| s.code())
            }
        }
    };
    if let Err(e) = driven {
        return Err(CliError::Run(e.to_string()));
    }
    let exec = reports::model::Exec {
        command: command.to_vec(),
        exit_code,
    };
    let outcome = session.finish(&plan, Some(exec)).await;
    if drove {
        let _ = child.start_kill();
        let _ = child.wait().await;
    }
    if let Some(board) = live {
        board.finish(&outcome.report).await;
    }
    emit(&outcome.report, &common.output)
}
