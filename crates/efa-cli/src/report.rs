//! Shared output of the `reproduce` commands: progress bars, the results table, `results.json`
//! and the loss-curve SVG.

use crate::plot::{heat_map, line_chart, line_chart_with, ChartOptions, Series};
use crate::CliError;
use efa_paper::paper_data::Mismatch;
use efa_paper::runner::RunObserver;
use efa_paper::{Analysis, Figure, PaperError, RunResult, RunSpec};
use efa_train::run::Losses;
use efa_train::EpochLog;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;

/// A progress bar over the epochs of one run (hidden when stderr is not a terminal).
pub fn epoch_bar(label: &str, max_epochs: usize, quiet: bool) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(max_epochs as u64);
    let style = ProgressStyle::with_template(
        "{prefix:>28} [{elapsed_precise}] {bar:30} epoch {pos}/{len} {msg}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar())
    .progress_chars("=> ");
    bar.set_style(style);
    bar.set_prefix(label.to_string());
    bar
}

/// Updates `bar` after an epoch.
pub fn on_epoch(bar: &ProgressBar, log: &EpochLog) {
    bar.set_position(log.epoch as u64);
    bar.set_message(format!(
        "train {:.4}  val {:.4}  {:.0} samples/s",
        log.train_loss, log.val_loss, log.samples_per_s
    ));
}

/// A progress bar per running run of a queue, and a summary line per finished run.
pub struct Bars {
    multi: MultiProgress,
    bars: Mutex<BTreeMap<usize, ProgressBar>>,
    quiet: bool,
}

impl Bars {
    /// Bars on stderr (none with `quiet`).
    pub fn new(quiet: bool) -> Self {
        Self {
            multi: MultiProgress::new(),
            bars: Mutex::new(BTreeMap::new()),
            quiet,
        }
    }

    fn bar(&self, index: usize) -> Option<ProgressBar> {
        let bars = self.bars.lock().unwrap_or_else(|p| p.into_inner());
        bars.get(&index).cloned()
    }
}

impl RunObserver for Bars {
    fn started(&self, index: usize, spec: &RunSpec) {
        let label = format!("{} {}", spec.model.kind(), spec.setting());
        let bar = self
            .multi
            .add(epoch_bar(&label, spec.train_config.max_epochs, self.quiet));
        let mut bars = self.bars.lock().unwrap_or_else(|p| p.into_inner());
        bars.insert(index, bar);
    }

    fn epoch(&self, index: usize, log: &EpochLog) {
        if let Some(bar) = self.bar(index) {
            on_epoch(&bar, log);
        }
    }

    fn finished(&self, index: usize, spec: &RunSpec, outcome: Result<&RunResult, &PaperError>) {
        if let Some(bar) = self.bar(index) {
            bar.finish_and_clear();
        }
        if let Ok(r) = outcome {
            let per_epoch =
                r.history.iter().map(|h| h.seconds).sum::<f64>() / r.history.len().max(1) as f64;
            errln!(
                "{} {}: test {} {:.6} (paper {:.3}), {} epochs, best {}, {:.1}s ({:.2} s/epoch, {} \
                 train samples)",
                r.model,
                r.setting,
                r.metric,
                r.value,
                r.paper,
                r.epochs,
                r.best_epoch,
                r.seconds,
                per_epoch,
                spec.train.len()
            );
        }
    }
}

/// The header line that marks results on data other than the paper's
/// (`--allow-other-data`): each file and how it differs.
pub fn not_the_papers(other: &[Mismatch]) -> String {
    let files: Vec<String> = other.iter().map(Mismatch::to_string).collect();
    format!(
        "NOT THE PAPER'S DATA (--allow-other-data): these results are not the paper's; {}",
        files.join("; ")
    )
}

/// Prints `setting | model | metric | ours | paper` with the epochs and time of each run,
/// under a line marking results on data other than the paper's (`other`).
pub fn print_table(rows: &[RunResult], other: &[Mismatch]) -> Result<(), CliError> {
    if !other.is_empty() {
        outln!("{}", not_the_papers(other))?;
    }
    outln!(
        "{:<24} | {:<5} | {:<10} | {:>10} | {:>8} | {:>6} | {:>5} | {:>8}",
        "setting",
        "model",
        "metric",
        "ours",
        "paper",
        "epochs",
        "best",
        "seconds"
    )?;
    outln!("{}", "-".repeat(24 + 5 + 10 + 10 + 8 + 6 + 5 + 8 + 21))?;
    for r in rows {
        outln!(
            "{:<24} | {:<5} | {:<10} | {:>10.6} | {:>8.3} | {:>6} | {:>5} | {:>8.1}",
            r.setting,
            r.model,
            r.metric,
            r.value,
            r.paper,
            r.epochs,
            r.best_epoch,
            r.seconds
        )?;
    }
    Ok(())
}

#[derive(Serialize)]
struct Results<'a, C: Serialize> {
    experiment: &'a str,
    /// `false` when a data file is not the paper's (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    paper_data: Option<bool>,
    /// The data files that are not the paper's, and how they differ.
    #[serde(skip_serializing_if = "<[Mismatch]>::is_empty")]
    other_data: &'a [Mismatch],
    rows: &'a [RunResult],
    config: &'a C,
    history: Vec<History<'a>>,
    #[serde(skip_serializing_if = "serde_json::Map::is_empty")]
    analysis: &'a serde_json::Map<String, serde_json::Value>,
}

#[derive(Serialize)]
struct History<'a> {
    setting: &'a str,
    model: &'a str,
    epochs: Vec<Losses>,
}

/// Creates the output directory `out` (and its parents) if needed; the error names it.
pub fn create_out_dir(out: &Path) -> Result<(), CliError> {
    std::fs::create_dir_all(out).map_err(|e| {
        CliError::new(format!(
            "cannot create output directory {}: {e}",
            out.display()
        ))
    })
}

/// Writes `results.json` (with the analysis, and marked `"paper_data": false` with the files
/// in `other` when they are not the paper's; no wall-clock times: those are in
/// `timings.json`, see [`efa_train::run::write_timings`]), `loss_curves.svg` and the analysis
/// figures into `out` (created if needed).
pub fn write_outputs<C: Serialize>(
    out: &Path,
    experiment: &str,
    rows: &[RunResult],
    config: &C,
    analysis: &Analysis,
    log_y: bool,
    other: &[Mismatch],
) -> Result<(), CliError> {
    create_out_dir(out)?;
    let results = Results {
        experiment,
        paper_data: (!other.is_empty()).then_some(false),
        other_data: other,
        rows,
        config,
        history: rows
            .iter()
            .map(|r| History {
                setting: &r.setting,
                model: &r.model,
                epochs: Losses::of(&r.history),
            })
            .collect(),
        analysis: &analysis.json,
    };
    let json = serde_json::to_string_pretty(&results).map_err(|e| CliError::new(e.to_string()))?;
    write_file(&out.join("results.json"), &json)?;
    let mut series = Vec::new();
    for r in rows {
        let tag = format!("{} {}", r.model, r.setting);
        series.push(Series {
            label: format!("{tag} train"),
            points: r
                .history
                .iter()
                .map(|h| (h.epoch as f64, h.train_loss))
                .collect(),
        });
        series.push(Series {
            label: format!("{tag} val"),
            points: r
                .history
                .iter()
                .map(|h| (h.epoch as f64, h.val_loss))
                .collect(),
        });
    }
    let metric = rows.first().map_or("loss", |r| r.metric.as_str());
    let (title, y) = (
        format!("{experiment}: loss per epoch"),
        metric.trim_start_matches("test_"),
    );
    let svg = match line_chart_with(&title, "epoch", y, &series, &ChartOptions { log_y }) {
        Ok(svg) => svg,
        Err(e) => {
            // The runs are done: draw the curves on a linear axis rather than lose them.
            errln!("warning: {e}; loss_curves.svg drawn with a linear y axis");
            line_chart(&title, "epoch", y, &series)
        }
    };
    write_file(&out.join("loss_curves.svg"), &svg)?;
    for f in &analysis.figures {
        write_file(&out.join(f.file()), &render(f))?;
    }
    if !analysis.figures.is_empty() {
        errln!("wrote {} figure(s)", analysis.figures.len());
    }
    Ok(())
}

/// The SVG of an experiment's figure.
fn render(f: &Figure) -> String {
    match f {
        Figure::HeatMap {
            title,
            labels,
            values,
            clip,
            ..
        } => heat_map(title, labels, labels, values, *clip),
        Figure::Lines {
            title,
            x_label,
            y_label,
            series,
            ..
        } => {
            let series: Vec<Series> = series
                .iter()
                .map(|(label, points)| Series {
                    label: label.clone(),
                    points: points.clone(),
                })
                .collect();
            line_chart(title, x_label, y_label, &series)
        }
    }
}

/// Writes a file atomically ([`efa_train::fsio::write_atomic`]: `<file>.tmp`, fsync,
/// rename; a failed write removes `<file>.tmp`), naming it in errors.
pub fn write_file(path: &Path, contents: &str) -> Result<(), CliError> {
    efa_train::fsio::write_atomic(path, contents.as_bytes())
        .map_err(|e| CliError::new(e.to_string()))
}

#[cfg(test)]
mod write_tests {
    use super::write_file;

    #[test]
    fn a_failed_write_leaves_no_temporary_file() {
        let dir = std::env::temp_dir().join(format!("efa-report-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        // The target is a non-empty directory: the temporary file is written, the rename
        // over the directory fails.
        let target = dir.join("results.json");
        std::fs::create_dir_all(target.join("x")).unwrap();
        let e = write_file(&target, "{}").unwrap_err().to_string();
        assert!(
            e.starts_with(&format!(
                "{}: cannot rename the temporary file over it: ",
                target.display()
            )),
            "{e}"
        );
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(left, ["results.json"], "only the directory remains");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
