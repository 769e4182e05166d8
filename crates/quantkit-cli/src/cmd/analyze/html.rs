//! The self-contained HTML report of `quantkit analyze -o DIR`: inline SVG charts drawn with
//! plotters' SVG backend (no font files, no scripts, no network), one `<figure>` per chart
//! with a `data-chart` attribute naming it.

use plotters::prelude::*;
use quantkit_ptq::analyze::{ActivationRange, Details, Report, WeightPicture};
use std::fmt::Write as _;

/// A layer of the report in graph order with its figures.
pub struct Row<'a> {
    /// Layer name.
    pub name: &'a str,
    /// Operator(s).
    pub op: &'a str,
    /// Local SQNR (dB), if measured.
    pub local: Option<f64>,
    /// Propagated SQNR (dB), if measured.
    pub propagated: Option<f64>,
}

type DrawResult<T> = Result<T, String>;

fn e<E: std::fmt::Display>(err: E) -> String {
    err.to_string()
}

/// Escapes text for HTML content and attributes.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// A finite value for a chart (an exact match, +∞ dB, is drawn at `cap`).
fn fin(v: f64, cap: f64) -> f64 {
    if v.is_finite() {
        v
    } else if v > 0.0 {
        cap
    } else {
        0.0
    }
}

const SERIES: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];
const LOCAL: RGBColor = RGBColor(31, 119, 180);
const PROP: RGBColor = RGBColor(255, 127, 14);

/// Horizontal bars, one row per label, several series per row; labels drawn at the left.
fn hbars(
    title: &str,
    x_desc: &str,
    labels: &[String],
    series: &[(&str, RGBColor, Vec<Option<f64>>)],
    x_range: (f64, f64),
) -> DrawResult<String> {
    let n = labels.len().max(1);
    let row = 8 + 6 * series.len() as u32;
    let label_w = labels
        .iter()
        .map(|l| l.chars().count())
        .max()
        .unwrap_or(4)
        .clamp(4, 48) as u32
        * 7
        + 10;
    let (w, h) = (label_w + 640, (90 + row * n as u32).max(200));
    // Room on the right for the legend, clear of the longest bar.
    let x_range = (x_range.0, x_range.1 + 0.3 * (x_range.1 - x_range.0));
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(e)?;
        let (left, right) = root.split_horizontally(label_w);
        let mut c = ChartBuilder::on(&right)
            .caption(title, ("sans-serif", 16))
            .margin(8)
            .x_label_area_size(34)
            .y_label_area_size(0)
            .build_cartesian_2d(x_range.0..x_range.1, -0.5..(n as f64 - 0.5))
            .map_err(e)?;
        c.configure_mesh()
            .disable_y_mesh()
            .x_desc(x_desc)
            .draw()
            .map_err(e)?;
        let k = series.len() as f64;
        let slot = 0.8 / k;
        for (si, (name, color, values)) in series.iter().enumerate() {
            let bars: Vec<Rectangle<(f64, f64)>> = values
                .iter()
                .enumerate()
                .filter_map(|(i, v)| {
                    let v = fin((*v)?, x_range.1);
                    // Row i at the top: y grows downwards in the label order.
                    let y0 = (n - 1 - i) as f64 + 0.4 - slot * si as f64;
                    Some(Rectangle::new(
                        [(x_range.0.max(0.0).min(v), y0 - slot), (v, y0)],
                        color.filled(),
                    ))
                })
                .collect();
            c.draw_series(bars)
                .map_err(e)?
                .label(*name)
                .legend(move |(a, b)| {
                    Rectangle::new([(a, b - 5), (a + 12, b + 5)], color.filled())
                });
        }
        c.configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .border_style(BLACK)
            .background_style(WHITE.mix(0.9))
            .draw()
            .map_err(e)?;
        let style = TextStyle::from(("sans-serif", 11).into_font()).pos(
            plotters::style::text_anchor::Pos::new(
                plotters::style::text_anchor::HPos::Right,
                plotters::style::text_anchor::VPos::Center,
            ),
        );
        for (i, l) in labels.iter().enumerate() {
            let (_, py) = c.backend_coord(&(x_range.0, (n - 1 - i) as f64));
            let short: String = l.chars().take(48).collect();
            left.draw(&Text::new(short, (label_w as i32 - 6, py), style.clone()))
                .map_err(e)?;
        }
        root.present().map_err(e)?;
    }
    Ok(svg)
}

/// Per-layer local vs propagated SQNR, graph order.
pub fn sqnr_bars(rows: &[Row]) -> DrawResult<String> {
    let vals: Vec<f64> = rows
        .iter()
        .flat_map(|r| [r.local, r.propagated])
        .flatten()
        .filter(|v| v.is_finite())
        .collect();
    let hi = vals.iter().copied().fold(10.0f64, f64::max) + 5.0;
    let lo = vals.iter().copied().fold(0.0f64, f64::min);
    hbars(
        "SQNR per layer (graph order): local vs propagated",
        "SQNR (dB)",
        &rows
            .iter()
            .map(|r| format!("{} ({})", r.name, r.op))
            .collect::<Vec<_>>(),
        &[
            ("local", LOCAL, rows.iter().map(|r| r.local).collect()),
            (
                "propagated",
                PROP,
                rows.iter().map(|r| r.propagated).collect(),
            ),
        ],
        (lo, hi),
    )
}

/// The sensitivity ranking: share of the output error recovered with each layer in float.
pub fn ranking_bars(report: &Report, max_rows: usize) -> DrawResult<Option<String>> {
    let ranked: Vec<_> = report
        .layers
        .iter()
        .filter_map(|l| Some((l, l.sensitivity?)))
        .take(max_rows)
        .collect();
    if ranked.is_empty() {
        return Ok(None);
    }
    let rec: Vec<f64> = ranked.iter().map(|(_, s)| 100.0 * s.recovered).collect();
    let lo = rec.iter().copied().fold(0.0f64, f64::min).max(-100.0);
    let hi = rec.iter().copied().fold(5.0f64, f64::max).min(100.0) + 2.0;
    hbars(
        "Sensitivity ranking: output error recovered with the layer left in float",
        "recovered share of the output error (%)",
        &ranked
            .iter()
            .enumerate()
            .map(|(i, (l, _))| format!("{}. {} ({})", i + 1, l.name, l.op))
            .collect::<Vec<_>>(),
        &[(
            "recovered",
            RGBColor(214, 39, 40),
            rec.iter().map(|&v| Some(v.clamp(lo, hi))).collect(),
        )],
        (lo, hi),
    )
    .map(Some)
}

/// One activation's histogram (log counts), its clip range and its quantization grid.
pub fn histogram(a: &ActivationRange) -> DrawResult<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (460, 250)).into_drawing_area();
        root.fill(&WHITE).map_err(e)?;
        let (lo, hi) = a.hist_range;
        let peak = a.bins.iter().copied().max().unwrap_or(0);
        let ymax = ((peak as f64) + 1.0).log10().max(1.0) * 1.08;
        let title = format!(
            "{} — {:.3}% clipped",
            a.tensor.chars().take(40).collect::<String>(),
            100.0 * a.clipped_fraction
        );
        let mut c = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 13))
            .margin(6)
            .x_label_area_size(30)
            .y_label_area_size(40)
            .build_cartesian_2d(lo..hi, 0.0..ymax)
            .map_err(e)?;
        c.configure_mesh()
            .disable_mesh()
            .y_desc("log10(1+count)")
            .x_labels(6)
            .label_style(("sans-serif", 10))
            .draw()
            .map_err(e)?;
        let width = (hi - lo) / a.bins.len().max(1) as f64;
        c.draw_series(
            a.bins
                .iter()
                .enumerate()
                .filter(|(_, &n)| n > 0)
                .map(|(i, &n)| {
                    let x0 = lo + width * i as f64;
                    Rectangle::new(
                        [(x0, 0.0), (x0 + width, ((n as f64) + 1.0).log10())],
                        RGBColor(31, 119, 180).filled(),
                    )
                }),
        )
        .map_err(e)?;
        // The quantization grid: one tick per code, or every k-th when they would merge.
        let codes = (a.qmax - a.qmin) as usize + 1;
        let span_px = 400.0 * (a.clip.1 - a.clip.0) / (hi - lo).max(f64::MIN_POSITIVE);
        let every = ((codes as f64 * 3.0 / span_px.max(1.0)).ceil() as usize).max(1);
        let s = f64::from(a.scale);
        let tick = ymax * 0.06;
        c.draw_series((0..codes).step_by(every).map(|k| {
            let x = s * (f64::from(a.qmin) + k as f64 - f64::from(a.zero_point));
            PathElement::new(vec![(x, 0.0), (x, tick)], RGBColor(90, 90, 90))
        }))
        .map_err(e)?
        .label(if every == 1 {
            "grid: every code".to_string()
        } else {
            format!("grid: a tick per {every} codes")
        })
        .legend(|(x, y)| PathElement::new(vec![(x, y - 5), (x, y + 5)], RGBColor(90, 90, 90)));
        c.draw_series(
            [a.clip.0, a.clip.1]
                .into_iter()
                .map(|x| PathElement::new(vec![(x, 0.0), (x, ymax)], RED.stroke_width(2))),
        )
        .map_err(e)?
        .label("clip range")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 12, y)], RED.stroke_width(2)));
        c.configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .label_font(("sans-serif", 10))
            .border_style(BLACK)
            .background_style(WHITE.mix(0.9))
            .draw()
            .map_err(e)?;
        root.present().map_err(e)?;
    }
    Ok(svg)
}

/// Lines of SQNR against bit width: thin grey lines for every series, coloured ones for the
/// highlighted, a thick black one for the model.
#[allow(clippy::type_complexity)]
fn bit_lines(
    title: &str,
    y_desc: &str,
    all: &[(String, Vec<(u8, f64)>)],
    highlight: &[String],
    model: Option<&[(u8, f64)]>,
) -> DrawResult<String> {
    let ys = all
        .iter()
        .flat_map(|(_, v)| v.iter().map(|p| p.1))
        .chain(model.into_iter().flatten().map(|p| p.1))
        .filter(|v| v.is_finite());
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for y in ys {
        lo = lo.min(y);
        hi = hi.max(y);
    }
    if !lo.is_finite() {
        (lo, hi) = (0.0, 60.0);
    }
    let (lo, hi) = (lo.min(0.0) - 2.0, hi + 5.0);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (760, 420)).into_drawing_area();
        root.fill(&WHITE).map_err(e)?;
        let mut c = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 15))
            .margin(10)
            .x_label_area_size(34)
            .y_label_area_size(50)
            .build_cartesian_2d(1.8..8.2, lo..hi)
            .map_err(e)?;
        c.configure_mesh()
            .x_desc("bits")
            .y_desc(y_desc)
            .x_labels(7)
            .x_label_formatter(&|v| format!("{v:.0}"))
            .draw()
            .map_err(e)?;
        let pts = |v: &[(u8, f64)]| -> Vec<(f64, f64)> {
            v.iter().map(|&(b, y)| (f64::from(b), fin(y, hi))).collect()
        };
        for (name, v) in all {
            if !highlight.contains(name) {
                c.draw_series(LineSeries::new(pts(v), RGBColor(190, 190, 190)))
                    .map_err(e)?;
            }
        }
        for (i, name) in highlight.iter().enumerate() {
            let Some((_, v)) = all.iter().find(|(n, _)| n == name) else {
                continue;
            };
            let color = SERIES[i % SERIES.len()];
            c.draw_series(LineSeries::new(pts(v), color.stroke_width(2)))
                .map_err(e)?
                .label(name.chars().take(40).collect::<String>())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 14, y)], color.stroke_width(2))
                });
        }
        if let Some(m) = model {
            c.draw_series(LineSeries::new(pts(m), BLACK.stroke_width(3)))
                .map_err(e)?
                .label("whole model (output)")
                .legend(|(x, y)| {
                    PathElement::new(vec![(x, y), (x + 14, y)], BLACK.stroke_width(3))
                });
            c.draw_series(
                pts(m)
                    .into_iter()
                    .map(|p| Circle::new(p, 3, BLACK.filled())),
            )
            .map_err(e)?;
        }
        c.configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .label_font(("sans-serif", 11))
            .border_style(BLACK)
            .background_style(WHITE.mix(0.9))
            .draw()
            .map_err(e)?;
        root.present().map_err(e)?;
    }
    Ok(svg)
}

/// Weight SQNR per layer and model-output SQNR against the weight bit width.
pub fn weight_bits_chart(d: &Details, highlight: &[String]) -> DrawResult<String> {
    let mut by_layer: Vec<(String, Vec<(u8, f64)>)> = Vec::new();
    for p in &d.weight_bits {
        for (l, v) in &p.layers {
            match by_layer.iter_mut().find(|(n, _)| n == l) {
                Some((_, pts)) => pts.push((p.bits, *v)),
                None => by_layer.push((l.clone(), vec![(p.bits, *v)])),
            }
        }
    }
    let model: Vec<(u8, f64)> = d
        .weight_bits
        .iter()
        .map(|p| (p.bits, p.output.sqnr_db))
        .collect();
    let hl: Vec<String> = highlight
        .iter()
        .filter(|h| by_layer.iter().any(|(n, _)| n == *h))
        .cloned()
        .collect();
    bit_lines(
        "Error vs weight bit width: weight SQNR per layer, output SQNR of the model",
        "SQNR (dB)",
        &by_layer,
        &hl,
        Some(&model),
    )
}

/// Activation SQNR against bit width (each tensor alone, same clip range).
pub fn activation_bits_chart(d: &Details, highlight: &[String]) -> DrawResult<String> {
    let all: Vec<(String, Vec<(u8, f64)>)> = d
        .activations
        .iter()
        .map(|a| {
            (
                a.layer.clone().unwrap_or_else(|| a.tensor.clone()),
                a.sqnr_by_bits.clone(),
            )
        })
        .collect();
    let hl: Vec<String> = highlight
        .iter()
        .filter(|h| all.iter().any(|(n, _)| n == *h))
        .cloned()
        .collect();
    bit_lines(
        "Error vs activation bit width: each layer's output alone quantized, same clip range",
        "SQNR (dB)",
        &all,
        &hl,
        None,
    )
}

/// Seed 000/004's picture of one tensor: original vs dequantized by index, and the error.
pub fn weight_picture_chart(p: &WeightPicture) -> DrawResult<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 560)).into_drawing_area();
        root.fill(&WHITE).map_err(e)?;
        let (top, bottom) = root.split_vertically(320);
        let n = p.original.len() as f64;
        let range = |it: &mut dyn Iterator<Item = f32>| {
            let (lo, hi) = it.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), t| {
                (a.min(f64::from(t)), b.max(f64::from(t)))
            });
            if !lo.is_finite() {
                return -1.0..1.0;
            }
            let pad = ((hi - lo) * 0.05).max(1e-12);
            (lo - pad)..(hi + pad)
        };
        let yr = range(&mut p.original.iter().chain(&p.dequantized).copied());
        let mut c = ChartBuilder::on(&top)
            .caption(
                format!(
                    "{} ({}): original vs dequantized, first {} of {} values",
                    p.error.tensor,
                    p.layer,
                    p.original.len(),
                    p.shape.iter().product::<usize>()
                ),
                ("sans-serif", 15),
            )
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(70)
            .build_cartesian_2d(-0.5..(n - 0.5).max(0.5), yr)
            .map_err(e)?;
        c.configure_mesh().x_desc("index").draw().map_err(e)?;
        c.draw_series(LineSeries::new(
            p.original
                .iter()
                .enumerate()
                .map(|(i, &v)| (i as f64, f64::from(v))),
            &BLUE,
        ))
        .map_err(e)?
        .label("original")
        .legend(|(a, b)| PathElement::new(vec![(a, b), (a + 20, b)], BLUE));
        c.draw_series(
            p.dequantized
                .iter()
                .enumerate()
                .map(|(i, &v)| Circle::new((i as f64, f64::from(v)), 2, RED.filled())),
        )
        .map_err(e)?
        .label("dequantized")
        .legend(|(a, b)| Circle::new((a + 10, b), 3, RED.filled()));
        c.configure_series_labels()
            .border_style(BLACK)
            .background_style(WHITE.mix(0.9))
            .draw()
            .map_err(e)?;
        let err: Vec<f32> = p
            .dequantized
            .iter()
            .zip(&p.original)
            .map(|(d, o)| d - o)
            .collect();
        let er = range(&mut err.iter().copied().chain([0.0]));
        let mut c = ChartBuilder::on(&bottom)
            .caption(
                format!(
                    "error per element (dequantized − original); tensor SQNR {:.1} dB, max |error| {:.3e}",
                    p.error.total.sqnr_db, p.error.total.max_abs
                ),
                ("sans-serif", 15),
            )
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(70)
            .build_cartesian_2d(-0.5..(n - 0.5).max(0.5), er)
            .map_err(e)?;
        c.configure_mesh().x_desc("index").draw().map_err(e)?;
        c.draw_series(LineSeries::new(
            err.iter()
                .enumerate()
                .map(|(i, &v)| (i as f64, f64::from(v))),
            &BLACK,
        ))
        .map_err(e)?;
        root.present().map_err(e)?;
    }
    Ok(svg)
}

/// A figure of the page.
pub struct Figure {
    /// `data-chart` name (unique).
    pub id: String,
    /// Caption under the chart.
    pub caption: String,
    /// The SVG document.
    pub svg: String,
}

/// The whole page: a summary, the ranking table, then the figures.
pub fn page(title: &str, summary: &[String], table: &str, figures: &[Figure]) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"generator\" content=\"quantkit analyze\">\
<title>{t}</title><style>\
body{{font-family:sans-serif;margin:1.5em;color:#222;max-width:1400px}}\
table{{border-collapse:collapse;font-size:13px}}td,th{{padding:2px 8px;border-bottom:1px solid #ddd;text-align:right}}\
td:nth-child(2),td:nth-child(3),th:nth-child(2),th:nth-child(3){{text-align:left}}\
figure{{margin:1em 0;display:inline-block;vertical-align:top}}figcaption{{font-size:12px;max-width:760px}}\
.hist figure{{margin:.3em}}svg{{display:block}}\
</style></head><body>\n<h1>{t}</h1>\n",
        t = esc(title)
    );
    for s in summary {
        let _ = writeln!(h, "<p>{}</p>", esc(s));
    }
    h.push_str(table);
    let mut in_hist = false;
    for f in figures {
        let hist = f.id.starts_with("hist-");
        if hist && !in_hist {
            h.push_str("<h2>Activation histograms, clip ranges and quantization grids</h2>\n<div class=\"hist\">\n");
        }
        if !hist && in_hist {
            h.push_str("</div>\n");
        }
        in_hist = hist;
        let _ = writeln!(
            h,
            "<figure data-chart=\"{}\">{}<figcaption>{}</figcaption></figure>",
            esc(&f.id),
            strip_xml_decl(&f.svg),
            esc(&f.caption)
        );
    }
    if in_hist {
        h.push_str("</div>\n");
    }
    h.push_str("</body></html>\n");
    h
}

fn strip_xml_decl(svg: &str) -> &str {
    match svg.find("<svg") {
        Some(i) => &svg[i..],
        None => svg,
    }
}
