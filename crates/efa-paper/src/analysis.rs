//! What an experiment reports beyond its results table: extra JSON, printed lines and
//! figures described as data (the command-line tool renders them as SVG).

use crate::{RunResult, RunSpec};
use efa_nn::params::Params;
use serde_json::{Map, Value};

/// A trained run, as an experiment's analysis sees it.
#[derive(Clone, Copy, Debug)]
pub struct TrainedRun<'a> {
    /// What ran.
    pub spec: &'a RunSpec,
    /// Its result row.
    pub result: &'a RunResult,
    /// The restored best-validation parameters.
    pub params: &'a Params<f32>,
}

/// An experiment's analyses.
#[derive(Clone, Debug, Default)]
pub struct Analysis {
    /// Added to `results.json` under `analysis`.
    pub json: Map<String, Value>,
    /// Printed after the results table.
    pub lines: Vec<String>,
    /// Written beside `results.json`.
    pub figures: Vec<Figure>,
}

/// A figure to draw.
#[derive(Clone, Debug, PartialEq)]
pub enum Figure {
    /// A square heat map with one label per row and column.
    HeatMap {
        /// File name (`…svg`).
        file: String,
        /// Title.
        title: String,
        /// Row and column labels.
        labels: Vec<String>,
        /// Values, one row per label.
        values: Vec<Vec<f64>>,
        /// Values at or above this are drawn at full colour.
        clip: f64,
    },
    /// Line series over a common x axis.
    Lines {
        /// File name (`…svg`).
        file: String,
        /// Title.
        title: String,
        /// x-axis label.
        x_label: String,
        /// y-axis label.
        y_label: String,
        /// `(label, points)` per series.
        series: Vec<(String, Vec<(f64, f64)>)>,
    },
}

impl Figure {
    /// The file name.
    pub fn file(&self) -> &str {
        match self {
            Figure::HeatMap { file, .. } | Figure::Lines { file, .. } => file,
        }
    }
}
