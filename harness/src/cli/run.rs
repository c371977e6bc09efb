//! `harness run SCENARIO`: a scenario file, run.

use std::path::Path;

use reports::Outcome;

use super::args::{overrides, shard_overrides, Common, ShardArgs};
use super::exit::CliError;
use super::output::emit;
use super::signals::stop_on_signals;
use crate::scenario;

pub(super) async fn run(
    path: &Path,
    common: &Common,
    shards: &ShardArgs,
) -> Result<Outcome, CliError> {
    let mut o = overrides(common);
    shard_overrides(shards, &mut o)?;
    let plan = scenario::load(path, &o).map_err(|e| CliError::Input(e.to_string()))?;
    if plan.phases.is_empty() {
        return Err(CliError::Input(format!(
            "{}: at `phases`: nothing to run; add a phase (or use `harness exec` to drive the load with a command)",
            path.display()
        )));
    }
    let stop = stop_on_signals();
    let live = common.dashboard.start(&plan.name).await?;
    let outcome = crate::run::run_plan(&plan, stop, crate::progress::wanted(), live)
        .await
        .map_err(|e| CliError::Run(e.to_string()))?;
    emit(&outcome.report, &common.output)
}
