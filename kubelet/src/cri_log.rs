//! The CRI container log format, `<RFC3339Nano> <stdout|stderr> <P|F> <text>` one record a
//! line, turned back into what the container wrote: partial (`P`) records joined with the full
//! (`F`) record that ends them, optionally prefixed with the timestamp, filtered by time, cut
//! at a byte limit; and finding where the last N lines start (`tailLines`).

use std::io::{self, Read, Seek, SeekFrom};

use jiff::Timestamp;
use jiff::tz::Offset;

/// Which stream a record came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// One parsed record (a line of the file, without its newline).
#[derive(Clone, Debug, PartialEq)]
pub struct Record<'a> {
    /// When the runtime read it.
    pub time: LogTime,
    /// Where it came from.
    pub stream: Stream,
    /// A `P` record: the line goes on in the next record of its stream.
    pub partial: bool,
    /// What the container wrote (no newline).
    pub text: &'a [u8],
}

/// Parses one record; `None` when the line is not in the CRI format (such lines are skipped,
/// as the Go kubelet does).
pub fn parse_record(line: &[u8]) -> Option<Record<'_>> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let (ts, rest) = split_space(line)?;
    let (stream, rest) = split_space(rest)?;
    let stream = match stream {
        b"stdout" => Stream::Stdout,
        b"stderr" => Stream::Stderr,
        _ => return None,
    };
    // Tags are `:`-separated, the first says partial or full; the text may be missing after a
    // bare tag.
    let (tags, text) = split_space(rest).unwrap_or((rest, b""));
    let partial = tags.split(|b| *b == b':').next() == Some(b"P");
    let time = LogTime::parse(std::str::from_utf8(ts).ok()?)?;
    Some(Record {
        time,
        stream,
        partial,
        text,
    })
}

fn split_space(s: &[u8]) -> Option<(&[u8], &[u8])> {
    let i = s.iter().position(|b| *b == b' ')?;
    Some((&s[..i], &s[i + 1..]))
}

/// A record's time: the instant, and the UTC offset it was written with, which
/// `timestamps=true` output keeps (as Go's `time.Time` does). Ordered by instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct LogTime {
    /// The instant.
    pub instant: Timestamp,
    /// The offset it was written with.
    pub offset: Offset,
}

impl LogTime {
    /// An instant written in UTC.
    pub fn utc(instant: Timestamp) -> Self {
        Self {
            instant,
            offset: Offset::UTC,
        }
    }

    /// Parses an RFC 3339 time (`Z` or a `±hh:mm` offset, any fraction).
    pub fn parse(s: &str) -> Option<Self> {
        let instant: Timestamp = s.parse().ok()?;
        // RFC 3339 ends in `Z` or `±hh:mm`; the parse above checked which.
        let offset = match s.as_bytes() {
            [.., b'Z' | b'z'] => Offset::UTC,
            [.., sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
                let digit = |b: &u8| i32::from(b.wrapping_sub(b'0'));
                let secs = (digit(h1) * 10 + digit(h2)) * 3600 + (digit(m1) * 10 + digit(m2)) * 60;
                Offset::from_seconds(if *sign == b'-' { -secs } else { secs }).ok()?
            }
            _ => return None,
        };
        Some(Self { instant, offset })
    }
}

/// A time as Go's RFC3339Nano prints it: fraction without trailing zeros, `Z` for UTC.
pub fn format_time(t: &LogTime) -> String {
    let civil = t.offset.to_datetime(t.instant);
    let mut out = format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        civil.year(),
        civil.month(),
        civil.day(),
        civil.hour(),
        civil.minute(),
        civil.second()
    );
    let nanos = civil.subsec_nanosecond();
    if nanos > 0 {
        let frac = format!("{nanos:09}");
        out.push('.');
        out.push_str(frac.trim_end_matches('0'));
    }
    let offset = t.offset.seconds();
    if offset == 0 {
        out.push('Z');
    } else {
        let sign = if offset < 0 { '-' } else { '+' };
        let abs = offset.unsigned_abs();
        out.push_str(&format!("{sign}{:02}:{:02}", abs / 3600, abs % 3600 / 60));
    }
    out
}

/// How to render records.
#[derive(Clone, Debug, Default)]
pub struct RenderOptions {
    /// Prefix each line with its timestamp and a space.
    pub timestamps: bool,
    /// Drop lines older than this.
    pub since: Option<Timestamp>,
    /// Stop after this many bytes.
    pub limit_bytes: Option<u64>,
}

/// A line being assembled from partial records.
#[derive(Debug)]
struct Pending {
    /// The time of its first part (the line's time).
    time: LogTime,
    /// Parts not output yet.
    text: Vec<u8>,
    /// Whether its beginning (and timestamp) was output already ([`Renderer::flush_partial`]).
    started: bool,
}

/// Turns records into output bytes, joining partial records per stream.
#[derive(Debug)]
pub struct Renderer {
    opts: RenderOptions,
    remaining: Option<u64>,
    pending: [Option<Pending>; 2],
}

impl Renderer {
    /// A renderer with the given options.
    pub fn new(opts: RenderOptions) -> Self {
        Self {
            remaining: opts.limit_bytes,
            opts,
            pending: [None, None],
        }
    }

    /// Whether the byte limit is used up (nothing more will be written).
    pub fn done(&self) -> bool {
        self.remaining == Some(0)
    }

    /// Feeds one line of the file (with or without its newline); output goes to `out`.
    pub fn push_line(&mut self, line: &[u8], out: &mut Vec<u8>) {
        let Some(rec) = parse_record(line) else {
            return;
        };
        let slot = &mut self.pending[rec.stream as usize];
        if rec.partial {
            slot.get_or_insert_with(|| Pending {
                time: rec.time,
                text: Vec::new(),
                started: false,
            })
            .text
            .extend_from_slice(rec.text);
            return;
        }
        self.end_line(rec, true, out);
    }

    /// Feeds the last bytes of a file that does not end in a newline (a record being
    /// written): its text is output without a newline, as the Go kubelet does.
    pub fn push_incomplete(&mut self, line: &[u8], out: &mut Vec<u8>) {
        if let Some(rec) = parse_record(line) {
            self.end_line(rec, false, out);
        }
    }

    /// Ends the line of `rec`'s stream with `rec`.
    fn end_line(&mut self, rec: Record<'_>, newline: bool, out: &mut Vec<u8>) {
        let (time, mut text, started) = match self.pending[rec.stream as usize].take() {
            Some(p) => (p.time, p.text, p.started),
            None => (rec.time, Vec::new(), false),
        };
        text.extend_from_slice(rec.text);
        self.emit(time, &text, newline, !started, out);
    }

    /// Outputs the parts of unfinished lines seen so far, so a follower sees text the
    /// container wrote without a newline at once; the rest of such a line follows without a
    /// second timestamp.
    pub fn flush_partial(&mut self, out: &mut Vec<u8>) {
        let mut parts = Vec::new();
        for p in self.pending.iter_mut().flatten() {
            if !p.text.is_empty() {
                parts.push((p.time, std::mem::take(&mut p.text), !p.started));
                p.started = true;
            }
        }
        parts.sort_by_key(|(time, _, _)| *time);
        for (time, text, prefix) in parts {
            self.emit(time, &text, false, prefix, out);
        }
    }

    /// Outputs partial lines still waiting for their end (the log stops here), without a
    /// newline, oldest first.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        let mut left: Vec<Pending> = self.pending.iter_mut().filter_map(Option::take).collect();
        left.sort_by_key(|p| p.time);
        for p in left {
            self.emit(p.time, &p.text, false, !p.started, out);
        }
    }

    fn emit(&mut self, time: LogTime, text: &[u8], newline: bool, prefix: bool, out: &mut Vec<u8>) {
        if self.done() {
            return;
        }
        // A line is kept or dropped as a whole, by the time of its first part.
        if self.opts.since.is_some_and(|since| time.instant < since) {
            return;
        }
        let start = out.len();
        if self.opts.timestamps && prefix {
            out.extend_from_slice(format_time(&time).as_bytes());
            out.push(b' ');
        }
        out.extend_from_slice(text);
        if newline {
            out.push(b'\n');
        }
        if let Some(left) = self.remaining.as_mut() {
            let written = (out.len() - start) as u64;
            if written >= *left {
                out.truncate(start + *left as usize);
                *left = 0;
            } else {
                *left -= written;
            }
        }
    }
}

/// The offset where the last `lines` lines of a CRI log start: the first record after the
/// (`lines`+1)-th full record from the end. An unfinished record at the end, and partial
/// records after the last full one, belong to no counted line (they are read anyway). A line
/// whose partial records interleave with the other stream's across the starting point comes
/// out without its first parts (the Go kubelet, counting raw records, cuts lines too).
pub fn tail_start<F: Read + Seek>(file: &mut F, lines: usize) -> io::Result<u64> {
    const BLOCK: u64 = 64 * 1024;
    let size = file.seek(SeekFrom::End(0))?;
    let mut end = size;
    // Bytes after the last newline seen so far (an unfinished record, or the start of a
    // record whose beginning is in an earlier block).
    let mut carry: Vec<u8> = Vec::new();
    let mut first_newline_seen = false;
    let mut full_seen = 0usize;
    while end > 0 {
        let start = end.saturating_sub(BLOCK);
        let mut block = vec![0u8; (end - start) as usize];
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(&mut block)?;
        block.extend_from_slice(&carry);
        // Walk the records of this block from the end; `block[i]` is a newline at file
        // offset `start + i`.
        let mut record_end = block.len();
        let mut i = block.len();
        while i > 0 {
            i -= 1;
            if block[i] != b'\n' {
                continue;
            }
            if !first_newline_seen {
                // What follows the last newline of the file is unfinished: not a line.
                first_newline_seen = true;
                record_end = i + 1;
                continue;
            }
            let record = &block[i + 1..record_end];
            if parse_record(record).is_some_and(|r| !r.partial) {
                full_seen += 1;
                if full_seen > lines {
                    // This full record ends the line before the wanted ones.
                    return Ok(start + record_end as u64);
                }
            }
            record_end = i + 1;
        }
        carry = block[..record_end].to_vec();
        if !first_newline_seen {
            carry.clear();
        }
        end = start;
    }
    // The first record of the file has no newline before it.
    if first_newline_seen
        && parse_record(&carry).is_some_and(|r| !r.partial)
        && full_seen + 1 > lines
    {
        return Ok(carry.len() as u64);
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::io::Cursor;

    const LOG: &str = "\
2024-05-01T10:00:00.000000001Z stdout F one
2024-05-01T10:00:01Z stderr F two
2024-05-01T10:00:02.5Z stdout P thr
2024-05-01T10:00:02.6Z stderr F err in between
2024-05-01T10:00:02.7Z stdout P e
2024-05-01T10:00:03+02:00 stdout F e
garbage line
2024-05-01T10:00:04Z stdout F 
2024-05-01T10:00:05Z stdout F four
";

    fn render(input: &str, opts: RenderOptions) -> String {
        let mut r = Renderer::new(opts);
        let mut out = Vec::new();
        for l in input.split_inclusive('\n') {
            if l.ends_with('\n') {
                r.push_line(l.as_bytes(), &mut out);
            } else {
                r.push_incomplete(l.as_bytes(), &mut out);
            }
        }
        r.finish(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn parses_records() {
        let r = parse_record(b"2024-05-01T10:00:02.5Z stdout P thr\n").unwrap();
        assert!(r.partial);
        assert_eq!(r.stream, Stream::Stdout);
        assert_eq!(r.text, b"thr");
        let r = parse_record(b"2024-05-01T10:00:02.5Z stderr F:x a b  c").unwrap();
        assert!(!r.partial);
        assert_eq!(r.text, b"a b  c");
        assert_eq!(
            parse_record(b"2024-05-01T10:00:02.5Z stdout F")
                .unwrap()
                .text,
            b""
        );
        assert!(parse_record(b"2024-05-01T10:00:02.5Z stdin F x").is_none());
        assert!(parse_record(b"yesterday stdout F x").is_none());
        assert!(parse_record(b"").is_none());
    }

    #[test]
    fn joins_partial_lines_per_stream() {
        let out = render(LOG, RenderOptions::default());
        assert_eq!(out, "one\ntwo\nerr in between\nthree\n\nfour\n");
    }

    #[test]
    fn timestamps_as_go_prints_them() {
        let out = render(
            LOG,
            RenderOptions {
                timestamps: true,
                ..Default::default()
            },
        );
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "2024-05-01T10:00:00.000000001Z one");
        assert_eq!(lines[1], "2024-05-01T10:00:01Z two");
        assert_eq!(lines[2], "2024-05-01T10:00:02.6Z err in between");
        // A joined line carries the time of its first part.
        assert_eq!(lines[3], "2024-05-01T10:00:02.5Z three");
        assert_eq!(lines[4], "2024-05-01T10:00:04Z ");
        let t = LogTime::parse("2024-05-01T10:00:03.120+02:00").unwrap();
        assert_eq!(format_time(&t), "2024-05-01T10:00:03.12+02:00");
    }

    #[test]
    fn since_drops_older_lines() {
        let since: Timestamp = "2024-05-01T10:00:02.55Z".parse().unwrap();
        let out = render(
            LOG,
            RenderOptions {
                since: Some(since),
                ..Default::default()
            },
        );
        // "three" began before `since` (its first part; its last part's own time is 08:00 UTC).
        assert_eq!(out, "err in between\n\nfour\n");
    }

    #[test]
    fn limit_bytes_cuts_the_output() {
        let out = render(
            LOG,
            RenderOptions {
                limit_bytes: Some(6),
                ..Default::default()
            },
        );
        assert_eq!(out, "one\ntw");
        let out = render(
            LOG,
            RenderOptions {
                limit_bytes: Some(4),
                ..Default::default()
            },
        );
        assert_eq!(out, "one\n");
    }

    #[test]
    fn unfinished_records_and_dangling_partials() {
        let input = "2024-05-01T10:00:00Z stdout F a\n2024-05-01T10:00:01Z stdout P b\n2024-05-01T10:00:02Z stdout F c";
        assert_eq!(render(input, RenderOptions::default()), "a\nbc");
        let input = "2024-05-01T10:00:00Z stdout F a\n2024-05-01T10:00:01Z stdout P b\n";
        assert_eq!(render(input, RenderOptions::default()), "a\nb");
    }

    #[test]
    fn partial_lines_can_be_shown_before_they_end() {
        let mut r = Renderer::new(RenderOptions {
            timestamps: true,
            ..Default::default()
        });
        let mut out = Vec::new();
        r.push_line(b"2024-05-01T10:00:00Z stdout P Name? \n", &mut out);
        r.flush_partial(&mut out);
        assert_eq!(out, b"2024-05-01T10:00:00Z Name? ");
        r.flush_partial(&mut out);
        r.push_line(b"2024-05-01T10:00:05Z stdout P Fer\n", &mut out);
        r.flush_partial(&mut out);
        r.push_line(b"2024-05-01T10:00:06Z stdout F rolet\n", &mut out);
        r.push_line(b"2024-05-01T10:00:07Z stdout F next\n", &mut out);
        r.finish(&mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "2024-05-01T10:00:00Z Name? Ferrolet\n2024-05-01T10:00:07Z next\n"
        );
    }

    fn tail(input: &str, n: usize) -> String {
        let start = tail_start(&mut Cursor::new(input.as_bytes()), n).unwrap();
        render(&input[start as usize..], RenderOptions::default())
    }

    const TAIL_LOG: &str = "\
2024-05-01T10:00:00Z stdout F one
2024-05-01T10:00:01Z stderr F two
2024-05-01T10:00:02Z stdout P th
2024-05-01T10:00:03Z stdout P re
2024-05-01T10:00:04Z stdout F e
2024-05-01T10:00:05Z stderr F four
";

    #[test]
    fn tail_counts_joined_lines() {
        assert_eq!(tail(TAIL_LOG, 0), "");
        assert_eq!(tail(TAIL_LOG, 1), "four\n");
        // The partial records of "three" come with it.
        assert_eq!(tail(TAIL_LOG, 2), "three\nfour\n");
        assert_eq!(tail(TAIL_LOG, 3), "two\nthree\nfour\n");
        assert_eq!(tail(TAIL_LOG, 4), "one\ntwo\nthree\nfour\n");
        assert_eq!(tail(TAIL_LOG, 100), tail(TAIL_LOG, 4));
        assert_eq!(tail(LOG, 2), "\nfour\n");
        assert_eq!(tail("", 3), "");
    }

    #[test]
    fn tail_ignores_an_unfinished_end_and_trailing_partials() {
        let input = "2024-05-01T10:00:00Z stdout F a\n2024-05-01T10:00:01Z stdout F b\n2024-05-01T10:00:02Z stdout P c\n2024-05-01T10:00:03Z stdout F d";
        assert_eq!(tail(input, 1), "b\ncd");
        assert_eq!(tail(input, 2), "a\nb\ncd");
        // A single line without a newline.
        assert_eq!(tail("2024-05-01T10:00:00Z stdout F a", 1), "a");
    }

    #[test]
    fn tail_across_blocks() {
        let mut input = String::new();
        for i in 0..20_000 {
            input.push_str(&format!("2024-05-01T10:00:00.{i:09}Z stdout F line {i}\n"));
        }
        assert_eq!(tail(&input, 2), "line 19998\nline 19999\n");
        let out = tail(&input, 15_000);
        assert_eq!(out.lines().count(), 15_000);
        assert!(out.starts_with("line 5000\n"));
        assert_eq!(tail(&input, 20_000).lines().count(), 20_000);
        assert_eq!(tail(&input, 25_000).lines().count(), 20_000);
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_render_without_panicking(
            lines in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..80), 0..12),
            timestamps in proptest::prelude::any::<bool>(),
            limit in proptest::option::of(0u64..200),
        ) {
            let mut r = Renderer::new(RenderOptions { timestamps, since: None, limit_bytes: limit });
            let mut out = Vec::new();
            for line in &lines {
                let _ = parse_record(line);
                r.push_line(line, &mut out);
            }
            r.finish(&mut out);
            if let Some(limit) = limit {
                proptest::prop_assert!(out.len() as u64 <= limit);
            }
        }

        #[test]
        fn record_shaped_lines_render_without_panicking(
            lines in proptest::collection::vec(
                "[0-9T:.Z+-]{0,35} (stdout|stderr|x) [PFX]? ?\\PC{0,20}\n?", 0..12),
            limit in proptest::option::of(0u64..200),
        ) {
            let mut r = Renderer::new(RenderOptions { timestamps: true, since: None, limit_bytes: limit });
            let mut out = Vec::new();
            for line in &lines {
                if line.ends_with('\n') {
                    r.push_line(line.as_bytes(), &mut out);
                } else {
                    r.push_incomplete(line.as_bytes(), &mut out);
                }
            }
            r.finish(&mut out);
        }
    }
}
