//! The eviction settings of KubeletConfiguration (`evictionHard`, `evictionSoft`,
//! `evictionSoftGracePeriod`, `evictionMinimumReclaim`, `evictionPressureTransitionPeriod`,
//! `evictionMaxPodGracePeriod`, `mergeDefaultEvictionSettings`; read by the configuration) and
//! their parsing into thresholds with the Go kubelet's rules and messages.

use std::collections::BTreeMap;
use std::time::Duration;

use super::signals::{Signal, Threshold, ThresholdValue};
use crate::manifest::quantity::parse_quantity;
use ferrolet_proto::go_duration::parse_duration;

/// The Go kubelet's Linux default `evictionHard` (defined with the configuration's other
/// defaults).
/// Go's Linux default `evictionHard`.
pub const DEFAULT_EVICTION_HARD: [(&str, &str); 4] = [
    ("memory.available", "100Mi"),
    ("nodefs.available", "10%"),
    ("nodefs.inodesFree", "5%"),
    ("imagefs.available", "15%"),
];

/// A field and what is wrong with it.
pub type FieldError = (String, String);

/// The eviction settings as configured.
#[derive(Clone, Debug, PartialEq)]
pub struct EvictionConfig {
    /// `evictionHard`: signal → quantity or percentage; `None` means the defaults.
    pub hard: Option<BTreeMap<String, String>>,
    /// `evictionSoft`.
    pub soft: BTreeMap<String, String>,
    /// `evictionSoftGracePeriod`: signal → duration, one per soft threshold.
    pub soft_grace_period: BTreeMap<String, String>,
    /// `evictionMinimumReclaim`: signal → quantity or percentage.
    pub minimum_reclaim: BTreeMap<String, String>,
    /// `evictionPressureTransitionPeriod` (5m): how long a pressure condition outlives its
    /// last observation.
    pub pressure_transition_period: Duration,
    /// `evictionMaxPodGracePeriod` (0): the longest grace period a soft eviction gives; 0 or
    /// less means the pod's own.
    pub max_pod_grace_period: i64,
    /// `mergeDefaultEvictionSettings` (false): fill signals missing from `evictionHard`
    /// with the defaults.
    pub merge_defaults: bool,
}

impl Default for EvictionConfig {
    fn default() -> Self {
        Self {
            hard: None,
            soft: BTreeMap::new(),
            soft_grace_period: BTreeMap::new(),
            minimum_reclaim: BTreeMap::new(),
            pressure_transition_period: Duration::from_secs(5 * 60),
            max_pod_grace_period: 0,
            merge_defaults: false,
        }
    }
}

impl EvictionConfig {
    /// `evictionHard` in effect: the configured map, the defaults when unset, or the
    /// configured map completed from the defaults with `mergeDefaultEvictionSettings`.
    pub fn effective_hard(&self) -> BTreeMap<String, String> {
        let defaults = DEFAULT_EVICTION_HARD
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()));
        match &self.hard {
            None => defaults.collect(),
            Some(hard) if self.merge_defaults => {
                let mut merged: BTreeMap<String, String> = defaults.collect();
                merged.extend(hard.clone());
                merged
            }
            Some(hard) => hard.clone(),
        }
    }

    /// The thresholds (Go's `ParseThresholdConfig`), plus `allocatableMemory.available` for
    /// a hard `memory.available` as Go adds it with node allocatable enforced on pods (its
    /// default). Errors name the field.
    pub fn thresholds(&self) -> Result<Vec<Threshold>, FieldError> {
        let mut out = statements("evictionHard", &self.effective_hard())?;
        let mut soft = statements("evictionSoft", &self.soft)?;
        let mut grace = BTreeMap::new();
        for (signal, text) in &self.soft_grace_period {
            let field = "evictionSoftGracePeriod";
            let s = valid_signal(field, signal)?;
            let d = parse_duration(text).map_err(|e| (field.to_string(), e.to_string()))?;
            grace.insert(s, d);
        }
        for t in &mut soft {
            t.grace_period = *grace.get(&t.signal).ok_or_else(|| {
                (
                    "evictionSoftGracePeriod".to_string(),
                    format!(
                        "grace period must be specified for the soft eviction threshold {}",
                        t.signal
                    ),
                )
            })?;
        }
        out.extend(soft);
        let mut reclaims = BTreeMap::new();
        for (signal, text) in &self.minimum_reclaim {
            let field = "evictionMinimumReclaim";
            let s = valid_signal(field, signal)?;
            reclaims.insert(s, min_reclaim(field, s, text)?);
        }
        for t in &mut out {
            if let Some(r) = reclaims.get(&t.signal) {
                t.min_reclaim = Some(*r);
            }
        }
        let allocatable: Vec<Threshold> = out
            .iter()
            .filter(|t| t.signal == Signal::MemoryAvailable && t.is_hard())
            .map(|t| Threshold {
                signal: Signal::AllocatableMemoryAvailable,
                ..*t
            })
            .collect();
        out.extend(allocatable);
        Ok(out)
    }

    /// Checks everything parses.
    pub fn validate(&self) -> Result<(), FieldError> {
        self.thresholds().map(|_| ())
    }
}

fn valid_signal(field: &str, name: &str) -> Result<Signal, FieldError> {
    Signal::parse(name).ok_or_else(|| {
        (
            field.to_string(),
            format!("unsupported eviction signal {name}"),
        )
    })
}

/// `0.1` for `10%`, as Go parses it (single precision).
fn percentage(field: &str, text: &str) -> Result<f32, FieldError> {
    let number = text.trim_end_matches('%');
    let v: f64 = number.parse().map_err(|_| {
        (
            field.to_string(),
            format!("strconv.ParseFloat: parsing {number:?}: invalid syntax"),
        )
    })?;
    Ok((v as f32) / 100.0)
}

fn statements(field: &str, map: &BTreeMap<String, String>) -> Result<Vec<Threshold>, FieldError> {
    let mut out = Vec::new();
    for (name, text) in map {
        let signal = valid_signal(field, name)?;
        let err = |reason: String| (format!("{field}[{name}]"), reason);
        let value = if text.ends_with('%') {
            // Go ignores 0% and 100%.
            if text == "0%" || text == "100%" {
                continue;
            }
            let p = percentage(field, text)?;
            if p < 0.0 {
                return Err(err(format!(
                    "eviction percentage threshold {signal} must be >= 0%: {text}"
                )));
            }
            if p > 1.0 {
                return Err(err(format!(
                    "eviction percentage threshold {signal} must be <= 100%: {text}"
                )));
            }
            ThresholdValue::Percentage(p)
        } else {
            let q = parse_quantity(text).map_err(|e| err(format!("{text:?}: {e}")))?;
            let v = i64::try_from(q.value_ceil()).unwrap_or(i64::MAX);
            if v <= 0 {
                return Err(err(format!(
                    "eviction threshold {signal} must be positive: {text}"
                )));
            }
            ThresholdValue::Quantity(v)
        };
        out.push(Threshold {
            signal,
            value,
            grace_period: Duration::ZERO,
            min_reclaim: None,
        });
    }
    Ok(out)
}

fn min_reclaim(field: &str, signal: Signal, text: &str) -> Result<ThresholdValue, FieldError> {
    let err = |reason: String| (format!("{field}[{}]", signal.name()), reason);
    if text.ends_with('%') {
        let p = percentage(field, text)?;
        if p <= 0.0 {
            return Err(err(format!(
                "eviction percentage minimum reclaim {signal} must be positive: {text}"
            )));
        }
        return Ok(ThresholdValue::Percentage(p));
    }
    let q = parse_quantity(text).map_err(|e| err(format!("{text:?}: {e}")))?;
    if q.is_negative() {
        return Err(err(format!(
            "negative eviction minimum reclaim specified for {signal}"
        )));
    }
    Ok(ThresholdValue::Quantity(
        i64::try_from(q.value_ceil()).unwrap_or(i64::MAX),
    ))
}
