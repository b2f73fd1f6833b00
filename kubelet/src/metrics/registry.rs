//! A small Prometheus registry: counters, gauges and histograms with fixed buckets, each a
//! family of series by label values, written in the text exposition format 0.0.4.
//!
//! Our own rather than a crate: the kubelet needs three metric kinds and one output format,
//! and this is less code than adapting a general client to the Go kubelet's conventions
//! (stability prefixes in HELP, families sorted by name, empty vectors not shown).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The Go kubelet's stability levels; they prefix HELP texts as `[ALPHA] `.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stability {
    /// `[ALPHA] `.
    Alpha,
    /// `[BETA] `.
    Beta,
    /// No prefix (process metrics, which come from the Prometheus client in Go).
    None,
}

impl Stability {
    fn prefix(self) -> &'static str {
        match self {
            Stability::Alpha => "[ALPHA] ",
            Stability::Beta => "[BETA] ",
            Stability::None => "",
        }
    }
}

/// What a family is called and says about itself.
#[derive(Clone, Debug)]
pub struct Desc {
    /// Full metric name (`kubelet_running_pods`).
    pub name: &'static str,
    /// HELP text, without the stability prefix.
    pub help: &'static str,
    /// Stability level.
    pub stability: Stability,
    /// Label names, in order; values are given in the same order.
    pub labels: &'static [&'static str],
}

impl Desc {
    fn header(&self, out: &mut String, kind: &str) {
        let _ = writeln!(
            out,
            "# HELP {} {}{}",
            self.name,
            self.stability.prefix(),
            escape_help(self.help)
        );
        let _ = writeln!(out, "# TYPE {} {kind}", self.name);
    }
}

/// An f64 updated without locks.
#[derive(Debug, Default)]
pub struct AtomicF64(AtomicU64);

impl AtomicF64 {
    /// Adds `v`.
    pub fn add(&self, v: f64) {
        let mut cur = self.0.load(Ordering::Relaxed);
        loop {
            let next = (f64::from_bits(cur) + v).to_bits();
            match self
                .0
                .compare_exchange_weak(cur, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(actual) => cur = actual,
            }
        }
    }

    /// Sets `v`.
    pub fn set(&self, v: f64) {
        self.0.store(v.to_bits(), Ordering::Relaxed);
    }

    /// The value.
    pub fn get(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::Relaxed))
    }
}

/// One histogram series: per-bucket counts (not cumulative), sum and count.
#[derive(Debug)]
pub struct HistogramSeries {
    bounds: Arc<[f64]>,
    counts: Box<[AtomicU64]>,
    sum: AtomicF64,
    count: AtomicU64,
}

impl HistogramSeries {
    fn new(bounds: Arc<[f64]>) -> Self {
        let counts = (0..bounds.len()).map(|_| AtomicU64::new(0)).collect();
        Self {
            bounds,
            counts,
            sum: AtomicF64::default(),
            count: AtomicU64::new(0),
        }
    }

    /// Records one observation.
    pub fn observe(&self, v: f64) {
        // Upper bounds are inclusive: the first bucket whose bound is >= v.
        let i = self.bounds.partition_point(|b| *b < v);
        if let Some(c) = self.counts.get(i) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        self.sum.add(v);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Sum of the observations.
    pub fn sum(&self) -> f64 {
        self.sum.get()
    }

    /// Buckets, sum and count read in one pass, so a scrape racing an
    /// observation still shows `_count` equal to the `+Inf` bucket.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut acc = 0;
        let mut buckets: Vec<(f64, u64)> = self
            .bounds
            .iter()
            .zip(self.counts.iter())
            .map(|(b, c)| {
                acc += c.load(Ordering::Relaxed);
                (*b, acc)
            })
            .collect();
        // Read after the buckets, so +Inf is never below the last bucket.
        let count = self.count().max(acc);
        buckets.push((f64::INFINITY, count));
        HistogramSnapshot {
            buckets,
            sum: self.sum(),
            count,
        }
    }
}

/// One consistent reading of a histogram series.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramSnapshot {
    /// Cumulative counts per upper bound, `+Inf` last.
    pub buckets: Vec<(f64, u64)>,
    /// Sum of the observations.
    pub sum: f64,
    /// Observations; always the `+Inf` bucket's count.
    pub count: u64,
}

/// One series with its label values.
type Labelled<T> = (Vec<String>, Arc<T>);

/// Series of one family by label values.
#[derive(Debug)]
struct Series<T> {
    /// Joined label values → (values, series).
    map: Mutex<HashMap<String, Labelled<T>>>,
}

impl<T> Default for Series<T> {
    fn default() -> Self {
        Self {
            map: Mutex::new(HashMap::new()),
        }
    }
}

/// The map key of a list of label values.
fn series_key(values: &[&str]) -> String {
    // A byte that cannot appear in UTF-8 text keeps distinct value lists distinct.
    values.join("\u{0}")
}

impl<T> Series<T> {
    fn get_or_insert(&self, values: &[&str], make: impl FnOnce() -> T) -> Arc<T> {
        let key = series_key(values);
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, s)) = map.get(&key) {
            return s.clone();
        }
        let s = Arc::new(make());
        map.insert(
            key,
            (values.iter().map(|v| v.to_string()).collect(), s.clone()),
        );
        s
    }

    /// The series with these label values, if there is one.
    #[cfg(test)]
    fn find(&self, values: &[&str]) -> Option<Arc<T>> {
        let map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        map.get(&series_key(values)).map(|(_, s)| s.clone())
    }

    fn remove(&self, values: &[&str]) -> bool {
        self.map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&series_key(values))
            .is_some()
    }

    /// Every series, sorted by label values (stable output).
    fn snapshot(&self) -> Vec<Labelled<T>> {
        let map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let mut all: Vec<_> = map.values().cloned().collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// Something the registry can write out.
pub trait Collector: Send + Sync {
    /// The family's name (families are written sorted by it).
    fn name(&self) -> &'static str;
    /// Appends the family in the text format; nothing when it has no series.
    fn write(&self, out: &mut String);
}

/// A family of counters.
#[derive(Debug)]
pub struct CounterVec {
    desc: Desc,
    series: Series<AtomicF64>,
}

impl CounterVec {
    /// A family with no series yet.
    pub fn new(desc: Desc) -> Self {
        Self {
            desc,
            series: Series::default(),
        }
    }

    /// Adds one to the series with these label values.
    pub fn inc(&self, values: &[&str]) {
        self.add(values, 1.0);
    }

    /// Adds `v` (>= 0) to the series with these label values.
    pub fn add(&self, values: &[&str], v: f64) {
        debug_assert_eq!(values.len(), self.desc.labels.len(), "{}", self.desc.name);
        if v >= 0.0 {
            self.series.get_or_insert(values, AtomicF64::default).add(v);
        }
    }

    /// The value of a series (0 when absent).
    #[cfg(test)]
    pub fn get(&self, values: &[&str]) -> f64 {
        self.series.find(values).map_or(0.0, |s| s.get())
    }

    /// Drops a series; whether it existed.
    pub fn remove(&self, values: &[&str]) -> bool {
        self.series.remove(values)
    }

    /// How many series there are.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.series.len()
    }
}

impl Collector for CounterVec {
    fn name(&self) -> &'static str {
        self.desc.name
    }

    fn write(&self, out: &mut String) {
        let all = self.series.snapshot();
        write_scalars(
            &self.desc,
            "counter",
            all.iter().map(|(v, s)| (v, s.get())),
            out,
        );
    }
}

/// A family of gauges.
#[derive(Debug)]
pub struct GaugeVec {
    desc: Desc,
    series: Series<AtomicF64>,
}

impl GaugeVec {
    /// A family with no series yet.
    pub fn new(desc: Desc) -> Self {
        Self {
            desc,
            series: Series::default(),
        }
    }

    /// Sets the series with these label values.
    pub fn set(&self, values: &[&str], v: f64) {
        debug_assert_eq!(values.len(), self.desc.labels.len(), "{}", self.desc.name);
        self.series.get_or_insert(values, AtomicF64::default).set(v);
    }

    /// The value of a series (0 when absent).
    #[cfg(test)]
    pub fn get(&self, values: &[&str]) -> f64 {
        self.series.find(values).map_or(0.0, |s| s.get())
    }
}

impl Collector for GaugeVec {
    fn name(&self) -> &'static str {
        self.desc.name
    }

    fn write(&self, out: &mut String) {
        let all = self.series.snapshot();
        write_scalars(
            &self.desc,
            "gauge",
            all.iter().map(|(v, s)| (v, s.get())),
            out,
        );
    }
}

/// Writes a counter or gauge family: a family with labels and no series is left out, as Go
/// does; one without labels shows 0 until set.
fn write_scalars<'a>(
    desc: &Desc,
    kind: &str,
    series: impl ExactSizeIterator<Item = (&'a Vec<String>, f64)>,
    out: &mut String,
) {
    if series.len() == 0 && !desc.labels.is_empty() {
        return;
    }
    let empty = series.len() == 0;
    desc.header(out, kind);
    if desc.labels.is_empty() && empty {
        let _ = writeln!(out, "{} 0", desc.name);
    }
    for (values, v) in series {
        sample(out, desc.name, "", desc.labels, values, None, v);
    }
}

/// A family of histograms sharing one set of bucket bounds.
#[derive(Debug)]
pub struct HistogramVec {
    desc: Desc,
    bounds: Arc<[f64]>,
    series: Series<HistogramSeries>,
}

impl HistogramVec {
    /// A family with these upper bounds (sorted, finite; `+Inf` is implied).
    pub fn new(desc: Desc, bounds: &[f64]) -> Self {
        let mut b: Vec<f64> = bounds.iter().copied().filter(|b| b.is_finite()).collect();
        b.sort_by(f64::total_cmp);
        b.dedup();
        Self {
            desc,
            bounds: b.into(),
            series: Series::default(),
        }
    }

    /// Records `v` in the series with these label values.
    pub fn observe(&self, values: &[&str], v: f64) {
        self.series_for(values).observe(v);
    }

    /// The series with these label values (made when absent).
    pub fn series_for(&self, values: &[&str]) -> Arc<HistogramSeries> {
        debug_assert_eq!(values.len(), self.desc.labels.len(), "{}", self.desc.name);
        let bounds = self.bounds.clone();
        self.series
            .get_or_insert(values, || HistogramSeries::new(bounds))
    }

    /// Drops a series; whether it existed.
    pub fn remove(&self, values: &[&str]) -> bool {
        self.series.remove(values)
    }
}

impl Collector for HistogramVec {
    fn name(&self) -> &'static str {
        self.desc.name
    }

    fn write(&self, out: &mut String) {
        let mut all = self.series.snapshot();
        if all.is_empty() {
            if !self.desc.labels.is_empty() {
                return;
            }
            // A histogram without labels always exists, as Go's plain histograms do.
            all.push((
                Vec::new(),
                Arc::new(HistogramSeries::new(self.bounds.clone())),
            ));
        }
        self.desc.header(out, "histogram");
        let name = self.desc.name;
        let labels = self.desc.labels;
        for (values, s) in all {
            let snap = s.snapshot();
            for (le, n) in snap.buckets {
                let le = format_float(le);
                sample(out, name, "_bucket", labels, &values, Some(&le), n as f64);
            }
            sample(out, name, "_sum", labels, &values, None, snap.sum);
            sample(
                out,
                name,
                "_count",
                labels,
                &values,
                None,
                snap.count as f64,
            );
        }
    }
}

/// A family computed when scraped (process metrics, states read from elsewhere).
pub struct Computed {
    desc: Desc,
    kind: &'static str,
    read: Box<dyn Fn() -> Vec<(Vec<String>, f64)> + Send + Sync>,
}

impl Computed {
    /// A family of `kind` (`gauge` or `counter`) whose series `read` returns.
    pub fn new(
        desc: Desc,
        kind: &'static str,
        read: impl Fn() -> Vec<(Vec<String>, f64)> + Send + Sync + 'static,
    ) -> Self {
        Self {
            desc,
            kind,
            read: Box::new(read),
        }
    }
}

impl Collector for Computed {
    fn name(&self) -> &'static str {
        self.desc.name
    }

    fn write(&self, out: &mut String) {
        let all = (self.read)();
        if all.is_empty() {
            return;
        }
        self.desc.header(out, self.kind);
        for (values, v) in all {
            sample(out, self.desc.name, "", self.desc.labels, &values, None, v);
        }
    }
}

/// Writes every collector, sorted by family name (as Go's registry gathers them).
pub fn render(collectors: &[&dyn Collector]) -> String {
    let mut sorted: Vec<&dyn Collector> = collectors.to_vec();
    sorted.sort_by_key(|c| c.name());
    let mut out = String::with_capacity(16 * 1024);
    for c in sorted {
        c.write(&mut out);
    }
    out
}

/// One sample line: `name{labels[,le]} value`.
fn sample(
    out: &mut String,
    name: &str,
    suffix: &str,
    labels: &[&str],
    values: &[String],
    le: Option<&str>,
    v: f64,
) {
    out.push_str(name);
    out.push_str(suffix);
    let pairs = labels
        .iter()
        .zip(values.iter().map(String::as_str))
        .map(|(k, v)| (*k, v))
        .chain(le.map(|le| ("le", le)));
    let mut first = true;
    for (k, v) in pairs {
        out.push(if first { '{' } else { ',' });
        first = false;
        out.push_str(k);
        out.push_str("=\"");
        escape_label_into(out, v);
        out.push('"');
    }
    if !first {
        out.push('}');
    }
    out.push(' ');
    out.push_str(&format_float(v));
    out.push('\n');
}

/// A sample value as the text format writes it: `+Inf`, `-Inf`, `NaN`, integers without a
/// fraction, others in the shortest form that reads back exactly.
pub fn format_float(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else if v.abs() >= 1e15 || (v != 0.0 && v.abs() < 1e-6) {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

/// HELP text escaping: backslash and line feed.
fn escape_help(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\n', "\\n")
}

/// Label value escaping: backslash, double quote and line feed.
fn escape_label_into(out: &mut String, s: &str) {
    for ch in s.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Go's `prometheus.DefBuckets`.
pub const DEF_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// `count` bounds starting at `start`, each `factor` times the one before (Go's
/// `ExponentialBuckets`).
pub fn exponential_buckets(start: f64, factor: f64, count: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(count);
    let mut b = start;
    for _ in 0..count {
        out.push(b);
        b *= factor;
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn desc(name: &'static str, labels: &'static [&'static str]) -> Desc {
        Desc {
            name,
            help: "Some help.\nSecond \\ line.",
            stability: Stability::Alpha,
            labels,
        }
    }

    #[test]
    fn counters_render_sorted_with_escaped_labels() {
        let c = CounterVec::new(desc("x_total", &["op", "who"]));
        c.inc(&["b", "plain"]);
        c.add(&["a", "q\"uo\\te\nnl"], 2.5);
        c.inc(&["b", "plain"]);
        c.add(&["b", "plain"], -1.0); // counters never go down
        let text = render(&[&c]);
        assert_eq!(
            text,
            "# HELP x_total [ALPHA] Some help.\\nSecond \\\\ line.\n\
             # TYPE x_total counter\n\
             x_total{op=\"a\",who=\"q\\\"uo\\\\te\\nnl\"} 2.5\n\
             x_total{op=\"b\",who=\"plain\"} 2\n"
        );
        assert_eq!(c.get(&["b", "plain"]), 2.0);
        assert!(c.remove(&["b", "plain"]));
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn empty_vectors_are_not_written_but_plain_families_are() {
        let v = CounterVec::new(desc("v_total", &["op"]));
        let g = GaugeVec::new(desc("g", &[]));
        let h = HistogramVec::new(desc("h_seconds", &[]), &[1.0]);
        let hv = HistogramVec::new(desc("hv_seconds", &["op"]), &[1.0]);
        let text = render(&[&v, &g, &h, &hv]);
        assert!(!text.contains("v_total"), "{text}");
        assert!(!text.contains("hv_seconds"), "{text}");
        assert!(text.contains("# TYPE g gauge\ng 0\n"), "{text}");
        assert!(
            text.contains("h_seconds_bucket{le=\"1\"} 0\nh_seconds_bucket{le=\"+Inf\"} 0\nh_seconds_sum 0\nh_seconds_count 0\n"),
            "{text}"
        );
        // Sorted by name.
        assert!(text.find("# HELP g ").unwrap() < text.find("# HELP h_seconds ").unwrap());
    }

    #[test]
    fn histogram_buckets_are_inclusive_upper_bounds_and_cumulative() {
        let h = HistogramVec::new(desc("d_seconds", &["op"]), &[0.5, 0.1, 1.0, f64::INFINITY]);
        for v in [0.05, 0.1, 0.2, 0.5, 0.7, 3.0] {
            h.observe(&["run"], v);
        }
        let s = h.series_for(&["run"]);
        assert_eq!(
            s.snapshot().buckets,
            vec![(0.1, 2), (0.5, 4), (1.0, 5), (f64::INFINITY, 6)]
        );
        assert_eq!(s.count(), 6);
        assert!((s.sum() - 4.55).abs() < 1e-9);
        let text = render(&[&h]);
        let want = "# TYPE d_seconds histogram\n\
             d_seconds_bucket{op=\"run\",le=\"0.1\"} 2\n\
             d_seconds_bucket{op=\"run\",le=\"0.5\"} 4\n\
             d_seconds_bucket{op=\"run\",le=\"1\"} 5\n\
             d_seconds_bucket{op=\"run\",le=\"+Inf\"} 6\n\
             d_seconds_sum{op=\"run\"} 4.55\n\
             d_seconds_count{op=\"run\"} 6\n";
        assert!(text.contains(want), "{text}");
    }

    #[test]
    fn go_bucket_layouts() {
        let b = exponential_buckets(0.005, 2.5, 14);
        assert_eq!(b.len(), 14);
        assert_eq!(format_float(b[0]), "0.005");
        assert_eq!(format_float(b[1]), "0.0125");
        assert_eq!(format_float(b[6]), "1.220703125");
        assert_eq!(format_float(b[13]), "745.0580596923828");
        assert_eq!(DEF_BUCKETS.len(), 11);
    }

    #[test]
    fn floats_in_text_format() {
        assert_eq!(format_float(3.0), "3");
        assert_eq!(format_float(-2.0), "-2");
        assert_eq!(format_float(0.25), "0.25");
        assert_eq!(format_float(f64::INFINITY), "+Inf");
        assert_eq!(format_float(f64::NEG_INFINITY), "-Inf");
        assert_eq!(format_float(f64::NAN), "NaN");
        assert_eq!(format_float(1.5e20), "1.5e20");
        assert_eq!(format_float(2e-9), "2e-9");
        for v in [1.5e20, 2e-9, 0.1, 1234.5678] {
            assert_eq!(format_float(v).parse::<f64>().unwrap(), v);
        }
    }

    #[test]
    fn computed_families_and_gauges() {
        let g = GaugeVec::new(desc("states", &["state"]));
        g.set(&["running"], 3.0);
        g.set(&["running"], 2.0);
        assert_eq!(g.get(&["running"]), 2.0);
        let c = Computed::new(
            Desc {
                name: "process_x",
                help: "X.",
                stability: Stability::None,
                labels: &[],
            },
            "gauge",
            || vec![(Vec::new(), 7.0)],
        );
        let text = render(&[&g, &c]);
        assert!(
            text.contains("# HELP process_x X.\n# TYPE process_x gauge\nprocess_x 7\n"),
            "{text}"
        );
        assert!(text.contains("states{state=\"running\"} 2\n"), "{text}");
    }

    #[test]
    fn concurrent_observations_all_count() {
        let h = Arc::new(HistogramVec::new(desc("c_seconds", &[]), DEF_BUCKETS));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let h = h.clone();
                std::thread::spawn(move || {
                    for i in 0..1000 {
                        h.observe(&[], f64::from(i % 7));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let s = h.series_for(&[]);
        assert_eq!(s.count(), 4000);
        assert_eq!(s.snapshot().buckets.last().map(|x| x.1), Some(4000));
    }

    #[test]
    fn a_scrape_racing_observations_shows_count_equal_to_the_inf_bucket() {
        let h = Arc::new(HistogramVec::new(desc("r_seconds", &[]), DEF_BUCKETS));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let (h, stop) = (h.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    h.observe(&[], 0.01);
                }
            })
        };
        for _ in 0..2000 {
            let text = render(&[&*h]);
            let value = |prefix: &str| {
                text.lines()
                    .find_map(|l| l.strip_prefix(prefix))
                    .and_then(|v| v.trim().parse::<f64>().ok())
                    .unwrap()
            };
            assert_eq!(
                value("r_seconds_bucket{le=\"+Inf\"}"),
                value("r_seconds_count"),
                "{text}"
            );
        }
        stop.store(true, Ordering::Relaxed);
        writer.join().unwrap();
    }
}
