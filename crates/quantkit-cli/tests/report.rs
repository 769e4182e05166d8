//! `quantkit analyze -o DIR`: the HTML report opens in headless Chromium and every chart is
//! drawn. The page is loaded with a probe script appended (the report itself has no
//! scripts): for each `<figure data-chart>` it measures the SVG's laid-out size, counts the
//! SVG shapes with a non-empty bounding box, and rasterises the SVG into a canvas to count
//! non-white and coloured pixels; `--dump-dom` prints the result.
//!
//! Chromium is Debian's `chromium` package (`.ci/run` installs it). Under `CI=true` a missing
//! browser fails the test; elsewhere the test says why it skips.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

fn find_chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        for dir in std::env::split_paths(&path) {
            let p = dir.join(name);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    None
}

const PROBE: &str = r#"<script>
window.addEventListener('load', async () => {
  const out = {};
  for (const fig of document.querySelectorAll('figure[data-chart]')) {
    const id = fig.getAttribute('data-chart');
    const svg = fig.querySelector('svg');
    const r = { width: 0, height: 0, shapes: 0, rects: 0, ink: 0, colour: 0, error: null };
    out[id] = r;
    if (!svg) { r.error = 'no svg'; continue; }
    const box = svg.getBoundingClientRect();
    r.width = box.width; r.height = box.height;
    for (const el of svg.querySelectorAll('rect,path,polyline,line,circle,text')) {
      const b = el.getBBox();
      if (b.width > 0 || b.height > 0) {
        r.shapes++;
        if (el.tagName === 'rect' && b.width > 0 && b.height > 0) r.rects++;
      }
    }
    try {
      const src = new XMLSerializer().serializeToString(svg);
      const img = new Image();
      img.src = 'data:image/svg+xml;charset=utf-8,' + encodeURIComponent(src);
      await img.decode();
      const c = document.createElement('canvas');
      c.width = Math.ceil(box.width); c.height = Math.ceil(box.height);
      const ctx = c.getContext('2d');
      ctx.fillStyle = '#fff'; ctx.fillRect(0, 0, c.width, c.height);
      ctx.drawImage(img, 0, 0, c.width, c.height);
      const d = ctx.getImageData(0, 0, c.width, c.height).data;
      for (let i = 0; i < d.length; i += 4) {
        const [R, G, B] = [d[i], d[i + 1], d[i + 2]];
        if (R < 245 || G < 245 || B < 245) r.ink++;
        if (Math.max(R, G, B) - Math.min(R, G, B) > 60) r.colour++;
      }
    } catch (e) { r.error = String(e); }
  }
  const pre = document.createElement('pre');
  pre.id = 'qk-result';
  // The markers are built here so that the script's own text does not contain them.
  pre.textContent = 'QK' + 'RESULT' + btoa(JSON.stringify(out)) + 'QK' + 'END';
  document.body.appendChild(pre);
});
</script>"#;

fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("bad base64 {c}"),
        }
    };
    let bytes: Vec<u8> = s.bytes().filter(|&c| c != b'=').collect();
    let mut out = Vec::new();
    for chunk in bytes.chunks(4) {
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= val(c) << (18 - 6 * i);
        }
        for i in 0..chunk.len().saturating_sub(1) {
            out.push((n >> (16 - 8 * i)) as u8);
        }
    }
    out
}

/// Runs headless Chromium on `page` and returns the probe's JSON.
fn probe(chromium: &Path, page: &Path, profile: &Path) -> serde_json::Value {
    // The DOM goes to a file: a pipe read only after exit would fill and block chromium.
    let dom_path = profile.with_extension("dom.html");
    let dom_file = std::fs::File::create(&dom_path).expect("create the DOM file");
    let mut child = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--virtual-time-budget=20000",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("file://{}", page.display()))
        .stdout(dom_file)
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromium");
    let start = Instant::now();
    while child.try_wait().expect("wait chromium").is_none() {
        if start.elapsed() > Duration::from_secs(180) {
            child.kill().ok();
            child.wait().ok();
            panic!("chromium did not finish in 180 s");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let dom = std::fs::read_to_string(&dom_path).expect("read the DOM");
    let a = dom
        .find("QKRESULT")
        .unwrap_or_else(|| panic!("the probe did not run; chromium printed:\n{dom:.2000}"));
    let b = dom[a..].find("QKEND").expect("probe end") + a;
    serde_json::from_slice(&base64_decode(&dom[a + 8..b])).expect("probe JSON")
}

#[test]
fn html_report_opens_in_chromium_with_every_chart_drawn() {
    let Some(chromium) = find_chromium() else {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("CI=true but no chromium in PATH (.ci/run installs Debian's `chromium`)");
        }
        eprintln!(
            "SKIPPED html_report_opens_in_chromium_with_every_chart_drawn: no chromium in PATH \
             (apt-get install chromium)"
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("report");
    let status = Command::new(env!("CARGO_BIN_EXE_quantkit"))
        .args(["analyze"])
        .arg(repo().join("models/lenet.onnx"))
        .arg("--calib")
        .arg(repo().join("data/fashion-mnist-sample"))
        .args([
            "--calib-samples",
            "64",
            "--samples",
            "32",
            "--top",
            "3",
            "-o",
        ])
        .arg(&out)
        .output()
        .expect("run quantkit");
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    // Self-contained: no scripts, no external resources.
    assert!(!html.contains("<script"), "the report has a script");
    for bad in ["http://", "https://", "src=\"", "<link"] {
        assert!(
            !html.replace("http://www.w3.org/", "").contains(bad),
            "external reference `{bad}` in the report"
        );
    }

    let acts = json["details"]["activations"].as_array().unwrap();
    let layers = json["layers"].as_array().unwrap();
    assert!(!acts.is_empty() && !layers.is_empty());
    let mut expected: Vec<String> = [
        "sqnr",
        "ranking",
        "bits-weights",
        "bits-activations",
        "picture",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    expected.extend((0..acts.len()).map(|i| format!("hist-{i}")));

    let page = dir.path().join("probe.html");
    std::fs::write(&page, html.replace("</body>", &format!("{PROBE}</body>"))).unwrap();
    let profile = dir.path().join("profile");
    std::fs::create_dir(&profile).unwrap();
    let result = probe(&chromium, &page, &profile);
    let charts = result.as_object().unwrap();
    assert_eq!(
        charts.len(),
        expected.len(),
        "charts found: {:?}",
        charts.keys().collect::<Vec<_>>()
    );
    for id in &expected {
        let r = &result[id];
        assert!(r.is_object(), "chart `{id}` missing");
        assert!(r["error"].is_null(), "chart `{id}`: {}", r["error"]);
        let (w, h) = (r["width"].as_f64().unwrap(), r["height"].as_f64().unwrap());
        assert!(w >= 200.0 && h >= 150.0, "chart `{id}` laid out {w}×{h}");
        let ink = r["ink"].as_f64().unwrap();
        // Axes, labels and data: well above a blank page, below a solid fill.
        assert!(
            ink > 0.01 * w * h && ink < 0.9 * w * h,
            "chart `{id}`: {ink} drawn pixels of {}",
            w * h
        );
        assert!(
            r["colour"].as_f64().unwrap() > 100.0,
            "chart `{id}`: no coloured data drawn ({})",
            r["colour"]
        );
        assert!(r["shapes"].as_u64().unwrap() > 10, "chart `{id}`: {r}");
    }
    // One bar per layer and series: local and propagated per layer, a recovered bar per
    // layer with a sensitivity.
    let sqnr_bars = layers
        .iter()
        .map(|l| l["local"].is_object() as u64 + l["propagated"].is_object() as u64)
        .sum::<u64>();
    assert!(result["sqnr"]["rects"].as_u64().unwrap() >= sqnr_bars);
    let ranked = layers
        .iter()
        .filter(|l| l["sensitivity"].is_object())
        .count() as u64;
    assert!(ranked == 3 && result["ranking"]["rects"].as_u64().unwrap() >= ranked);
    // A histogram has its bars (every non-empty bin).
    for (i, a) in acts.iter().enumerate() {
        let nonzero = a["bins"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|b| b.as_u64().unwrap() > 0)
            .count() as u64;
        assert!(
            result[format!("hist-{i}")]["rects"].as_u64().unwrap() >= nonzero,
            "hist-{i}"
        );
    }
}

#[test]
fn report_json_holds_histograms_and_bit_sweeps() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r");
    let status = Command::new(env!("CARGO_BIN_EXE_quantkit"))
        .args(["analyze"])
        .arg(repo().join("models/lenet.onnx"))
        .arg("--calib")
        .arg(repo().join("data/fashion-mnist-sample"))
        .args([
            "--calib-samples",
            "64",
            "--samples",
            "32",
            "--top",
            "0",
            "--method",
            "percentile=99",
            "--sweep-samples",
            "32",
            "--json",
            "-o",
        ])
        .arg(&out)
        .output()
        .expect("run quantkit");
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let d = &v["details"];
    let mut some_clipped = false;
    for a in d["activations"].as_array().unwrap() {
        let bins: u64 = a["bins"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b.as_u64().unwrap())
            .sum();
        let n = a["elements"].as_u64().unwrap();
        assert_eq!(bins, n, "{}: every element in one bin", a["tensor"]);
        let clipped = a["clipped_below"].as_u64().unwrap() + a["clipped_above"].as_u64().unwrap();
        let frac = a["clipped_fraction"].as_f64().unwrap();
        assert!((frac - clipped as f64 / n as f64).abs() < 1e-12);
        some_clipped |= clipped > 0;
        // The clip range is what the scale and zero point represent.
        let (s, z) = (
            a["scale"].as_f64().unwrap(),
            a["zero_point"].as_f64().unwrap(),
        );
        let clip = a["clip"].as_array().unwrap();
        assert!((clip[0].as_f64().unwrap() - s * (0.0 - z)).abs() < 1e-9);
        assert!((clip[1].as_f64().unwrap() - s * (255.0 - z)).abs() < 1e-9);
        // Fewer bits, more error: SQNR rises with the bit width (same clip range).
        let sq: Vec<f64> = a["sqnr_by_bits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p[1].as_f64().unwrap_or(f64::INFINITY))
            .collect();
        assert_eq!(sq.len(), 7);
        assert!(
            sq.windows(2).all(|w| w[1] >= w[0] - 0.5),
            "{}: {sq:?}",
            a["tensor"]
        );
    }
    // percentile=99 clips 1% of the calibration data at each end: some clipping shows.
    assert!(some_clipped);
    // The whole model at 8-bit weights is the analysis' own quantized model (the sweep ran
    // on all 32 samples here).
    assert_eq!(d["sweep_samples"], 32);
    let pts = d["weight_bits"].as_array().unwrap();
    assert_eq!(pts.len(), 7);
    let eight = &pts[6];
    assert_eq!(eight["bits"], 8);
    let a = eight["output"]["sqnr_db"].as_f64().unwrap();
    let b = v["output"]["sqnr_db"].as_f64().unwrap();
    assert!((a - b).abs() < 1e-9, "{a} vs {b}");
    // 2-bit weights hurt the output more than 8-bit ones.
    assert!(pts[0]["output"]["sqnr_db"].as_f64().unwrap() < a - 10.0);
    // The error picture's values are the weight's, dequantized within half a step.
    let p = &v["weight_picture"];
    let o = p["original"].as_array().unwrap();
    let q = p["dequantized"].as_array().unwrap();
    assert_eq!(o.len(), q.len());
    assert!(!o.is_empty());
    let max = p["error"]["total"]["max_abs"].as_f64().unwrap();
    for (x, y) in o.iter().zip(q) {
        assert!((x.as_f64().unwrap() - y.as_f64().unwrap()).abs() <= max + 1e-7);
    }
}
