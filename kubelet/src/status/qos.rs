//! The pod's QoS class, computed as the Go kubelet's `ComputePodQOS`: BestEffort without any
//! cpu/memory request or limit, Guaranteed when every container limits both cpu and memory and
//! the pod's summed requests equal its summed limits, Burstable otherwise.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Container;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::types::Pod;

/// `Guaranteed`.
pub const GUARANTEED: &str = "Guaranteed";
/// `Burstable`.
pub const BURSTABLE: &str = "Burstable";
/// `BestEffort`.
pub const BEST_EFFORT: &str = "BestEffort";

/// The resources QoS looks at.
const QOS_RESOURCES: [&str; 2] = ["cpu", "memory"];

/// The pod's QoS class (`Guaranteed`, `Burstable` or `BestEffort`).
pub fn qos_class(pod: &Pod) -> &'static str {
    let Some(spec) = pod.spec.as_ref() else {
        return BEST_EFFORT;
    };
    let mut requests: BTreeMap<&str, i128> = BTreeMap::new();
    let mut limits: BTreeMap<&str, i128> = BTreeMap::new();
    let mut guaranteed = true;
    for c in spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
    {
        let (c_requests, c_limits) = effective_resources(c);
        for (name, value) in c_requests {
            if value > 0 {
                *requests.entry(name).or_default() += value;
            }
        }
        let mut limited = 0;
        for (name, value) in c_limits {
            if value > 0 {
                limited += 1;
                *limits.entry(name).or_default() += value;
            }
        }
        if limited < QOS_RESOURCES.len() {
            guaranteed = false;
        }
    }
    if requests.is_empty() && limits.is_empty() {
        return BEST_EFFORT;
    }
    if guaranteed
        && requests.len() == limits.len()
        && requests.iter().all(|(k, v)| limits.get(k) == Some(v))
    {
        return GUARANTEED;
    }
    BURSTABLE
}

/// Resource name → amount in nano-units.
type Amounts = Vec<(&'static str, i128)>;

/// A container's cpu/memory requests and limits in nano-units, with requests defaulted from
/// limits as the API defaulting does (so a pod that skipped defaulting is classed the same).
fn effective_resources(c: &Container) -> (Amounts, Amounts) {
    let res = c.resources.as_ref();
    let get = |list: Option<&BTreeMap<String, Quantity>>, name: &str| {
        list.and_then(|l| l.get(name))
            .and_then(|q| parse_quantity(&q.0))
    };
    let mut requests = Vec::new();
    let mut limits = Vec::new();
    for name in QOS_RESOURCES {
        let limit = get(res.and_then(|r| r.limits.as_ref()), name);
        let request = get(res.and_then(|r| r.requests.as_ref()), name).or(limit);
        if let Some(v) = request {
            requests.push((name, v));
        }
        if let Some(v) = limit {
            limits.push((name, v));
        }
    }
    (requests, limits)
}

/// A Kubernetes quantity (`100m`, `1.5`, `128Mi`, `1G`, `2e3`) in nano-units (value × 10⁹),
/// rounded up; `None` when it is not a quantity. Saturates instead of overflowing.
pub fn parse_quantity(text: &str) -> Option<i128> {
    let text = text.trim();
    let (negative, rest) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let number_end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(number_end);
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    if (whole.is_empty() && frac.is_empty()) || frac.contains('.') {
        return None;
    }
    // Scale: value = digits × 10^exp10 × 2^exp2.
    let (exp10, exp2): (i32, u32) = match suffix {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        s if s.starts_with(['e', 'E']) => (s[1..].parse::<i32>().ok()?, 0),
        _ => return None,
    };
    let digits = format!("{whole}{frac}");
    // Leading zeros carry no value; more than 30 significant digits would overflow anyway.
    let significant = digits.trim_start_matches('0');
    if significant.len() > 30 {
        return Some(if negative { i128::MIN } else { i128::MAX });
    }
    let mantissa: i128 = if significant.is_empty() {
        0
    } else {
        significant.parse().ok()?
    };
    // Nano-units: shift by 9 decimal places, minus the fraction digits already in the mantissa.
    let shift = exp10 + 9 - frac.len() as i32;
    let mut value = mantissa.checked_mul(1i128 << exp2);
    if shift >= 0 {
        value = value.and_then(|v| {
            10i128
                .checked_pow(shift as u32)
                .and_then(|p| v.checked_mul(p))
        });
    } else {
        let divisor = 10i128.checked_pow(shift.unsigned_abs());
        value = match (value, divisor) {
            (Some(v), Some(d)) => Some((v + d - 1) / d),
            // Smaller than a nano-unit: rounds up to one (or zero stays zero).
            (Some(v), None) => Some(i128::from(v > 0)),
            (None, _) => None,
        };
    }
    let value = value.unwrap_or(i128::MAX);
    Some(if negative { -value } else { value })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};

    fn q(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, Quantity>> {
        Some(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                .collect(),
        )
    }

    fn container(name: &str, requests: &[(&str, &str)], limits: &[(&str, &str)]) -> Container {
        Container {
            name: name.into(),
            resources: Some(ResourceRequirements {
                requests: if requests.is_empty() {
                    None
                } else {
                    q(requests)
                },
                limits: if limits.is_empty() { None } else { q(limits) },
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn pod(containers: Vec<Container>, init: Vec<Container>) -> Pod {
        Pod {
            spec: Some(PodSpec {
                containers,
                init_containers: if init.is_empty() { None } else { Some(init) },
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn quantities() {
        assert_eq!(parse_quantity("1"), Some(1_000_000_000));
        assert_eq!(parse_quantity("100m"), Some(100_000_000));
        assert_eq!(parse_quantity("0.1"), Some(100_000_000));
        assert_eq!(parse_quantity(".5"), Some(500_000_000));
        assert_eq!(
            parse_quantity("128Mi"),
            Some(128 * (1 << 20) * 1_000_000_000)
        );
        assert_eq!(parse_quantity("1G"), Some(1_000_000_000 * 1_000_000_000));
        assert_eq!(parse_quantity("2e3"), Some(2_000 * 1_000_000_000));
        assert_eq!(parse_quantity("1E-3"), parse_quantity("1m"));
        assert_eq!(parse_quantity("1Ki"), parse_quantity("1024"));
        assert_eq!(parse_quantity("1n"), Some(1));
        assert_eq!(parse_quantity("0.1n"), Some(1), "rounds up");
        assert_eq!(parse_quantity("-1"), Some(-1_000_000_000));
        assert_eq!(parse_quantity("0"), Some(0));
        assert_eq!(parse_quantity("1Qi"), None);
        assert_eq!(parse_quantity(""), None);
        assert_eq!(parse_quantity("abc"), None);
        assert_eq!(parse_quantity("1.2.3"), None);
        assert_eq!(
            parse_quantity("9999999999999999999999999999999999Ei"),
            Some(i128::MAX)
        );
    }

    #[test]
    fn best_effort_without_cpu_or_memory() {
        assert_eq!(
            qos_class(&pod(vec![container("a", &[], &[])], vec![])),
            BEST_EFFORT
        );
        // Other resources and zero quantities do not count.
        let c = container("a", &[("ephemeral-storage", "1Gi"), ("cpu", "0")], &[]);
        assert_eq!(qos_class(&pod(vec![c], vec![])), BEST_EFFORT);
        assert_eq!(qos_class(&Pod::default()), BEST_EFFORT);
    }

    #[test]
    fn guaranteed_when_limits_equal_requests_everywhere() {
        let c = container(
            "a",
            &[("cpu", "1"), ("memory", "1Gi")],
            &[("cpu", "1000m"), ("memory", "1024Mi")],
        );
        let init = container("i", &[], &[("cpu", "500m"), ("memory", "100Mi")]);
        assert_eq!(qos_class(&pod(vec![c.clone()], vec![init])), GUARANTEED);
        // Limits alone default the requests.
        let only_limits = container("b", &[], &[("cpu", "1"), ("memory", "1Gi")]);
        assert_eq!(qos_class(&pod(vec![only_limits, c], vec![])), GUARANTEED);
    }

    #[test]
    fn burstable_otherwise() {
        let partial = container("a", &[], &[("cpu", "1")]);
        assert_eq!(qos_class(&pod(vec![partial], vec![])), BURSTABLE);
        let unequal = container(
            "a",
            &[("cpu", "500m"), ("memory", "1Gi")],
            &[("cpu", "1"), ("memory", "1Gi")],
        );
        assert_eq!(qos_class(&pod(vec![unequal], vec![])), BURSTABLE);
        let requests_only = container("a", &[("memory", "1Gi")], &[]);
        let full = container("b", &[], &[("cpu", "1"), ("memory", "1Gi")]);
        assert_eq!(
            qos_class(&pod(vec![requests_only, full], vec![])),
            BURSTABLE
        );
    }
}
