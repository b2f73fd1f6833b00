//! A pod's timeline as the API serves it (JSON, [`PodTimeline`]) and as `ferrolet trace pod`
//! prints it ([`table`]). The JSON types are also what the subcommand reads back.

use serde::{Deserialize, Serialize};

use super::{Phase, SandboxTimings, Start, Trigger};

/// A pod's kept starts, oldest first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodTimeline {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub name: String,
    /// Its starts.
    pub starts: Vec<StartView>,
}

/// One start.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StartView {
    /// The pod's UID for this start.
    pub uid: String,
    /// Its number (1 = the first start of the name).
    pub start: u32,
    /// Why it began.
    pub trigger: Trigger,
    /// Its status was visible with every container running.
    pub finished: bool,
    /// RFC 3339 time (nanoseconds) of its first mark.
    pub started_at: String,
    /// Milliseconds from its first mark to its last: the sum of the marks' durations.
    pub total_ms: f64,
    /// Marks it had no room for.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dropped_marks: u32,
    /// Where the runtime's RunPodSandbox went, when it says (ferrolet-cri does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_runtime: Option<SandboxTimings>,
    /// Its marks, in time order.
    pub marks: Vec<MarkView>,
}

/// One mark of a start.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MarkView {
    /// What happened.
    pub phase: Phase,
    /// The container it is about, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// RFC 3339 time with nanoseconds.
    pub at: String,
    /// Milliseconds since the start's first mark.
    pub offset_ms: f64,
    /// Milliseconds since the mark before (the phase's duration; 0 for the first).
    pub duration_ms: f64,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Nanoseconds as milliseconds.
fn ms(nanos: i64) -> f64 {
    nanos as f64 / 1e6
}

/// RFC 3339 UTC with all nine fractional digits.
pub fn rfc3339_nanos(nanos: i64) -> String {
    match jiff::Timestamp::from_nanosecond(i128::from(nanos)) {
        Ok(t) => format!("{t:.9}"),
        Err(_) => String::new(),
    }
}

/// The view of `starts` of pod `namespace/name`.
pub fn view(namespace: &str, name: &str, starts: &[Start]) -> PodTimeline {
    PodTimeline {
        namespace: namespace.to_string(),
        name: name.to_string(),
        starts: starts.iter().map(start_view).collect(),
    }
}

fn start_view(start: &Start) -> StartView {
    let first = start.first_at().unwrap_or_default();
    let mut previous = first;
    let mut last = first;
    let marks = start
        .marks()
        .map(|(m, container)| {
            let view = MarkView {
                phase: m.phase,
                container: container.map(str::to_string),
                at: rfc3339_nanos(m.at),
                offset_ms: ms(m.at - first),
                duration_ms: ms(m.at - previous),
            };
            previous = m.at;
            last = m.at;
            view
        })
        .collect();
    StartView {
        uid: start.uid.to_string(),
        start: start.number,
        trigger: start.trigger,
        finished: start.finished,
        started_at: rfc3339_nanos(first),
        total_ms: ms(last - first),
        dropped_marks: start.dropped,
        sandbox_runtime: start.sandbox,
        marks,
    }
}

/// The timeline as a table a person reads: per start a heading, then one row per mark
/// (phase, container, offset from the start, the phase's duration) and the total.
pub fn table(timeline: &PodTimeline) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(out, "pod {}/{}", timeline.namespace, timeline.name);
    for s in &timeline.starts {
        let state = if s.finished { "" } else { ", not finished" };
        let _ = writeln!(
            out,
            "\nstart {} ({}{state}) uid {} at {}",
            s.start,
            s.trigger.as_str(),
            s.uid,
            s.started_at
        );
        let width = s
            .marks
            .iter()
            .filter_map(|m| m.container.as_deref())
            .map(str::len)
            .chain(std::iter::once("CONTAINER".len()))
            .max()
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "{:<18} {:<width$} {:>12} {:>12}",
            "PHASE", "CONTAINER", "OFFSET(ms)", "DURATION(ms)"
        );
        for m in &s.marks {
            let _ = writeln!(
                out,
                "{:<18} {:<width$} {:>12.3} {:>12.3}",
                m.phase.as_str(),
                m.container.as_deref().unwrap_or("-"),
                m.offset_ms,
                m.duration_ms
            );
            if let (Phase::SandboxReady, Some(t)) = (m.phase, &s.sandbox_runtime) {
                let _ = match t.pause_ms {
                    Some(pause) => writeln!(
                        out,
                        "  in the runtime: files {:.1} ms, netns {:.1} ms, then at once CNI ADD {:.1} ms and pause container {pause:.1} ms",
                        t.files_ms, t.netns_ms, t.cni_add_ms
                    ),
                    None => writeln!(
                        out,
                        "  in the runtime: files {:.1} ms, namespaces {:.1} ms, CNI ADD {:.1} ms (no pause container)",
                        t.files_ms, t.netns_ms, t.cni_add_ms
                    ),
                };
            }
        }
        let _ = writeln!(
            out,
            "{:<18} {:<width$} {:>12} {:>12.3}",
            "total", "", "", s.total_ms
        );
        if s.dropped_marks > 0 {
            let _ = writeln!(out, "({} more marks were not kept)", s.dropped_marks);
        }
    }
    out
}
