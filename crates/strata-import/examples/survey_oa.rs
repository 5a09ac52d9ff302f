//! Converts every file under the given paths and prints what each gave, then totals: a survey of
//! the importers over a corpus of real trajectories.
//!
//! ```text
//! cargo run -p strata-import --example survey_oa -- [--expect FORMAT] [--format FORMAT] [-q] PATH...
//! ```
//!
//! `--expect` names the format the files are in: detection is checked against it, and files
//! are converted as that format. `--format` converts as a format without checking detection.
//! Without either, each file is converted as detected. Every event is checked to survive its
//! JSON form unchanged, and event ids to be unique. `--dump` prints every event (canonical
//! JSONL) instead of the per-file lines.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use strata_core::Event;
use strata_import::{convert, detect, Format, ImportOptions, Source};

#[derive(Default)]
struct Totals {
    files: u64,
    converted: u64,
    sessions: u64,
    records: u64,
    events: BTreeMap<String, u64>,
    unmapped: BTreeMap<String, u64>,
    orphans: u64,
    calls_without_result: u64,
    errors: Vec<String>,
    detection: BTreeMap<String, u64>,
    misdetected: Vec<String>,
    roundtrip_failures: u64,
    duplicate_ids: u64,
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut expect: Option<Format> = None;
    let mut forced: Option<Format> = None;
    let mut quiet = false;
    let mut dump = false;
    let mut paths = Vec::new();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--expect" | "--format" => {
                let f: Format = match args.next().map(|s| s.parse()) {
                    Some(Ok(f)) => f,
                    Some(Err(e)) => fail(&e),
                    None => fail(&format!("{a} needs a format")),
                };
                if a == "--expect" {
                    expect = Some(f);
                } else {
                    forced = Some(f);
                }
            }
            "-q" => quiet = true,
            "--dump" => {
                dump = true;
                quiet = true;
            }
            _ => paths.push(PathBuf::from(a)),
        }
    }
    let mut files = Vec::new();
    for p in &paths {
        walk(p, &mut files);
    }
    files.sort();
    let mut options = ImportOptions::new("survey");
    options.base_time = chrono::DateTime::from_timestamp(1_700_000_000, 0);
    let mut t = Totals::default();
    for file in &files {
        survey(file, expect, forced, &options, quiet, dump, &mut t);
    }
    if !dump {
        print_totals(&t);
    }
}

fn survey(
    file: &Path,
    expect: Option<Format>,
    forced: Option<Format>,
    options: &ImportOptions,
    quiet: bool,
    dump: bool,
    t: &mut Totals,
) {
    t.files += 1;
    let source = Source::new(file);
    let detected = detect(&source);
    let label = match &detected {
        Ok(f) => f.as_str().to_owned(),
        Err(_) => "undetected".to_owned(),
    };
    *t.detection.entry(label.clone()).or_default() += 1;
    if let Some(e) = expect {
        if detected.as_ref().ok() != Some(&e) {
            let why = match &detected {
                Ok(f) => f.to_string(),
                Err(err) => err.to_string(),
            };
            t.misdetected.push(format!("{}: {why}", file.display()));
        }
    }
    let Some(format) = forced.or(expect).or(detected.ok()) else {
        t.errors
            .push(format!("{}: format not detected", file.display()));
        return;
    };
    let mut ids = HashSet::new();
    let mut roundtrip = 0u64;
    let mut duplicates = 0u64;
    let mut sink = |e: Event| {
        if dump {
            println!("{}", e.to_json_string());
        }
        if !ids.insert(e.event_id.clone()) {
            duplicates += 1;
        }
        match Event::from_json(e.to_json(), None) {
            Ok(back) if back == e => {}
            _ => roundtrip += 1,
        }
        Ok(())
    };
    match convert(&source, format, options, &mut sink) {
        Ok(report) => {
            t.converted += 1;
            t.sessions += report.sessions.len() as u64;
            t.records += report.records;
            for (k, v) in &report.events {
                *t.events.entry(k.clone()).or_default() += v;
            }
            for (k, v) in &report.unmapped {
                *t.unmapped.entry(k.clone()).or_default() += v;
            }
            t.orphans += report.orphan_results;
            t.calls_without_result += report.calls_without_result;
            if !quiet {
                println!(
                    "{}\t{format}\tsessions {}\tevents {}\tunmapped {}\torphans {}\tno-result {}",
                    file.display(),
                    report.sessions.len(),
                    report.event_count(),
                    report.unmapped.values().sum::<u64>(),
                    report.orphan_results,
                    report.calls_without_result,
                );
            }
        }
        Err(e) => {
            if !quiet {
                println!("{}\t{format}\tERROR {e}", file.display());
            }
            t.errors.push(e.to_string());
        }
    }
    t.roundtrip_failures += roundtrip;
    t.duplicate_ids += duplicates;
}

fn print_totals(t: &Totals) {
    println!("\n== totals");
    println!(
        "files {}  converted {}  errors {}  sessions {}  records {}",
        t.files,
        t.converted,
        t.errors.len(),
        t.sessions,
        t.records
    );
    println!("events {}", t.events.values().sum::<u64>());
    for (k, v) in &t.events {
        println!("  {v:>8}  {k}");
    }
    println!("unmapped {}", t.unmapped.values().sum::<u64>());
    for (k, v) in &t.unmapped {
        println!("  {v:>8}  {k}");
    }
    println!("orphan results {}", t.orphans);
    println!("calls without result {}", t.calls_without_result);
    println!(
        "round-trip failures {}  duplicate event ids {}",
        t.roundtrip_failures, t.duplicate_ids
    );
    println!("detected as:");
    for (k, v) in &t.detection {
        println!("  {v:>8}  {k}");
    }
    if !t.misdetected.is_empty() {
        println!("not detected as expected ({}):", t.misdetected.len());
        for m in &t.misdetected {
            println!("  {m}");
        }
    }
    if !t.errors.is_empty() {
        println!("errors:");
        for e in &t.errors {
            println!("  {}", truncate(e, 300));
        }
    }
}

fn truncate(s: &str, n: usize) -> &str {
    let mut end = s.len().min(n);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn walk(path: &Path, files: &mut Vec<PathBuf>) {
    if path.is_dir() {
        let Ok(entries) = std::fs::read_dir(path) else {
            return;
        };
        for e in entries.flatten() {
            walk(&e.path(), files);
        }
    } else if path.is_file() {
        files.push(path.to_path_buf());
    }
}

fn fail(message: &str) -> ! {
    eprintln!("survey_oa: {message}");
    std::process::exit(2)
}
