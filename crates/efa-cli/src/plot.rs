//! Minimal SVG line and heat-map plots written directly (no plotting dependency): loss curves
//! and attention maps that open in any browser.

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

/// A line chart with axes, ticks, labels and a legend.
pub fn line_chart(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> String {
    let (w, h, ml, mr, mt, mb) = (760.0, 460.0, 70.0, 200.0, 40.0, 50.0);
    let pts = series
        .iter()
        .flat_map(|s| s.points.iter())
        .filter(|p| p.0.is_finite() && p.1.is_finite());
    let (mut x0, mut x1, mut y0, mut y1) = (
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::INFINITY,
        f64::NEG_INFINITY,
    );
    for &(x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if !x0.is_finite() {
        (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    if y1 <= y0 {
        y1 = y0 + 1.0;
    }
    let pad = 0.05 * (y1 - y0);
    let (y0, y1) = (y0 - pad, y1 + pad);
    let pw = w - ml - mr;
    let ph = h - mt - mb;
    let sx = |x: f64| ml + (x - x0) / (x1 - x0) * pw;
    let sy = |y: f64| mt + (1.0 - (y - y0) / (y1 - y0)) * ph;
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
    for i in 0..=5 {
        let t = i as f64 / 5.0;
        let (xv, yv) = (x0 + t * (x1 - x0), y0 + t * (y1 - y0));
        let (px, py) = (sx(xv), sy(yv));
        let _ = writeln!(
            s,
            r##"<line x1="{px}" y1="{mt}" x2="{px}" y2="{}" stroke="#ddd"/>"##,
            mt + ph
        );
        let _ = writeln!(
            s,
            r##"<line x1="{ml}" y1="{py}" x2="{}" y2="{py}" stroke="#ddd"/>"##,
            ml + pw
        );
        let _ = writeln!(
            s,
            r#"<text x="{px}" y="{}" text-anchor="middle">{}</text>"#,
            mt + ph + 16.0,
            fmt_tick(xv)
        );
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
            ml - 6.0,
            py + 4.0,
            fmt_tick(yv)
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        ml + pw / 2.0,
        h - 10.0,
        esc(x_label)
    );
    let _ = writeln!(
        s,
        r#"<text x="16" y="{}" text-anchor="middle" transform="rotate(-90 16 {})">{}</text>"#,
        mt + ph / 2.0,
        mt + ph / 2.0,
        esc(y_label)
    );
    for (i, ser) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let path: Vec<String> = ser
            .points
            .iter()
            .filter(|p| p.0.is_finite() && p.1.is_finite())
            .map(|&(x, y)| format!("{:.2},{:.2}", sx(x), sy(y)))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{c}" stroke-width="1.6" points="{}"/>"#,
            path.join(" ")
        );
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
            esc(&ser.label)
        );
    }
    s.push_str("</svg>\n");
    s
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

fn fmt_tick(v: f64) -> String {
    if v.abs() >= 1000.0 || (v != 0.0 && v.abs() < 0.01) {
        format!("{v:.2e}")
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
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
}
