//! Gzipped `profile.proto` (the format `go tool pprof` reads), shaped like
//! Go's contention profile: sample types `contentions/count` and
//! `delay/nanoseconds` (period type `contentions/count`, period 1), plus a
//! third, `blame/nanoseconds`, for the wait charged to holders' call
//! paths. Waiter samples carry `[contentions, delay, 0]` and holder
//! samples `[0, 0, blame]`, so `-sample_index=delay` (the default)
//! shows who waited and `-sample_index=blame` whose critical sections
//! made them wait. Each sample's leaf is the lock (`lock NAME`), and it
//! carries the labels `lock` and `role` (`waiter`/`holder`), and the
//! trace's labels (`host`, `command`, `record --label`).
//!
//! The protobuf is written by a small encoder here (the message has a
//! dozen fields; a code generator would be a heavier dependency than the
//! format).

use std::collections::HashMap;
use std::io::Write;

use crate::stacks::{parse_frame, FrameLine, Stacks, WeightedStack};

/// Protobuf wire writer: varints and length-delimited fields.
#[derive(Default)]
struct Pb(Vec<u8>);

impl Pb {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }
    fn key(&mut self, field: u32, wire: u8) {
        self.varint((u64::from(field) << 3) | u64::from(wire));
    }
    /// An int64/uint64 field; zero is the default and is not written.
    fn int(&mut self, field: u32, v: u64) {
        if v != 0 {
            self.key(field, 0);
            self.varint(v);
        }
    }
    fn bool(&mut self, field: u32, v: bool) {
        self.int(field, u64::from(v));
    }
    fn bytes(&mut self, field: u32, b: &[u8]) {
        self.key(field, 2);
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
    }
    fn packed(&mut self, field: u32, vs: &[u64]) {
        let mut p = Pb::default();
        for &v in vs {
            p.varint(v);
        }
        self.bytes(field, &p.0);
    }
}

/// The string table: index 0 is the empty string, as the format requires.
struct Strings {
    table: Vec<String>,
    index: HashMap<String, u64>,
}

impl Strings {
    fn new() -> Self {
        let mut s = Strings {
            table: Vec::new(),
            index: HashMap::new(),
        };
        s.id("");
        s
    }
    fn id(&mut self, s: &str) -> u64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as u64;
        self.table.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

/// What the profile says about where it came from.
#[derive(Clone, Debug, Default)]
pub struct ProfileInfo {
    /// The recorded command line (the mapping's file name is its first
    /// word).
    pub command: Vec<String>,
    /// Length of the recording, ns.
    pub duration_ns: u64,
    /// The trace's labels (`host`, `command`, the user's), given to every
    /// sample so that a continuous profiler can group by them.
    pub labels: Vec<(String, String)>,
}

/// Encodes the profile (uncompressed protobuf bytes).
pub fn encode(stacks: &Stacks, info: &ProfileInfo) -> Vec<u8> {
    let mut st = Strings::new();
    let mut functions: HashMap<(String, Option<String>), u64> = HashMap::new();
    let mut fn_msgs: Vec<Vec<u8>> = Vec::new();
    let mut locations: HashMap<Vec<FrameLine>, u64> = HashMap::new();
    let mut loc_msgs: Vec<Vec<u8>> = Vec::new();
    let mut samples: Vec<Vec<u8>> = Vec::new();

    let mut function_id = |st: &mut Strings, fl: &FrameLine| -> u64 {
        let key = (fl.function.clone(), fl.file.clone());
        if let Some(&id) = functions.get(&key) {
            return id;
        }
        let id = fn_msgs.len() as u64 + 1;
        let mut m = Pb::default();
        m.int(1, id);
        let name = st.id(&fl.function);
        m.int(2, name);
        m.int(3, name);
        if let Some(f) = &fl.file {
            let f = st.id(f);
            m.int(4, f);
        }
        fn_msgs.push(m.0);
        functions.insert(key, id);
        id
    };
    let mut location_id = |st: &mut Strings, lines: Vec<FrameLine>| -> u64 {
        if let Some(&id) = locations.get(&lines) {
            return id;
        }
        let id = loc_msgs.len() as u64 + 1;
        let mut m = Pb::default();
        m.int(1, id);
        m.int(2, 1);
        // A distinct made-up address per location: pprof keys some
        // merges by address, and these locations have none.
        m.int(3, 0x1000 + id * 16);
        for fl in &lines {
            let mut l = Pb::default();
            l.int(1, function_id(st, fl));
            l.int(2, u64::from(fl.line));
            m.bytes(4, &l.0);
        }
        loc_msgs.push(m.0);
        locations.insert(lines, id);
        id
    };
    let lock_key = st.id("lock");
    let role_key = st.id("role");
    let trace_labels: Vec<(u64, u64)> = info
        .labels
        .iter()
        // `lock` and `role` are the sample's own.
        .filter(|(k, _)| k != "lock" && k != "role")
        .map(|(k, v)| (st.id(k), st.id(v)))
        .collect();
    let mut sample = |st: &mut Strings, s: &WeightedStack, role: &str, values: [u64; 3]| {
        if values.iter().all(|&v| v == 0) {
            return;
        }
        let mut ids = vec![location_id(
            st,
            vec![FrameLine {
                function: format!("lock {}", s.lock),
                file: None,
                line: 0,
            }],
        )];
        for f in &s.frames {
            ids.push(location_id(st, parse_frame(f)));
        }
        let mut m = Pb::default();
        m.packed(1, &ids);
        m.packed(2, &values);
        let own = [(lock_key, st.id(&s.lock)), (role_key, st.id(role))];
        for &(k, v) in own.iter().chain(&trace_labels) {
            let mut l = Pb::default();
            l.int(1, k);
            l.int(2, v);
            m.bytes(3, &l.0);
        }
        samples.push(m.0);
    };
    for s in &stacks.waiters {
        sample(&mut st, s, "waiter", [s.count, s.wait_ns, 0]);
    }
    for s in &stacks.holders {
        sample(&mut st, s, "holder", [0, 0, s.wait_ns]);
    }

    let mut p = Pb::default();
    for (t, u) in [
        ("contentions", "count"),
        ("delay", "nanoseconds"),
        ("blame", "nanoseconds"),
    ] {
        let mut v = Pb::default();
        v.int(1, st.id(t));
        v.int(2, st.id(u));
        p.bytes(1, &v.0);
    }
    for s in &samples {
        p.bytes(2, s);
    }
    let mut m = Pb::default();
    m.int(1, 1);
    m.int(2, 0x1000);
    m.int(3, 0x1000 + (loc_msgs.len() as u64 + 2) * 16);
    let file = info.command.first().map_or("", String::as_str);
    m.int(5, st.id(file));
    m.bool(7, true);
    m.bool(8, true);
    m.bool(9, true);
    m.bool(10, true);
    p.bytes(3, &m.0);
    for l in &loc_msgs {
        p.bytes(4, l);
    }
    for f in &fn_msgs {
        p.bytes(5, f);
    }
    let period_type = {
        let mut v = Pb::default();
        v.int(1, st.id("contentions"));
        v.int(2, st.id("count"));
        v.0
    };
    let comment = st.id(&format!("lockscope: {}", info.command.join(" ")));
    let default_type = st.id("delay");
    // The string table goes last: every id above has been assigned.
    for s in &st.table {
        p.bytes(6, s.as_bytes());
    }
    p.int(10, info.duration_ns);
    p.bytes(11, &period_type);
    p.int(12, 1);
    p.key(13, 0);
    p.varint(comment);
    p.int(14, default_type);
    p.0
}

/// Writes the gzipped profile.
pub fn write(stacks: &Stacks, info: &ProfileInfo, out: &mut dyn Write) -> std::io::Result<()> {
    let mut gz = flate2::write::GzEncoder::new(out, flate2::Compression::default());
    gz.write_all(&encode(stacks, info))?;
    gz.finish()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints() {
        let mut p = Pb::default();
        p.varint(1);
        p.varint(300);
        p.varint(u64::MAX);
        assert_eq!(&p.0[..3], &[1, 0xac, 0x02]);
        assert_eq!(p.0.len(), 3 + 10);
    }

    #[test]
    fn string_table_starts_empty_and_dedups() {
        let mut s = Strings::new();
        assert_eq!(s.id("a"), 1);
        assert_eq!(s.id(""), 0);
        assert_eq!(s.id("a"), 1);
        assert_eq!(s.table, vec!["".to_string(), "a".to_string()]);
    }
}
