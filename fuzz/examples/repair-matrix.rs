//! `make fuzz-repair`: the repair matrix of docs/TESTING.md. Mutates every
//! field of every metadata block of the seed images with snapshots (see
//! `tux3_fuzz::matrix`), runs fsck, fsck --repair, fsck and a mount on
//! each, and prints the matrix as Markdown; then kills a repair at each of
//! its writes for a sample of the repaired mutations (one of each
//! structure, then an even spread) and checks that the next repair
//! converges.
//!
//! Usage: repair-matrix [--stride N] [--cuts N] [--seed NAME]... [--only WHAT]...
//! (`--stride N` takes every N-th field, for a quick look; `--cuts N`
//! samples N repaired mutations for the cut test; seeds default to
//! "snapshots", "xattr-files", "preallocated" and "known-damage"; `--only WHAT` keeps the
//! fields whose description starts with WHAT, e.g. "superblock" or
//! "dead list: extent").

use std::collections::BTreeMap;
use std::fmt::Write;
use tux3_fuzz::matrix::{cut_repairs, mutate, run_all, tabulate, Base, Outcome, VERBS};
use tux3_fuzz::{seeds, BS};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut stride = 1;
    let mut cuts: usize = 40;
    let mut names: Vec<String> = Vec::new();
    let mut only: Vec<String> = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().cloned().unwrap_or_default();
        match a.as_str() {
            "--stride" => stride = value().parse().unwrap_or(1),
            "--cuts" => cuts = value().parse().unwrap_or(40),
            "--seed" => names.push(value()),
            "--only" => only.push(value()),
            other => {
                eprintln!("repair-matrix: unknown argument {other}");
                std::process::exit(16);
            }
        }
    }
    if names.is_empty() {
        names = ["snapshots", "xattr-files", "preallocated", "known-damage"]
            .map(String::from)
            .to_vec();
    }
    let started = std::time::Instant::now();
    let mut outcomes: Vec<Outcome> = Vec::new();
    let mut bases = Vec::new();
    for (name, image) in seeds() {
        if !names.iter().any(|n| n == name) {
            continue;
        }
        let base = Base::new(image, BS);
        eprintln!(
            "seed {name}: {} metadata blocks, {} fields, {} files",
            base.meta.len(),
            base.fields().len(),
            base.files.len()
        );
        let from = outcomes.len();
        outcomes.extend(run_all(&base, stride, &only, |k, n| {
            if k % 100 == 0 {
                eprintln!("  field {k} of {n}");
            }
        }));
        bases.push((base, from..outcomes.len()));
    }
    if std::env::var_os("TUX3_MATRIX_LEFT").is_some() {
        for o in outcomes
            .iter()
            .filter(|o| o.detected() && !o.repaired() && !o.free_field())
        {
            eprintln!(
                "left: {} {} | {} | {} => {} {} {}",
                o.what,
                o.verb.name(),
                o.first_problem,
                o.left,
                o.repair,
                o.recheck,
                o.usable
            );
        }
    }
    if std::env::var_os("TUX3_MATRIX_MISSES").is_some() {
        for o in outcomes.iter().filter(|o| o.visible && !o.free_field()) {
            eprintln!("miss: {} {} block {} at {}", o.what, o.verb.name(), o.block, o.at);
            let base = &bases[0].0;
            let f = base
                .fields()
                .into_iter()
                .find(|(b, f)| *b == o.block && f.at == o.at)
                .map(|x| x.1);
            if let Some(img) = f.and_then(|f| mutate(base, o.block, f, o.verb)) {
                let st = tux3_fuzz::matrix::state_of(tux3_fuzz::device(&img));
                match (&st, &base.state) {
                    (Some((a, sa)), Some((b, sb))) => {
                        for (k, v) in a.iter() {
                            if b.get(k) != Some(v) {
                                eprintln!("   {} now {v} was {:?}", String::from_utf8_lossy(k), b.get(k));
                            }
                        }
                        for k in b.keys().filter(|k| !a.contains_key(*k)) {
                            eprintln!("   {} gone", String::from_utf8_lossy(k));
                        }
                        if sa != sb {
                            eprintln!("   snapshots differ");
                        }
                    }
                    (None, _) => eprintln!("   does not mount"),
                    _ => {}
                }
            }
        }
    }
    let mut out = String::new();
    report(&mut out, &names, stride, &outcomes);
    let per_seed = cuts.div_ceil(bases.len().max(1));
    let mut totals = (0, 0, Vec::new());
    for (base, range) in &bases {
        cut_test(base, &outcomes[range.clone()], per_seed, &mut totals);
    }
    let (tried, cuts, failed) = totals;
    let _ = writeln!(
        out,
        "\nRepair killed at each of its writes, then run again: {tried} repaired mutations, {cuts} cuts, {} that did not converge.",
        failed.len()
    );
    for f in failed.iter().take(20) {
        let _ = writeln!(out, "- {f}");
    }
    let _ = writeln!(out, "\n(run took {:.0} s)", started.elapsed().as_secs_f64());
    print!("{out}");
}

fn pct(a: u64, b: u64) -> String {
    if b == 0 {
        "-".into()
    } else {
        format!("{:.1}%", 100.0 * a as f64 / b as f64)
    }
}

fn report(out: &mut String, names: &[String], stride: usize, outcomes: &[Outcome]) {
    let matrix = tabulate(outcomes);
    let _ = writeln!(
        out,
        "Seeds: {} (fuzz/src/lib.rs `seeds`), {} field, {} verbs.\n",
        names.join(", "),
        if stride == 1 {
            "every".to_string()
        } else {
            format!("every {stride}th")
        },
        VERBS.len()
    );
    let _ = write!(out, "| structure |");
    for v in VERBS {
        let _ = write!(out, " {} |", v.name());
    }
    let _ = writeln!(out, " all: detected | repaired in one pass |");
    let _ = writeln!(out, "|---|{}---|---|", "---|".repeat(VERBS.len()));
    let (mut n, mut d, mut r) = (0, 0, 0);
    for (row, cells) in &matrix {
        let _ = write!(out, "| {row} |");
        let (mut rn, mut rd, mut rr) = (0, 0, 0);
        for v in VERBS {
            let c = cells.get(&v).copied().unwrap_or_default();
            let _ = write!(out, " {}/{}/{} |", c.detected, c.repaired, c.mutations);
            (rn, rd, rr) = (rn + c.mutations, rd + c.detected, rr + c.repaired);
        }
        let _ = writeln!(out, " {} | {} |", pct(rd, rn), pct(rr, rd));
        (n, d, r) = (n + rn, d + rd, r + rr);
    }
    let _ = writeln!(
        out,
        "| **all** |{} **{}** of {n} | **{}** of {d} |",
        " |".repeat(VERBS.len()),
        pct(d, n),
        pct(r, d)
    );
    // Data checksums in a record: the data cannot be mended, the
    // mismatch is recorded as known damage (reads still fail).
    let sums = |o: &&Outcome| o.what.starts_with("data checksum");
    let counted = || {
        outcomes
            .iter()
            .filter(|o| !o.free_field() && o.matters() && o.detected())
    };
    let (sd, sr) = (
        counted().filter(|o| sums(o)).count() as u64,
        counted().filter(|o| sums(o) && o.repaired()).count() as u64,
    );
    let _ = writeln!(
        out,
        "\nData checksums in records: the data cannot be mended (no second copy says whether the data or the checksum is wrong); the repair records the block as known damage, reads of it keep failing with EIO, and the next check names it in a note. Recorded in one pass: **{}** of {sd}.",
        pct(sr, sd)
    );
    let _ = writeln!(
        out,
        "\nEach cell: detected / repaired in one pass / mutations that matter: fsck flags them, or a reader sees them (every path's type, mode, links, size, data, link target and xattrs, and the snapshots' names). Not counted: a change that is no change, and one fsck passes that no reader sees (a block the log has replaced since, a field nothing reads)."
    );
    let harmless = outcomes
        .iter()
        .filter(|o| !o.free_field() && !o.matters())
        .count();
    let _ = writeln!(out, "Mutations fsck passed that no reader sees: {harmless}.");
    let torn = outcomes.iter().filter(|o| o.torn).count();
    let _ = writeln!(
        out,
        "Mutations that read as a crash before the last commit (damage to a block that commit wrote, which replay takes for a torn write and drops with the commit; fsck notes it): {torn}."
    );
    let crashes = outcomes
        .iter()
        .filter(|o| o.check == 101 || o.repair == 101 || o.recheck == 101)
        .count();
    let free = outcomes.iter().filter(|o| o.free_field()).count();
    let _ = writeln!(
        out,
        "fsck panics: {crashes}. Mutations of fields any value of which is valid (times, owners, volume id; not in the table): {free}, of which fsck flagged {}.",
        outcomes.iter().filter(|o| o.free_field() && o.detected()).count()
    );
    // Files lost by the repaired mutations.
    let mut lost: BTreeMap<&str, u64> = BTreeMap::new();
    for o in outcomes.iter().filter(|o| o.detected() && o.repaired()) {
        let bucket = match o.lost {
            0 => "0",
            1 => "1",
            2..=5 => "2-5",
            6..=20 => "6-20",
            _ => "more than 20",
        };
        *lost.entry(bucket).or_default() += 1;
    }
    let _ = writeln!(out, "\nFiles lost per repaired mutation (of the seed's files):\n");
    let _ = writeln!(out, "| files lost | mutations |\n|---|---|");
    for (k, v) in &lost {
        let _ = writeln!(out, "| {k} | {v} |");
    }
    // Where the misses are.
    let mut missed: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    let mut unrepaired: BTreeMap<&str, u64> = BTreeMap::new();
    for o in outcomes.iter().filter(|o| !o.free_field() && o.matters()) {
        if !o.detected() {
            *missed.entry((o.what, o.verb.name())).or_default() += 1;
        } else if !o.repaired() {
            *unrepaired.entry(o.what).or_default() += 1;
        }
    }
    let _ = writeln!(out, "\nUndetected but seen by a reader, by field and verb:\n");
    for ((what, verb), k) in &missed {
        let _ = writeln!(out, "- {what}, {verb}: {k}");
    }
    let _ = writeln!(out, "\nDetected but not repaired in one pass, by field:\n");
    for (what, k) in &unrepaired {
        let _ = writeln!(out, "- {what}: {k}");
    }
}

/// The cut test on up to `max` repaired mutations of `base`, spread over
/// its list; adds (mutations tried, cuts, cuts that did not converge).
fn cut_test(base: &Base, outcomes: &[Outcome], max: usize, totals: &mut (u64, u64, Vec<String>)) {
    let repaired: Vec<&Outcome> = outcomes
        .iter()
        .filter(|o| o.detected() && o.repaired() && o.repair == 1)
        .collect();
    let step = (repaired.len() / max.max(1)).max(1);
    // One of each structure first (so every kind of repair is cut at
    // least once), then every `step`-th.
    let mut picked: Vec<&Outcome> = Vec::new();
    for o in &repaired {
        let kind = |x: &Outcome| x.what.split(':').next().unwrap_or_default().to_string();
        if !picked.iter().any(|p| kind(p) == kind(o)) {
            picked.push(o);
        }
    }
    for o in repaired.iter().step_by(step).take(max) {
        if !picked.iter().any(|p| std::ptr::eq(*p, *o)) {
            picked.push(o);
        }
    }
    let fields = base.fields();
    for o in picked {
        let field = fields
            .iter()
            .find(|(b, f)| *b == o.block && f.at == o.at)
            .map(|(_, f)| *f);
        let Some(img) = field.and_then(|f| mutate(base, o.block, f, o.verb)) else {
            continue;
        };
        let (writes, bad) = cut_repairs(&img);
        totals.0 += 1;
        totals.1 += writes;
        totals.2.extend(
            bad.into_iter()
                .map(|w| format!("{} {} cut at write {w}", o.what, o.verb.name())),
        );
    }
}
