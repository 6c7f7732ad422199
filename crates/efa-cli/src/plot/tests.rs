//! What this module decides (ticks, the log axis' refusal, line breaks, legend text, colours),
//! checked through the SVG that plotters writes, which must be well-formed XML.

use super::*;

/// One element of an SVG: its name, attributes and text (entities decoded).
#[derive(Debug)]
struct Elem {
    name: String,
    attrs: Vec<(String, String)>,
    text: String,
}

impl Elem {
    fn attr(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn num(&self, name: &str) -> f64 {
        self.attr(name).unwrap().parse().unwrap()
    }
}

fn decode(s: &str) -> String {
    let mut rest = s;
    let mut out = String::new();
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        let end = rest[i..].find(';').expect("entity ends with ;") + i;
        out.push(match &rest[i..=end] {
            "&amp;" => '&',
            "&lt;" => '<',
            "&gt;" => '>',
            "&quot;" => '"',
            "&apos;" => '\'',
            e => panic!("unknown entity {e}"),
        });
        rest = &rest[end + 1..];
    }
    out + rest
}

/// The elements of an SVG in document order, checking that it is well-formed XML: one `svg`
/// root, every tag closed in order, attributes quoted, no raw `<` or stray `&` in text.
fn parse(svg: &str) -> Vec<Elem> {
    let (mut out, mut open): (Vec<Elem>, Vec<usize>) = (Vec::new(), Vec::new());
    let mut rest = svg;
    while let Some(lt) = rest.find('<') {
        let text = decode(&rest[..lt]);
        match open.last() {
            Some(&top) => out[top].text.push_str(text.trim()),
            None => assert!(text.trim().is_empty(), "text outside the root: {text:?}"),
        }
        let gt = rest[lt..].find('>').expect("tag closed") + lt;
        let tag = &rest[lt + 1..gt];
        rest = &rest[gt + 1..];
        if let Some(name) = tag.strip_prefix('/') {
            let top = open.pop().expect("a closing tag closes an open one");
            assert_eq!(out[top].name, name, "tags nest");
            continue;
        }
        let (body, closed) = match tag.strip_suffix('/') {
            Some(b) => (b, true),
            None => (tag, false),
        };
        let (name, mut attrs_text) = body.split_once(' ').unwrap_or((body, ""));
        let mut attrs = Vec::new();
        while let Some((k, v)) = attrs_text.trim_start().split_once("=\"") {
            let end = v.find('"').expect("attribute value quoted");
            attrs.push((k.trim().to_string(), decode(&v[..end])));
            attrs_text = &v[end + 1..];
        }
        assert!(attrs_text.trim().is_empty(), "attributes of <{tag}>");
        assert!(out.is_empty() || !open.is_empty(), "one root element");
        out.push(Elem {
            name: name.to_string(),
            attrs,
            text: String::new(),
        });
        if !closed {
            open.push(out.len() - 1);
        }
    }
    assert!(
        open.is_empty() && rest.trim().is_empty(),
        "every tag closed"
    );
    assert_eq!(out[0].name, "svg");
    out
}

fn texts(svg: &[Elem]) -> Vec<&str> {
    svg.iter()
        .filter(|e| e.name == "text")
        .map(|e| e.text.as_str())
        .collect()
}

/// The points of the polylines drawn in a colour, one list per polyline.
fn lines(svg: &[Elem], color: &str) -> Vec<Vec<(f64, f64)>> {
    svg.iter()
        .filter(|e| e.name == "polyline" && e.attr("stroke") == Some(color))
        .map(|e| {
            let pts = e.attr("points").unwrap().split_whitespace();
            pts.map(|p| {
                let (x, y) = p.split_once(',').unwrap();
                (x.parse().unwrap(), y.parse().unwrap())
            })
            .collect()
        })
        .collect()
}

fn labels(t: &Ticks) -> Vec<&str> {
    t.labels.iter().map(String::as_str).collect()
}

const BLUE: &str = "#1F77B4";

#[test]
fn chart_is_well_formed_svg_with_its_texts_and_one_line_per_series() {
    let series = [
        Series {
            label: "a<b & \"c\"".into(),
            points: vec![(1.0, 2.0), (2.0, 1.0), (3.0, 0.5)],
        },
        Series {
            label: "c".into(),
            points: vec![(1.0, 3.0), (3.0, 3.0)],
        },
    ];
    let svg = parse(&line_chart("t <1>", "epoch", "loss", &series));
    let t = texts(&svg);
    for want in ["t <1>", "epoch", "loss", "a<b & \"c\"", "c"] {
        assert!(t.contains(&want), "{want:?} not in {t:?}");
    }
    // Series 0: its line with 3 points and its legend sample; series 1 in the next colour.
    let blue = lines(&svg, BLUE);
    assert_eq!(blue.iter().map(Vec::len).collect::<Vec<_>>(), [3, 2]);
    assert_eq!(lines(&svg, "#D62728").len(), 2);
    // The first point (x = 1, the axis' start) is on the frame's left edge, the highest y of
    // the series (2) above the lowest (0.5).
    let frame = svg
        .iter()
        .find(|e| e.name == "rect" && e.attr("fill") == Some("none"));
    let left = frame.unwrap().num("x");
    let [(x0, y0), _, (_, y2)] = blue[0][..] else {
        panic!("{blue:?}")
    };
    assert!(
        (x0 - left).abs() <= 1.0 && y0 < y2,
        "{blue:?}, frame at {left}"
    );
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
    // Epochs 1..=87: step 20 (86/5 = 17.2), axis 0..100. Loss [9.091, 11.236]: step 0.5
    // (2.145/5 = 0.429), ⌊18.18⌋ = 18 … ⌈22.47⌉ = 23 (see ticks::linear).
    let (x, y) = axes(&loss_curve(), false);
    let (xt, yt) = (x.ticks, y.ticks);
    assert_eq!(labels(&xt), ["0", "20", "40", "60", "80", "100"]);
    assert_eq!(labels(&yt), ["9", "9.5", "10", "10.5", "11", "11.5"]);
    assert_eq!((x.lo, x.hi, y.lo, y.hi), (0.0, 100.0, 9.0, 11.5));
    let svg = parse(&line_chart("loss", "epoch", "loss", &loss_curve()));
    let t = texts(&svg);
    for l in xt.labels.iter().chain(&yt.labels) {
        assert!(t.contains(&l.as_str()), "tick {l} not drawn: {t:?}");
    }
    assert!(!t.contains(&"11.236") && !t.contains(&"87"));
    // Epoch 1 is 1/100 of the frame's width right of its left edge (to a pixel).
    let frame = svg
        .iter()
        .find(|e| e.name == "rect" && e.attr("fill") == Some("none"));
    let (left, width) = (frame.unwrap().num("x"), frame.unwrap().num("width"));
    let x1 = lines(&svg, BLUE)[0][0].0;
    assert!(
        (x1 - left - width / 100.0).abs() <= 1.5,
        "{x1} vs {left} + {width}"
    );
}

#[test]
fn log_chart_places_points_by_decade() {
    let series = [Series {
        label: "val".into(),
        points: vec![(1.0, 2000.0), (2.0, 1.0), (3.0, 0.3)],
    }];
    let y = axes(&series, true).1;
    assert_eq!(labels(&y.ticks), ["0.1", "1", "10", "100", "1000", "10000"]);
    assert!(y.log && (y.lo, y.hi) == (0.1, 10000.0));
    let opts = ChartOptions { log_y: true };
    let svg = parse(&line_chart_with("loss", "epoch", "loss", &series, &opts).unwrap());
    assert!(texts(&svg).contains(&"loss (log scale)"));
    // Heights go with log10 y: 2000 → 1 spans log10(2000) decades, 1 → 0.3 spans log10(1/0.3).
    let pts = &lines(&svg, BLUE)[0];
    let ratio = (pts[1].1 - pts[0].1) / (pts[2].1 - pts[1].1);
    let want = 2000f64.log10() / (1.0 / 0.3f64).log10();
    assert!((ratio / want - 1.0).abs() < 0.05, "{ratio} vs {want}");
    // The same data on a linear axis: 0 … 2000 by 500.
    let y = axes(&series, false).1;
    assert_eq!(labels(&y.ticks), ["0", "500", "1000", "1500", "2000"]);
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
        assert_eq!(
            lines(&parse(&line_chart("t", "x", "y", &series)), "#D62728").len(),
            2
        );
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
    let svg = parse(&line_chart("t", "x", "y", &series));
    // Runs [1, 2], [4], [6, 7]: two lines and a dot, and the legend's sample line.
    assert_eq!(lines(&svg, BLUE).len(), 3);
    assert_eq!(svg.iter().filter(|e| e.name == "circle").count(), 1);
    assert!(texts(&svg).contains(&"s (2 non-finite not drawn)"));
}

#[test]
fn charts_of_no_data_or_extreme_data_are_drawn() {
    let s = |points: Vec<(f64, f64)>| Series {
        label: "s".into(),
        points,
    };
    for series in [
        vec![],
        vec![s(vec![])],
        vec![s(vec![(f64::NAN, 1.0), (1.0, f64::NEG_INFINITY)])],
        vec![s(vec![(5.0, 2.0)])],
        vec![s(vec![(-1.7e308, -1.7e308), (1.7e308, 1.7e308)])],
        vec![s(vec![(0.0, 1e-320), (1.0, 1e-310)])],
    ] {
        parse(&line_chart("t", "x", "y", &series));
        let log = line_chart_with("t", "x", "y", &series, &ChartOptions { log_y: true });
        if let Ok(svg) = log {
            parse(&svg);
        }
    }
}

#[test]
fn axis_maps_linear_log_and_reversed_spans() {
    let axis = |lo, hi, log| TickAxis {
        lo,
        hi,
        log,
        ticks: ticks::linear(0.0, 1.0, false),
    };
    assert_eq!(axis(0.0, 10.0, false).map(&2.5, (100, 500)), 200);
    assert_eq!(axis(0.1, 1000.0, true).map(&10.0, (0, 400)), 200);
    // Row 0 at the top: a span from 4 down to 0 on a y axis (pixel limits bottom, top).
    assert_eq!(axis(4.0, 0.0, false).map(&0.5, (400, 0)), 50);
    // No overflow over ±f64::MAX.
    assert_eq!(axis(-f64::MAX, f64::MAX, false).map(&0.0, (0, 100)), 50);
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
    let svg = parse(&svg);
    // The background, then the four cells: 0 and NaN white, 0.25 (= vmax) and 0.5 (clipped)
    // the darkest colour, which prints its value in white.
    let cells: Vec<&str> = svg
        .iter()
        .filter(|e| e.name == "rect")
        .skip(1)
        .map(|e| e.attr("fill").unwrap())
        .collect();
    assert_eq!(cells, ["#FFFFFF", "#08306B", "#08306B", "#FFFFFF"]);
    let t = texts(&svg);
    assert_eq!(t.iter().filter(|&&s| s == "b&c").count(), 2, "{t:?}");
    for want in ["att", "a", "0.00", "0.25", "0.50", "NaN"] {
        assert!(t.contains(&want), "{want:?} not in {t:?}");
    }
    let white_ink = svg
        .iter()
        .filter(|e| e.name == "text" && e.attr("fill") == Some("#FFFFFF"));
    assert_eq!(
        white_ink.map(|e| e.text.as_str()).collect::<Vec<_>>(),
        ["0.25", "0.50"]
    );
    // Shades in between: a quarter of the way to the dark colour.
    assert_eq!(heat_color(0.25, 1.0).0, RGBColor(193, 203, 218));
    // Nothing to draw, or no usable clip value: still a picture.
    parse(&heat_map("empty", &[], &[], &[], f64::NAN));
    parse(&heat_map(
        "ragged",
        &labels,
        &[],
        &[vec![1.0], vec![]],
        -1.0,
    ));
}
