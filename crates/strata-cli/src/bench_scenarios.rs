//! `strata bench scenarios`: the scenario suite (`tests/scenarios`), each run end to
//! end on a scratch embedded data directory; prints per scenario the tokens of transcript replay
//! against the assembled context and whether every must-keep fact held.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

pub(crate) async fn run(
    dir: Option<&Path>,
    json: bool,
    policy: Option<&str>,
) -> anyhow::Result<()> {
    let dir: PathBuf = dir
        .map(Path::to_path_buf)
        .unwrap_or_else(strata_scenarios::default_dir);
    let mut scenarios = strata_scenarios::load(&dir)
        .with_context(|| format!("cannot load the scenarios of {}", dir.display()))?;
    anyhow::ensure!(
        !scenarios.is_empty(),
        "no scenarios in {} (expected <name>.jsonl with <name>.expect.json)",
        dir.display()
    );
    for s in scenarios
        .iter_mut()
        .filter(|s| s.expect.request.policy.is_none())
    {
        s.expect.request.policy = policy.map(str::to_owned);
    }
    let results = strata_scenarios::run_all(&scenarios).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&results)?);
    } else {
        println!(
            "strata bench scenarios: {} scenarios from {} (tokens: o200k; * = measured by the seeds)",
            results.len(),
            dir.display()
        );
        println!();
        print!("{}", strata_scenarios::table(&results));
    }
    let failed = results.iter().filter(|r| !r.facts_ok).count();
    anyhow::ensure!(
        failed == 0,
        "{failed} of {} scenarios miss expected facts",
        results.len()
    );
    Ok(())
}
