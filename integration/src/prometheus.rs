//! A strict parser of the Prometheus text exposition format 0.0.4, for tests that read a
//! `/metrics` endpoint: every line must be a well-formed `# HELP`, `# TYPE`, comment or
//! sample; a family's HELP and TYPE come before its samples and at most once; samples of one
//! family are contiguous; names and label names are valid; label values are properly
//! escaped; a histogram has `_bucket` series with `le` (ending in `+Inf`, cumulative),
//! `_sum` and `_count`, and its `+Inf` bucket equals its count.

use std::collections::{BTreeMap, BTreeSet};

/// One sample: `name{labels} value`.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// The sample's name (for histograms, with its `_bucket`/`_sum`/`_count` suffix).
    pub name: String,
    /// Label name → value, unescaped.
    pub labels: BTreeMap<String, String>,
    /// The value.
    pub value: f64,
}

/// One metric family.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Family {
    /// The family name.
    pub name: String,
    /// `counter`, `gauge`, `histogram`, `summary` or `untyped`.
    pub kind: String,
    /// The HELP text, unescaped.
    pub help: String,
    /// Its samples, in order.
    pub samples: Vec<Sample>,
}

impl Family {
    /// The samples whose labels include every `(name, value)` pair of `want`.
    pub fn with_labels(&self, want: &[(&str, &str)]) -> Vec<&Sample> {
        self.samples
            .iter()
            .filter(|s| {
                want.iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .collect()
    }

    /// The distinct values label `label` takes.
    pub fn label_values(&self, label: &str) -> BTreeSet<String> {
        self.samples
            .iter()
            .filter_map(|s| s.labels.get(label).cloned())
            .collect()
    }
}

/// A parsed exposition: families by name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Exposition {
    /// Families by name.
    pub families: BTreeMap<String, Family>,
}

impl Exposition {
    /// Family `name`.
    pub fn family(&self, name: &str) -> Option<&Family> {
        self.families.get(name)
    }
}

/// Parses `text`; the error names the line (1-based) and what is wrong with it.
pub fn parse(text: &str) -> Result<Exposition, String> {
    let mut out = Exposition::default();
    // Families whose samples ended (another family's sample came after): no more of theirs.
    let mut closed: BTreeSet<String> = BTreeSet::new();
    let mut current: Option<String> = None;
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let err = |what: String| format!("line {n}: {what}: {line:?}");
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix('#') {
            let rest = rest.strip_prefix(' ').unwrap_or(rest);
            let mut parts = rest.splitn(3, ' ');
            let keyword = parts.next().unwrap_or_default();
            if keyword != "HELP" && keyword != "TYPE" {
                continue; // a plain comment
            }
            let name = parts.next().ok_or_else(|| err("no metric name".into()))?;
            check_metric_name(name).map_err(err)?;
            let arg = parts.next().unwrap_or_default();
            if closed.contains(name)
                || current
                    .as_deref()
                    .is_some_and(|c| c == name && has_samples(&out, name))
            {
                return Err(err(format!("{keyword} for {name} after its samples")));
            }
            let family = out
                .families
                .entry(name.to_string())
                .or_insert_with(|| Family {
                    name: name.to_string(),
                    kind: String::new(),
                    ..Default::default()
                });
            if keyword == "HELP" {
                if !family.help.is_empty() {
                    return Err(err(format!("second HELP for {name}")));
                }
                family.help = unescape_help(arg).map_err(err)?;
            } else {
                if !family.kind.is_empty() {
                    return Err(err(format!("second TYPE for {name}")));
                }
                if !matches!(
                    arg,
                    "counter" | "gauge" | "histogram" | "summary" | "untyped"
                ) {
                    return Err(err(format!("unknown type {arg:?}")));
                }
                family.kind = arg.to_string();
            }
            if let Some(prev) = current.replace(name.to_string())
                && prev != name
            {
                closed.insert(prev);
            }
            continue;
        }
        let sample = parse_sample(line).map_err(err)?;
        let family_name = family_of(&out, &sample.name);
        if closed.contains(&family_name) {
            return Err(err(format!("samples of {family_name} are not contiguous")));
        }
        if let Some(prev) = current.replace(family_name.clone())
            && prev != family_name
        {
            closed.insert(prev);
        }
        let family = out
            .families
            .entry(family_name.clone())
            .or_insert_with(|| Family {
                name: family_name.clone(),
                kind: "untyped".into(),
                ..Default::default()
            });
        if family.kind.is_empty() {
            family.kind = "untyped".into();
        }
        check_suffix(family, &sample.name).map_err(err)?;
        if family
            .samples
            .iter()
            .any(|s| s.name == sample.name && s.labels == sample.labels)
        {
            return Err(err("duplicate series".into()));
        }
        family.samples.push(sample);
    }
    for family in out.families.values() {
        if family.kind == "histogram" {
            check_histogram(family)?;
        }
    }
    Ok(out)
}

fn has_samples(out: &Exposition, name: &str) -> bool {
    out.families
        .get(name)
        .is_some_and(|f| !f.samples.is_empty())
}

/// The family a sample belongs to: a histogram's or summary's suffixed series go to it.
fn family_of(out: &Exposition, sample: &str) -> String {
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = sample.strip_suffix(suffix)
            && out
                .families
                .get(base)
                .is_some_and(|f| f.kind == "histogram" || f.kind == "summary")
        {
            return base.to_string();
        }
    }
    sample.to_string()
}

fn check_suffix(family: &Family, sample: &str) -> Result<(), String> {
    let ok = match family.kind.as_str() {
        "histogram" => ["_bucket", "_sum", "_count"]
            .iter()
            .any(|s| sample == format!("{}{s}", family.name)),
        "summary" => {
            sample == family.name
                || ["_sum", "_count"]
                    .iter()
                    .any(|s| sample == format!("{}{s}", family.name))
        }
        _ => sample == family.name,
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "sample {sample} does not belong to {} family {}",
            family.kind, family.name
        ))
    }
}

/// One histogram series while checked: buckets (bound, cumulative count), sum, count.
type HistogramSeries = (Vec<(f64, f64)>, Option<f64>, Option<f64>);

fn check_histogram(f: &Family) -> Result<(), String> {
    // Group by the labels other than `le`.
    let mut groups: BTreeMap<Vec<(String, String)>, HistogramSeries> = BTreeMap::new();
    for s in &f.samples {
        let key: Vec<(String, String)> = s
            .labels
            .iter()
            .filter(|(k, _)| *k != "le")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let g = groups.entry(key).or_default();
        if s.name.ends_with("_bucket") {
            let le = s
                .labels
                .get("le")
                .ok_or_else(|| format!("{}: a bucket without le", f.name))?;
            let le = parse_value(le).map_err(|e| format!("{}: le {le:?}: {e}", f.name))?;
            g.0.push((le, s.value));
        } else if s.name.ends_with("_sum") {
            g.1 = Some(s.value);
        } else {
            g.2 = Some(s.value);
        }
    }
    for (labels, (buckets, sum, count)) in groups {
        let what = format!("{}{labels:?}", f.name);
        let count = count.ok_or_else(|| format!("{what}: no _count"))?;
        sum.ok_or_else(|| format!("{what}: no _sum"))?;
        let last = buckets
            .last()
            .ok_or_else(|| format!("{what}: no buckets"))?;
        if last.0 != f64::INFINITY {
            return Err(format!("{what}: the last bucket is not +Inf"));
        }
        if last.1 != count {
            return Err(format!("{what}: +Inf bucket {} != count {count}", last.1));
        }
        for w in buckets.windows(2) {
            if w[1].0 <= w[0].0 {
                return Err(format!("{what}: bucket bounds not increasing"));
            }
            if w[1].1 < w[0].1 {
                return Err(format!("{what}: bucket counts not cumulative"));
            }
        }
    }
    Ok(())
}

fn parse_sample(line: &str) -> Result<Sample, String> {
    let name_end = line
        .find(['{', ' '])
        .ok_or_else(|| "no value".to_string())?;
    let name = &line[..name_end];
    check_metric_name(name)?;
    let mut rest = &line[name_end..];
    let mut labels = BTreeMap::new();
    if let Some(body) = rest.strip_prefix('{') {
        let (parsed, after) = parse_labels(body)?;
        labels = parsed;
        rest = after;
    }
    let rest = rest
        .strip_prefix(' ')
        .ok_or_else(|| "no space before the value".to_string())?;
    let mut fields = rest.split(' ');
    let value = parse_value(fields.next().unwrap_or_default())?;
    if let Some(ts) = fields.next() {
        ts.parse::<i64>()
            .map_err(|_| format!("bad timestamp {ts:?}"))?;
    }
    if fields.next().is_some() {
        return Err("trailing fields".into());
    }
    Ok(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// Labels up to the closing `}`; returns them and what follows.
fn parse_labels(mut s: &str) -> Result<(BTreeMap<String, String>, &str), String> {
    let mut labels = BTreeMap::new();
    loop {
        if let Some(after) = s.strip_prefix('}') {
            return Ok((labels, after));
        }
        let eq = s.find('=').ok_or("label without =")?;
        let name = &s[..eq];
        check_label_name(name)?;
        s = s[eq + 1..]
            .strip_prefix('"')
            .ok_or("label value not quoted")?;
        let mut value = String::new();
        let mut chars = s.char_indices();
        let end = loop {
            match chars.next() {
                None => return Err("unterminated label value".into()),
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, 'n')) => value.push('\n'),
                    other => return Err(format!("bad escape {other:?} in a label value")),
                },
                Some((_, '\n')) => return Err("raw newline in a label value".into()),
                Some((_, c)) => value.push(c),
            }
        };
        if labels.insert(name.to_string(), value).is_some() {
            return Err(format!("label {name} twice"));
        }
        s = &s[end + 1..];
        if let Some(after) = s.strip_prefix(',') {
            s = after;
        } else if !s.starts_with('}') {
            return Err("labels not separated by commas".into());
        }
    }
}

fn parse_value(v: &str) -> Result<f64, String> {
    match v {
        "+Inf" | "Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        "NaN" => Ok(f64::NAN),
        _ => v.parse::<f64>().map_err(|_| format!("bad value {v:?}")),
    }
}

fn unescape_help(s: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('\\') => out.push('\\'),
                Some('n') => out.push('\n'),
                other => return Err(format!("bad escape {other:?} in HELP")),
            }
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

fn check_metric_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
    if ok {
        Ok(())
    } else {
        Err(format!("bad metric name {name:?}"))
    }
}

fn check_label_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with("__");
    if ok {
        Ok(())
    } else {
        Err(format!("bad label name {name:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "# HELP req_total [ALPHA] Requests.\\nMore \\\\ text.\n\
        # TYPE req_total counter\n\
        req_total{op=\"a\\\"b\",code=\"200\"} 3\n\
        req_total{op=\"c\\\\d\\ne\",code=\"500\"} 1.5e3\n\
        # a comment\n\
        # HELP lat_seconds Latency.\n\
        # TYPE lat_seconds histogram\n\
        lat_seconds_bucket{op=\"x\",le=\"0.1\"} 1\n\
        lat_seconds_bucket{op=\"x\",le=\"1\"} 2\n\
        lat_seconds_bucket{op=\"x\",le=\"+Inf\"} 3\n\
        lat_seconds_sum{op=\"x\"} 4.2\n\
        lat_seconds_count{op=\"x\"} 3\n\
        # TYPE up gauge\n\
        up 1 1700000000000\n";

    #[test]
    fn a_good_exposition() {
        let e = parse(GOOD).unwrap_or_else(|err| panic!("{err}"));
        let req = e
            .family("req_total")
            .unwrap_or_else(|| panic!("no req_total"));
        assert_eq!(req.kind, "counter");
        assert_eq!(req.help, "[ALPHA] Requests.\nMore \\ text.");
        assert_eq!(req.samples.len(), 2);
        assert_eq!(req.samples[0].labels["op"], "a\"b");
        assert_eq!(req.samples[1].labels["op"], "c\\d\ne");
        assert_eq!(req.samples[1].value, 1500.0);
        assert_eq!(req.with_labels(&[("code", "500")]).len(), 1);
        let lat = e.family("lat_seconds").unwrap_or_else(|| panic!("no lat"));
        assert_eq!(lat.samples.len(), 5);
        assert_eq!(lat.label_values("le").len(), 3);
        assert_eq!(e.family("up").map(|f| f.kind.as_str()), Some("gauge"));
    }

    #[test]
    fn malformed_expositions_are_refused() {
        for bad in [
            "x{a=\"1\" 2\n",
            "x{a=1} 2\n",
            "x{a=\"1\"}\n",
            "x 1 2 3\n",
            "x{a=\"\\t\"} 1\n",
            "1x 2\n",
            "x{__a=\"1\"} 1\n",
            "x{a=\"1\",a=\"2\"} 1\n",
            "x abc\n",
            "# TYPE x counter\n# TYPE x counter\nx 1\n",
            "# TYPE x fancy\nx 1\n",
            "# TYPE x counter\nx 1\n# HELP x late\n",
            "x 1\ny 1\nx{a=\"b\"} 2\n",
            "x 1\nx 2\n",
            "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n",
            "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
            "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 2\n",
            "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 1\nh_count 1\n",
            "# TYPE c counter\nc_bucket 1\n# TYPE c_bucket counter\n",
        ] {
            assert!(parse(bad).is_err(), "accepted {bad:?}");
        }
    }
}
