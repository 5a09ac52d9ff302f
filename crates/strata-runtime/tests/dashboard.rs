//! The Grafana dashboard under `deploy/grafana` against the metrics the services export: a
//! panel querying a metric that no longer exists, or a metric no panel shows, fails here.

use std::collections::BTreeSet;

use serde_json::Value;

fn exported() -> BTreeSet<String> {
    strata_runtime::metrics::render()
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

fn queried(dashboard: &Value) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut exprs = Vec::new();
    collect_exprs(dashboard, &mut exprs);
    assert!(!exprs.is_empty(), "the dashboard has no queries");
    for expr in exprs {
        for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if word.starts_with("strata_") {
                names.insert(word.to_owned());
            }
        }
    }
    names
}

fn collect_exprs<'v>(value: &'v Value, out: &mut Vec<&'v str>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                match (key.as_str(), v) {
                    ("expr" | "query" | "definition", Value::String(s)) => out.push(s),
                    _ => collect_exprs(v, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_exprs(v, out)),
        _ => {}
    }
}

#[test]
fn the_dashboard_shows_every_exported_metric_and_only_those() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/grafana/strata.json"
    );
    let text = std::fs::read_to_string(path).expect("deploy/grafana/strata.json");
    let dashboard: Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let exported = exported();
    assert!(
        exported.contains("strata_consumer_lag_records"),
        "{exported:?}"
    );
    let queried: BTreeSet<String> = queried(&dashboard)
        .into_iter()
        .map(|name| {
            // A histogram is queried by its series.
            ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s).filter(|base| exported.contains(*base)))
                .map_or(name.clone(), str::to_owned)
        })
        .collect();
    let unknown: Vec<_> = queried.difference(&exported).collect();
    assert!(
        unknown.is_empty(),
        "panels query metrics no service exports: {unknown:?}"
    );
    let unshown: Vec<_> = exported.difference(&queried).collect();
    assert!(
        unshown.is_empty(),
        "exported metrics no panel shows: {unshown:?}"
    );
}
