//! SVG line charts (loss curves) and heat maps (attention maps), drawn by plotters' SVG
//! backend; they open in any browser.
//!
//! plotters lays out the chart and writes the SVG. This module decides what plotters does not
//! do the way a reader needs: the axis ticks and their labels ([`ticks`]: round values, and on
//! a logarithmic y axis ([`ChartOptions::log_y`]) ticks even when the data span less than a
//! decade, where plotters' own log axis has none); the refusal of a y ≤ 0 on that axis; the
//! breaks in a line at non-finite points; the legend text; the colours of the heat map.
//!
//! Text is written as SVG `<text>` for the viewer to set: no font file is read. plotters
//! sizes a label it places (a legend box, a caption) from a character-count estimate.

pub mod ticks;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::ops::Range;
use ticks::Ticks;

/// One named polyline.
pub struct Series {
    /// Legend label.
    pub label: String,
    /// (x, y) points.
    pub points: Vec<(f64, f64)>,
}

const COLORS: [RGBColor; 8] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x17, 0xbe, 0xcf),
];

/// The darkest heat-map colour (a value at the clip value or above).
const HEAT_DARK: (f64, f64, f64) = (8.0, 48.0, 107.0);

/// The colour of a value printed on a light heat-map cell.
const CELL_INK: RGBColor = RGBColor(0x33, 0x33, 0x33);

/// Options of [`line_chart_with`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ChartOptions {
    /// Logarithmic y axis: a point at `y` is drawn at height ∝ log10(y), with ticks at powers
    /// of ten (and at 2 and 5 times them over less than two decades; see [`ticks`]). Every
    /// finite y must then be > 0, else [`line_chart_with`] fails.
    pub log_y: bool,
}

/// Why a chart cannot be drawn: a point the requested axis cannot place.
#[derive(Clone, Debug, PartialEq)]
pub struct PlotError {
    /// Label of the series.
    pub series: String,
    /// Index of the point within the series.
    pub index: usize,
    /// The point.
    pub point: (f64, f64),
}

impl std::fmt::Display for PlotError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "log-scale y axis: series `{}` point {} (x = {}) has y = {}, which has no \
             logarithm (plot it on a linear axis)",
            self.series, self.index, self.point.0, self.point.1
        )
    }
}

impl std::error::Error for PlotError {}

/// A plotters font of `px` pixels: the SVG backend writes `font-size` = size / 1.24.
fn font(px: f64) -> TextStyle<'static> {
    ("sans-serif", px * 1.24).into_font().into()
}

/// An axis as plotters sees it: a span (`lo` may exceed `hi`, for an axis that runs down), a
/// linear or log10 mapping, and the ticks this module chose (plotters draws a tick mark, a
/// label and a grid line at each value).
#[derive(Clone)]
struct TickAxis {
    lo: f64,
    hi: f64,
    log: bool,
    ticks: Ticks,
}

impl TickAxis {
    /// The label of tick value `v` (a key point handed to plotters, so one of the values).
    fn label(&self, v: f64) -> String {
        match self.ticks.values.iter().position(|&u| u == v) {
            Some(i) => self.ticks.labels[i].clone(),
            None => format!("{v}"),
        }
    }
}

impl Ranged for TickAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let f = |x: f64| if self.log { x.log10() } else { x };
        // x/2 − lo/2 forms avoid overflow when the span is near ±f64::MAX.
        let t = (f(*v) / 2.0 - f(self.lo) / 2.0) / (f(self.hi) / 2.0 - f(self.lo) / 2.0);
        // (`as` saturates; a NaN lands on the axis' start.)
        limit.0 + (t * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.values.clone()
        }
    }

    fn range(&self) -> Range<f64> {
        self.lo..self.hi
    }
}

/// Renders into an SVG string. plotters' SVG backend writes to memory and lays text out
/// without a font file, so it has no failure to report: an error here is a broken invariant.
fn render(
    size: (u32, u32),
    draw: impl FnOnce(&DrawingArea<SVGBackend, Shift>) -> Result<(), Box<dyn std::error::Error>>,
) -> String {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        let done = draw(&root).and_then(|()| Ok(root.present()?));
        if let Err(e) = done {
            unreachable!("plotters' in-memory SVG backend failed: {e}");
        }
    }
    svg
}

/// A line chart with axes, round ticks ([`ticks`]), labels and a legend, on linear axes:
/// [`line_chart_with`] and the default [`ChartOptions`].
pub fn line_chart(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> String {
    match line_chart_with(title, x_label, y_label, series, &ChartOptions::default()) {
        Ok(svg) => svg,
        // Only a log axis rejects points.
        Err(e) => unreachable!("linear axes place every finite point: {e}"),
    }
}

fn finite(p: &(f64, f64)) -> bool {
    p.0.is_finite() && p.1.is_finite()
}

/// The x and y axes of a chart of these series: the ticks of the data's range
/// ([`ticks::linear`], or [`ticks::log`] for a log y axis: round values that cover it) over a
/// span that holds the ticks and the data (ticks cover the data except at f64's own limits).
fn axes(series: &[Series], log_y: bool) -> (TickAxis, TickAxis) {
    let pts = || {
        series
            .iter()
            .flat_map(|s| s.points.iter())
            .filter(|p| finite(p))
    };
    let axis = |of: fn(&(f64, f64)) -> f64, log: bool| {
        let (lo, hi) = range(pts().map(of));
        let ticks = if log {
            ticks::log(lo, hi)
        } else {
            ticks::linear(lo, hi, all_integers(pts().map(of)))
        };
        let (lo, hi) = (ticks.lo.min(lo), ticks.hi.max(hi));
        let hi = if hi > lo { hi } else { lo + 1.0 };
        TickAxis { lo, hi, log, ticks }
    };
    (axis(|p| p.0, false), axis(|p| p.1, log_y))
}

/// A line chart with axes, round ticks, labels and a legend right of the frame.
///
/// Axes: the x axis, and the y axis unless `opts.log_y`, are linear with the ticks of
/// [`ticks::linear`] (integer steps when every value on that axis is an integer, e.g. epochs);
/// with `opts.log_y` the y axis uses [`ticks::log`], and a finite y ≤ 0 is a [`PlotError`]
/// naming the series, the point index and the point. Points with a non-finite coordinate are
/// not drawn: the line breaks there, and the legend says how many points were left out. A run
/// of one finite point between gaps is drawn as a dot.
pub fn line_chart_with(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    opts: &ChartOptions,
) -> Result<String, PlotError> {
    if opts.log_y {
        for s in series {
            if let Some((index, &point)) = s
                .points
                .iter()
                .enumerate()
                .find(|(_, p)| finite(p) && p.1 <= 0.0)
            {
                return Err(PlotError {
                    series: s.label.clone(),
                    index,
                    point,
                });
            }
        }
    }
    let texts = ChartTexts {
        title,
        x_label,
        y_label: &if opts.log_y {
            format!("{y_label} (log scale)")
        } else {
            y_label.to_string()
        },
        legend: legend_labels(series),
    };
    let (x, y) = axes(series, opts.log_y);
    Ok(draw_lines(&texts, series, x, y))
}

/// The legend text of each series: its label, and how many points it leaves out.
fn legend_labels(series: &[Series]) -> Vec<String> {
    series
        .iter()
        .map(|s| match s.points.iter().filter(|p| !finite(p)).count() {
            0 => s.label.clone(),
            n => format!("{} ({n} non-finite not drawn)", s.label),
        })
        .collect()
}

/// The words of a line chart.
struct ChartTexts<'a> {
    title: &'a str,
    x_label: &'a str,
    y_label: &'a str,
    legend: Vec<String>,
}

/// The runs of finite points of a series, split where a point is not finite.
fn runs(points: &[(f64, f64)]) -> Vec<Vec<(f64, f64)>> {
    let mut runs: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
    for p in points {
        if finite(p) {
            runs.last_mut().expect("one run at least").push(*p);
        } else if !runs.last().is_some_and(Vec::is_empty) {
            runs.push(Vec::new());
        }
    }
    runs.retain(|r| !r.is_empty());
    runs
}

/// Frame 490 × 370 px; the canvas adds the axis areas, the title and the legend's width.
fn draw_lines(texts: &ChartTexts, series: &[Series], x: TickAxis, y: TickAxis) -> String {
    let (frame_w, frame_h, left, bottom, top) = (490u32, 370u32, 70u32, 50u32, 40u32);
    // Legend: 12 px text at ~7 px a character after a 28 px sample line.
    let longest = texts.legend.iter().map(|l| l.chars().count()).max();
    let legend_w = longest.map_or(10, |n| (7 * n as u32 + 40).clamp(150, 600));
    let size = (left + frame_w + 10 + legend_w, top + frame_h + bottom);
    let x_label = |v: &f64| x.label(*v);
    let y_label = |v: &f64| y.label(*v);
    render(size, |root| {
        root.fill(&WHITE)?;
        // The chart, and right of it the legend (plotters' own legend box stays inside the
        // frame, over the lines).
        let (plot, legend) = root.split_horizontally(left + frame_w + 10);
        let mut chart = ChartBuilder::on(&plot)
            .caption(texts.title, font(15.0))
            .margin_top(8)
            .margin_left(4)
            .margin_right(10)
            .x_label_area_size(bottom - 8)
            .y_label_area_size(left - 4)
            .build_cartesian_2d(x.clone(), y.clone())?;
        let grid = RGBColor(0xdd, 0xdd, 0xdd);
        let ink = RGBColor(0x44, 0x44, 0x44);
        chart
            .configure_mesh()
            .bold_line_style(grid)
            .light_line_style(TRANSPARENT)
            .axis_style(ink)
            .label_style(font(12.0))
            .axis_desc_style(font(12.0))
            .x_label_formatter(&x_label)
            .y_label_formatter(&y_label)
            .x_desc(texts.x_label)
            .y_desc(texts.y_label)
            .draw()?;
        // The frame, through the left and bottom axes that the mesh draws just outside the
        // plotting area (`plot` starts at the canvas' corner: its coordinates are pixels).
        let (px, py) = chart.plotting_area().get_pixel_range();
        let corners = [(px.start - 1, py.start), (px.end - 1, py.end)];
        plot.draw(&Rectangle::new(corners, ink.stroke_width(1)))?;
        for (i, (s, label)) in series.iter().zip(&texts.legend).enumerate() {
            let color = COLORS[i % COLORS.len()];
            let line = color.stroke_width(2);
            for run in runs(&s.points) {
                if let [p] = run[..] {
                    chart.draw_series(std::iter::once(Circle::new(p, 3, color.filled())))?;
                } else {
                    chart.draw_series(LineSeries::new(run, line))?;
                }
            }
            // Legend entry: a sample of the line, then the label, from the frame's top.
            let y = py.start + 8 + 18 * i as i32;
            legend.draw(&PathElement::new([(0, y), (22, y)], line))?;
            let style = font(12.0).pos(Pos::new(HPos::Left, VPos::Center));
            legend.draw(&Text::new(label.as_str(), (28, y), style))?;
        }
        Ok(())
    })
}

/// `(min, max)` of the values, `(∞, −∞)` for none (the tick functions then use a default).
fn range(v: impl Iterator<Item = f64>) -> (f64, f64) {
    v.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
        (a.min(x), b.max(x))
    })
}

/// Whether every value is an integer (below 2^53, where f64 still has fractions to show).
fn all_integers(mut v: impl Iterator<Item = f64>) -> bool {
    v.all(|x| x.fract() == 0.0 && x.abs() < 9e15)
}

/// The colour of a heat-map value: white at 0 to [`HEAT_DARK`] at `vmax` and above (a
/// non-finite value is white), and the fraction `t ∈ [0, 1]` of the way.
fn heat_color(v: f64, vmax: f64) -> (RGBColor, f64) {
    let t = if v.is_finite() {
        (v / vmax).clamp(0.0, 1.0)
    } else {
        0.0
    };
    let mix = |dark: f64| (255.0 - t * (255.0 - dark)).round() as u8;
    let (r, g, b) = HEAT_DARK;
    (RGBColor(mix(r), mix(g), mix(b)), t)
}

/// A heat map: cell `(i, j)` shaded from white (0) to dark blue (`vmax` and above), with row
/// labels left of the grid, column labels above it (vertical), and the value printed in each
/// cell (values are clipped to `[0, vmax]` for the colour only; a `vmax` that is not a positive
/// number means 1).
pub fn heat_map(
    title: &str,
    row_labels: &[String],
    col_labels: &[String],
    values: &[Vec<f64>],
    vmax: f64,
) -> String {
    let (rows, cols) = (values.len(), values.iter().map(Vec::len).max().unwrap_or(0));
    let vmax = if vmax > 0.0 && vmax.is_finite() {
        vmax
    } else {
        1.0
    };
    let cell = 34u32;
    // Label areas from the longest label at ~6.5 px a character (11 px text).
    let width_of = |ls: &[String]| {
        let n = ls.iter().map(|l| l.chars().count()).max().unwrap_or(0);
        (6.5 * n as f64).ceil() as u32 + 18
    };
    let (left, top) = (width_of(row_labels).max(40), width_of(col_labels).max(20));
    let title_w = (title.chars().count() as f64 * 8.0).ceil() as u32 + 40;
    let grid_w = left + cell * cols as u32 + 20;
    let size = (grid_w.max(title_w), 30 + top + cell * rows as u32 + 28);
    // The grid sits in the middle when the title is the wider.
    let spare = size.0 - grid_w;
    render(size, |root| {
        root.fill(&WHITE)?;
        let area = root.titled(title, font(14.0))?;
        // Row 0 at the top: y runs from `rows` (bottom) to 0 (top), with a row label at the
        // centre of each row.
        let centers = (0..rows).map(|i| i as f64 + 0.5).collect();
        let labels = (0..rows).map(|i| row_labels.get(i).cloned().unwrap_or_default());
        let y = TickAxis {
            lo: rows.max(1) as f64,
            hi: 0.0,
            log: false,
            ticks: Ticks {
                lo: 0.0,
                hi: rows as f64,
                values: centers,
                labels: labels.collect(),
            },
        };
        let mut chart = ChartBuilder::on(&area)
            .margin_top(8)
            .margin_left(spare / 2)
            .margin_right(spare - spare / 2 + 20)
            .margin_bottom(20)
            .top_x_label_area_size(top)
            .y_label_area_size(left)
            .build_cartesian_2d(0.0..cols.max(1) as f64, y.clone())?;
        chart
            .configure_mesh()
            .disable_mesh()
            .disable_x_axis()
            .x_labels(0)
            .axis_style(TRANSPARENT)
            .label_style(font(11.0))
            .y_label_formatter(&|v| y.label(*v))
            .draw()?;
        let cells = values.iter().enumerate().flat_map(|(i, row)| {
            row.iter()
                .enumerate()
                .map(move |(j, &v)| (i as f64, j as f64, v))
        });
        chart.draw_series(cells.clone().map(|(i, j, v)| {
            let (c, _) = heat_color(v, vmax);
            let mut r = Rectangle::new([(j, i), (j + 1.0, i + 1.0)], c.filled());
            r.set_margin(1, 1, 1, 1);
            r
        }))?;
        chart.draw_series(cells.map(|(i, j, v)| {
            // White on the darker half of the scale.
            let style = if heat_color(v, vmax).1 > 0.55 {
                font(9.0).color(&WHITE)
            } else {
                font(9.0).color(&CELL_INK)
            };
            let style = style.pos(Pos::new(HPos::Center, VPos::Center));
            Text::new(format!("{v:.2}"), (j + 0.5, i + 0.5), style)
        }))?;
        // Column labels: vertical, reading upwards from just above their column.
        let style = font(11.0)
            .transform(FontTransform::Rotate270)
            .pos(Pos::new(HPos::Left, VPos::Center));
        for (j, l) in col_labels.iter().enumerate().take(cols) {
            // (Backend coordinates: `root` starts at the canvas' corner.)
            let (x, y) = chart.backend_coord(&(j as f64 + 0.5, 0.0));
            root.draw(&Text::new(l.as_str(), (x, y - 6), style.clone()))?;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests;
