//! Minimal SVG line and heat-map plots written directly (no plotting dependency): loss curves
//! and attention maps that open in any browser. Axis ticks are round values ([`ticks`]); the
//! y axis of a line chart can be logarithmic ([`ChartOptions::log_y`]).

pub mod ticks;

use std::fmt::Write;

/// One named polyline.
pub struct Series {
    /// Legend label.
    pub label: String,
    /// (x, y) points.
    pub points: Vec<(f64, f64)>,
}

const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

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

/// A line chart with axes, round ticks ([`ticks`]), labels and a legend, on linear axes:
/// [`line_chart_with`] and the default [`ChartOptions`].
pub fn line_chart(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> String {
    match line_chart_with(title, x_label, y_label, series, &ChartOptions::default()) {
        Ok(svg) => svg,
        // Only a log axis rejects points.
        Err(e) => unreachable!("linear axes place every finite point: {e}"),
    }
}

/// A line chart with axes, round ticks, labels and a legend.
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
    let finite = |p: &&(f64, f64)| p.0.is_finite() && p.1.is_finite();
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
    let (w, h, ml, mr, mt, mb) = (760.0, 460.0, 70.0, 200.0, 40.0, 50.0);
    let pts = || series.iter().flat_map(|s| s.points.iter()).filter(finite);
    let (x0, x1) = range(pts().map(|p| p.0));
    let (y0, y1) = range(pts().map(|p| p.1));
    let xt = ticks::linear(x0, x1, all_integers(pts().map(|p| p.0)));
    let yt = if opts.log_y {
        ticks::log(y0, y1)
    } else {
        ticks::linear(y0, y1, all_integers(pts().map(|p| p.1)))
    };
    // The axes span the ticks (which cover the data except at f64's own limits).
    let (x0, x1) = (xt.lo.min(x0), xt.hi.max(x1));
    let (y0, y1) = (yt.lo.min(y0), yt.hi.max(y1));
    let fy = |y: f64| if opts.log_y { y.log10() } else { y };
    let pw = w - ml - mr;
    let ph = h - mt - mb;
    // x0/2 − x1/2 forms avoid overflow when the range is near ±f64::MAX.
    let sx = |x: f64| ml + (x / 2.0 - x0 / 2.0) / (x1 / 2.0 - x0 / 2.0) * pw;
    let sy =
        |y: f64| mt + (1.0 - (fy(y) / 2.0 - fy(y0) / 2.0) / (fy(y1) / 2.0 - fy(y0) / 2.0)) * ph;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="15">{}</text>"#,
        ml + pw / 2.0,
        esc(title)
    );
    let _ = writeln!(
        s,
        r##"<rect x="{ml}" y="{mt}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>"##
    );
    for (&v, l) in xt.values.iter().zip(&xt.labels) {
        let px = sx(v);
        let _ = writeln!(
            s,
            r##"<line x1="{px:.2}" y1="{mt}" x2="{px:.2}" y2="{}" stroke="#ddd"/>"##,
            mt + ph
        );
        let _ = writeln!(
            s,
            r#"<text x="{px:.2}" y="{}" text-anchor="middle">{l}</text>"#,
            mt + ph + 16.0
        );
    }
    for (&v, l) in yt.values.iter().zip(&yt.labels) {
        let py = sy(v);
        let _ = writeln!(
            s,
            r##"<line x1="{ml}" y1="{py:.2}" x2="{}" y2="{py:.2}" stroke="#ddd"/>"##,
            ml + pw
        );
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{:.2}" text-anchor="end">{l}</text>"#,
            ml - 6.0,
            py + 4.0
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        ml + pw / 2.0,
        h - 10.0,
        esc(x_label)
    );
    let y_title = if opts.log_y {
        format!("{y_label} (log scale)")
    } else {
        y_label.to_string()
    };
    let _ = writeln!(
        s,
        r#"<text x="16" y="{}" text-anchor="middle" transform="rotate(-90 16 {})">{}</text>"#,
        mt + ph / 2.0,
        mt + ph / 2.0,
        esc(&y_title)
    );
    for (i, ser) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        // Runs of finite points, split where a point is not finite.
        let mut runs: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
        for p in &ser.points {
            if finite(&p) {
                runs.last_mut().expect("one run at least").push(*p);
            } else if !runs.last().is_some_and(Vec::is_empty) {
                runs.push(Vec::new());
            }
        }
        for run in runs.iter().filter(|r| !r.is_empty()) {
            let path: Vec<String> = run
                .iter()
                .map(|&(x, y)| format!("{:.2},{:.2}", sx(x), sy(y)))
                .collect();
            let _ = writeln!(
                s,
                r#"<polyline fill="none" stroke="{c}" stroke-width="1.6" points="{}"/>"#,
                path.join(" ")
            );
            if let [(x, y)] = run[..] {
                let _ = writeln!(
                    s,
                    r#"<circle cx="{:.2}" cy="{:.2}" r="2.5" fill="{c}"/>"#,
                    sx(x),
                    sy(y)
                );
            }
        }
        let left_out = ser.points.iter().filter(|p| !finite(p)).count();
        let label = if left_out > 0 {
            format!("{} ({left_out} non-finite not drawn)", ser.label)
        } else {
            ser.label.clone()
        };
        let ly = mt + 14.0 + 18.0 * i as f64;
        let lx = ml + pw + 12.0;
        let _ = writeln!(
            s,
            r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{c}" stroke-width="2"/>"#,
            lx + 22.0
        );
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}">{}</text>"#,
            lx + 28.0,
            ly + 4.0,
            esc(&label)
        );
    }
    s.push_str("</svg>\n");
    Ok(s)
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

/// A heat map: cell `(i, j)` shaded from white (0) to dark blue (`vmax` and above), with row
/// and column labels and the value printed in each cell (values are clipped to `[0, vmax]`
/// for the colour only).
pub fn heat_map(
    title: &str,
    row_labels: &[String],
    col_labels: &[String],
    values: &[Vec<f64>],
    vmax: f64,
) -> String {
    let (rows, cols) = (values.len(), values.first().map_or(0, Vec::len));
    let cell = 34.0;
    let label_w = 7.0
        * row_labels
            .iter()
            .map(|l| l.chars().count())
            .max()
            .unwrap_or(0) as f64
        + 12.0;
    let label_h = 7.0
        * col_labels
            .iter()
            .map(|l| l.chars().count())
            .max()
            .unwrap_or(0) as f64
        * 0.72
        + 16.0;
    let (ml, mt) = (label_w.max(40.0), 40.0 + label_h.max(20.0));
    let (w, h) = (
        ml + cell * cols as f64 + 20.0,
        mt + cell * rows as f64 + 20.0,
    );
    let vmax = if vmax > 0.0 && vmax.is_finite() {
        vmax
    } else {
        1.0
    };
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="20" text-anchor="middle" font-size="14">{}</text>"#,
        w / 2.0,
        esc(title)
    );
    for (i, row) in values.iter().enumerate() {
        let y = mt + cell * i as f64;
        if let Some(l) = row_labels.get(i) {
            let _ = writeln!(
                s,
                r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
                ml - 6.0,
                y + cell / 2.0 + 4.0,
                esc(l)
            );
        }
        for (j, &v) in row.iter().enumerate() {
            let x = ml + cell * j as f64;
            let t = if v.is_finite() {
                (v / vmax).clamp(0.0, 1.0)
            } else {
                0.0
            };
            let (r, g, b) = (
                255.0 - t * (255.0 - 8.0),
                255.0 - t * (255.0 - 48.0),
                255.0 - t * (255.0 - 107.0),
            );
            let _ = writeln!(
                s,
                r##"<rect x="{x}" y="{y}" width="{cell}" height="{cell}" fill="rgb({:.0},{:.0},{:.0})" stroke="#eee"><title>{v:.4}</title></rect>"##,
                r, g, b
            );
            let ink = if t > 0.55 { "white" } else { "#333" };
            let _ = writeln!(
                s,
                r#"<text x="{}" y="{}" text-anchor="middle" font-size="9" fill="{ink}">{:.2}</text>"#,
                x + cell / 2.0,
                y + cell / 2.0 + 3.0,
                v
            );
        }
    }
    for (j, l) in col_labels.iter().enumerate().take(cols) {
        let x = ml + cell * j as f64 + cell / 2.0;
        let _ = writeln!(
            s,
            r#"<text x="{x}" y="{}" transform="rotate(-45 {x} {})">{}</text>"#,
            mt - 6.0,
            mt - 6.0,
            esc(l)
        );
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chart_contains_one_polyline_per_series_with_all_points() {
        let svg = line_chart(
            "t",
            "epoch",
            "loss",
            &[
                Series {
                    label: "a<b".into(),
                    points: vec![(1.0, 2.0), (2.0, 1.0), (3.0, 0.5)],
                },
                Series {
                    label: "c".into(),
                    points: vec![(1.0, 3.0)],
                },
            ],
        );
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("a&lt;b"));
        // The first series' first point is at the left edge (x = 70) and its highest y.
        let first = svg.split("points=\"").nth(1).unwrap();
        assert!(first.starts_with("70.00,"), "{first}");
        assert_eq!(first.split('"').next().unwrap().split(' ').count(), 3);
    }

    #[test]
    fn heat_map_has_one_cell_per_value_shaded_by_value() {
        let labels: Vec<String> = vec!["a".into(), "b&c".into()];
        let svg = heat_map(
            "att",
            &labels,
            &labels,
            &[vec![0.0, 0.25], vec![0.5, f64::NAN]],
            0.25,
        );
        assert_eq!(svg.matches("<rect x=").count(), 4);
        // 0 is white, 0.25 (= vmax) and 0.5 (clipped) are the darkest colour, NaN is white.
        assert_eq!(svg.matches("fill=\"rgb(255,255,255)\"").count(), 2);
        assert_eq!(svg.matches("fill=\"rgb(8,48,107)\"").count(), 2);
        assert!(svg.contains("b&amp;c"));
    }

    /// The labels of the x ticks (under the frame, y = 40 + 370 + 16) and of the y ticks
    /// (right-aligned left of the frame), in document order.
    fn tick_labels(svg: &str) -> (Vec<String>, Vec<String>) {
        let text = |l: &str| {
            l.split('>')
                .nth(1)
                .unwrap()
                .split('<')
                .next()
                .unwrap()
                .to_string()
        };
        let xs = svg
            .lines()
            .filter(|l| l.starts_with("<text") && l.contains(r#"y="426""#))
            .map(text)
            .collect();
        let ys = svg
            .lines()
            .filter(|l| l.starts_with("<text") && l.contains(r#"text-anchor="end""#))
            .map(text)
            .collect();
        (xs, ys)
    }

    fn loss_curve() -> Vec<Series> {
        // 87 epochs, loss falling linearly from 11.236 to 9.091.
        let pts = (1..=87)
            .map(|e| (e as f64, 11.236 - (11.236 - 9.091) * (e - 1) as f64 / 86.0))
            .collect();
        vec![Series {
            label: "train".into(),
            points: pts,
        }]
    }

    #[test]
    fn loss_chart_has_round_tick_labels() {
        let svg = line_chart("loss", "epoch", "loss", &loss_curve());
        let (xs, ys) = tick_labels(&svg);
        // Epochs 1..=87: step 20 (86/5 = 17.2), axis 0..100. Loss [9.091, 11.236]: step 0.5
        // (2.145/5 = 0.429), ⌊18.18⌋ = 18 … ⌈22.47⌉ = 23 (see ticks::linear).
        assert_eq!(xs, ["0", "20", "40", "60", "80", "100"]);
        assert_eq!(ys, ["9", "9.5", "10", "10.5", "11", "11.5"]);
        assert!(!svg.contains(">11.236<") && !svg.contains(">40.6<"));
        // Epoch 1 is 1/100 of the frame width right of its left edge: 70 + 490/100.
        let first = svg.split("points=\"").nth(1).unwrap();
        assert!(first.starts_with("74.90,"), "{first}");
    }

    #[test]
    fn log_chart_places_points_by_decade() {
        let series = [Series {
            label: "val".into(),
            points: vec![(1.0, 2000.0), (2.0, 1.0), (3.0, 0.3)],
        }];
        let opts = ChartOptions { log_y: true };
        let svg = line_chart_with("loss", "epoch", "loss", &series, &opts).unwrap();
        let (_, ys) = tick_labels(&svg);
        assert_eq!(ys, ["0.1", "1", "10", "100", "1000", "10000"]);
        assert!(svg.contains("loss (log scale)"));
        // Axis 0.1 … 10^4 spans 5 decades over 370 px: y = 1 is one decade up,
        // 40 + (1 − 1/5)·370 = 336; y = 2000 is log10(20000)/5 up, 40 + (1 − 0.86020599…)·370.
        let pts = svg.split("points=\"").nth(1).unwrap();
        let want_top = 40.0 + (1.0 - 20000f64.log10() / 5.0) * 370.0;
        assert!(
            pts.starts_with(&format!("70.00,{want_top:.2} 315.00,336.00 ")),
            "{pts}"
        );
        // The same data on a linear axis: 0 … 2000 by 500.
        let (_, ys) = tick_labels(&line_chart("loss", "epoch", "loss", &series));
        assert_eq!(ys, ["0", "500", "1000", "1500", "2000"]);
    }

    #[test]
    fn log_chart_refuses_non_positive_values_by_series_and_index() {
        let opts = ChartOptions { log_y: true };
        for bad in [0.0, -2.5] {
            let series = [
                Series {
                    label: "ok".into(),
                    points: vec![(1.0, 1.0)],
                },
                Series {
                    label: "gauss nll".into(),
                    points: vec![(1.0, f64::NAN), (2.0, 3.0), (3.0, bad)],
                },
            ];
            let e = line_chart_with("t", "x", "y", &series, &opts).unwrap_err();
            assert_eq!((e.series.as_str(), e.index), ("gauss nll", 2));
            let msg = e.to_string();
            assert!(
                msg.contains("`gauss nll` point 2") && msg.contains(&format!("y = {bad}")),
                "{msg}"
            );
            // A linear axis draws the same data.
            assert!(line_chart("t", "x", "y", &series).contains("<polyline"));
        }
    }

    #[test]
    fn non_finite_points_break_the_line_and_are_counted() {
        let series = [Series {
            label: "s".into(),
            points: vec![
                (1.0, 1.0),
                (2.0, 2.0),
                (3.0, f64::NAN),
                (4.0, 1.0),
                (5.0, f64::INFINITY),
                (6.0, 2.0),
                (7.0, 3.0),
            ],
        }];
        let svg = line_chart("t", "x", "y", &series);
        // Runs [1, 2], [4], [6, 7]: three polylines, a dot for the lone point.
        assert_eq!(svg.matches("<polyline").count(), 3);
        assert_eq!(svg.matches("<circle").count(), 1);
        assert!(svg.contains(">s (2 non-finite not drawn)<"), "{svg}");
    }
}
