//! The text format: a header line naming the columns, then one row per
//! trace message. See the crate documentation for the grammar.

use crate::HwtraceError;

/// Most columns a header may name (every known one once).
const MAX_COLUMNS: usize = 7;
/// Longest core or thread name kept.
const MAX_NAME: usize = 64;

/// What a row records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// An instruction executed at `address` (program-flow trace).
    Ip,
    /// A read of `width` bytes.
    Read(u8),
    /// A write of `width` bytes.
    Write(u8),
    /// An atomic read-modify-write of `width` bytes.
    Atomic(u8),
    /// Schedule: from this time on, the origin core runs thread `address`
    /// (0: the core is idle).
    Thread,
}

impl Operation {
    /// Width in bytes of an access (0 for `IP` and `THREAD`).
    pub fn width(self) -> u8 {
        match self {
            Operation::Read(w) | Operation::Write(w) | Operation::Atomic(w) => w,
            _ => 0,
        }
    }
}

/// The value column.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// `-` or empty: not known (always so for `IP`).
    None,
    /// The value read or written.
    Known(u64),
    /// `OLD>NEW`: the value found and the value left (writes and atomics).
    Change(u64, u64),
    /// A thread name (`THREAD` rows).
    Name(String),
}

/// One row of a hardware trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    /// 1-based line in its file.
    pub line: usize,
    /// Completion time in clock cycles.
    pub time: u64,
    /// Where the message was observed (kept for the record; unused).
    pub opoint: String,
    /// The core that issued the operation.
    pub origin: String,
    /// Byte column of the origin field (for later errors).
    pub origin_column: usize,
    /// Instruction or data address, or the thread id of a `THREAD` row.
    pub address: u64,
    /// What happened.
    pub operation: Operation,
    /// The value column.
    pub value: Value,
}

/// Directives of a file (`#! key=value` lines before the header).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Directives {
    /// `clock_hz`: cycles per second of the time column.
    pub clock_hz: Option<u64>,
    /// `cpus`: CPUs of the traced system (default: cores seen).
    pub cpus: Option<u32>,
}

/// A parsed file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Parsed {
    /// The file name used in errors.
    pub file: String,
    /// Rows in file order.
    pub rows: Vec<Row>,
    /// Its directives.
    pub directives: Directives,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Col {
    Index,
    Time,
    Opoint,
    Origin,
    Address,
    Operation,
    Value,
}

impl Col {
    fn from_name(s: &str) -> Option<Col> {
        Some(match s.to_ascii_lowercase().as_str() {
            "index" => Col::Index,
            "time" => Col::Time,
            "opoint" => Col::Opoint,
            "origin" => Col::Origin,
            "address" => Col::Address,
            "operation" => Col::Operation,
            "value" => Col::Value,
            _ => return None,
        })
    }
    fn name(self) -> &'static str {
        match self {
            Col::Index => "index",
            Col::Time => "time",
            Col::Opoint => "opoint",
            Col::Origin => "origin",
            Col::Address => "address",
            Col::Operation => "operation",
            Col::Value => "value",
        }
    }
}

struct Ctx<'a> {
    file: &'a str,
    line: usize,
}

impl Ctx<'_> {
    fn err(&self, column: usize, message: impl Into<String>) -> HwtraceError {
        HwtraceError::Parse {
            file: self.file.to_string(),
            line: self.line,
            column,
            message: message.into(),
        }
    }
}

/// Splits a line into trimmed fields with their 1-based byte columns.
fn fields(line: &str, delim: char) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut start = 0usize;
    for part in line.split(delim) {
        let lead = part.len() - part.trim_start().len();
        out.push((start + lead + 1, part.trim()));
        start += part.len() + delim.len_utf8();
    }
    out
}

/// Parses a number: decimal, or hexadecimal with `0x`.
pub fn number(s: &str) -> Option<u64> {
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        if h.is_empty() || h.len() > 16 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        return u64::from_str_radix(h, 16).ok();
    }
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn operation(s: &str) -> Option<Operation> {
    let u = s.to_ascii_uppercase();
    if u == "IP" {
        return Some(Operation::Ip);
    }
    if u == "THREAD" {
        return Some(Operation::Thread);
    }
    let mut chars = u.chars();
    let k = chars.next()?;
    let w = match chars.as_str() {
        "8" => 1,
        "16" => 2,
        "32" => 4,
        "64" => 8,
        _ => return None,
    };
    match k {
        'R' => Some(Operation::Read(w)),
        'W' => Some(Operation::Write(w)),
        'A' => Some(Operation::Atomic(w)),
        _ => None,
    }
}

fn fits(v: u64, width: u8) -> bool {
    width >= 8 || v >> (u32::from(width) * 8) == 0
}

fn directive(c: &Ctx, text: &str, column: usize, d: &mut Directives) -> Result<(), HwtraceError> {
    let Some((k, v)) = text.split_once('=') else {
        return Err(c.err(column, format!("directive {text:?} is not key=value")));
    };
    let (k, v) = (k.trim(), v.trim());
    let n = number(v).ok_or_else(|| c.err(column, format!("{k}: {v:?} is not a number")))?;
    match k {
        "clock_hz" if n > 0 => d.clock_hz = Some(n),
        "cpus" if n > 0 && n <= u64::from(u32::MAX) => d.cpus = Some(n as u32),
        "clock_hz" | "cpus" => return Err(c.err(column, format!("{k} = {n} is out of range"))),
        _ => {
            return Err(c.err(
                column,
                format!("unknown directive {k:?} (known: clock_hz, cpus)"),
            ))
        }
    }
    Ok(())
}

/// Parses one file's bytes. `file` names it in errors.
pub fn parse(file: &str, data: &[u8]) -> Result<Parsed, HwtraceError> {
    let mut p = Parsed {
        file: file.to_string(),
        ..Parsed::default()
    };
    let mut header: Option<(char, Vec<Col>)> = None;
    for (i, raw) in data.split(|&b| b == b'\n').enumerate() {
        let c = Ctx { file, line: i + 1 };
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        let line =
            std::str::from_utf8(raw).map_err(|e| c.err(e.valid_up_to() + 1, "not UTF-8 text"))?;
        let t = line.trim();
        if t.is_empty() {
            continue;
        }
        if let Some(rest) = t.strip_prefix("#!") {
            if header.is_some() {
                return Err(c.err(1, "directives (#!) must come before the header line"));
            }
            let col = line.find("#!").unwrap_or(0) + 3 + (rest.len() - rest.trim_start().len());
            directive(&c, rest.trim(), col, &mut p.directives)?;
            continue;
        }
        if t.starts_with('#') {
            continue;
        }
        let Some((delim, cols)) = &header else {
            let delim = if line.contains('\t') { '\t' } else { ',' };
            let mut cols = Vec::new();
            for (col, name) in fields(line, delim) {
                let k = Col::from_name(name).ok_or_else(|| {
                    c.err(
                        col,
                        format!(
                            "unknown column {name:?} (columns: index, time, opoint, origin, \
                             address, operation, value)"
                        ),
                    )
                })?;
                if cols.contains(&k) {
                    return Err(c.err(col, format!("column {name:?} named twice")));
                }
                cols.push(k);
            }
            debug_assert!(cols.len() <= MAX_COLUMNS);
            for need in [
                Col::Time,
                Col::Origin,
                Col::Address,
                Col::Operation,
                Col::Value,
            ] {
                if !cols.contains(&need) {
                    return Err(c.err(
                        1,
                        format!("the header line lacks the {:?} column", need.name()),
                    ));
                }
            }
            header = Some((delim, cols));
            continue;
        };
        p.rows.push(row(&c, line, *delim, cols)?);
    }
    if header.is_none() {
        return Err(HwtraceError::Parse {
            file: file.to_string(),
            line: 1,
            column: 1,
            message: "no header line (time, opoint, origin, address, operation, value)".into(),
        });
    }
    Ok(p)
}

fn row(c: &Ctx, line: &str, delim: char, cols: &[Col]) -> Result<Row, HwtraceError> {
    let f = fields(line, delim);
    if f.len() != cols.len() {
        let col = f.get(cols.len()).map_or(line.len() + 1, |x| x.0);
        return Err(c.err(
            col,
            format!("expected {} fields, found {}", cols.len(), f.len()),
        ));
    }
    let get = |k: Col| cols.iter().position(|&x| x == k).map_or((0, ""), |i| f[i]);
    let (tc, ts) = get(Col::Time);
    let time = number(ts).ok_or_else(|| c.err(tc, format!("time {ts:?} is not a cycle count")))?;
    let (oc, os) = get(Col::Operation);
    let op = operation(os).ok_or_else(|| {
        c.err(
            oc,
            format!("operation {os:?} is not IP, R8..R64, W8..W64, A8..A64 or THREAD"),
        )
    })?;
    let (gc, gs) = get(Col::Origin);
    if gs.is_empty() {
        return Err(c.err(gc, "empty origin (the core that issued the operation)"));
    }
    if gs.len() > MAX_NAME {
        return Err(c.err(gc, format!("origin longer than {MAX_NAME} bytes")));
    }
    let (ac, as_) = get(Col::Address);
    let address = number(as_).ok_or_else(|| {
        c.err(
            ac,
            if op == Operation::Thread {
                format!("thread id {as_:?} is not a number")
            } else {
                format!("address {as_:?} is not a number")
            },
        )
    })?;
    if op == Operation::Thread && address > u64::from(u32::MAX) {
        return Err(c.err(ac, format!("thread id {address} does not fit in 32 bits")));
    }
    let (vc, vs) = get(Col::Value);
    let value = if op == Operation::Thread {
        if vs.is_empty() || vs == "-" {
            Value::None
        } else if vs.len() > MAX_NAME {
            return Err(c.err(vc, format!("thread name longer than {MAX_NAME} bytes")));
        } else {
            Value::Name(vs.to_string())
        }
    } else if vs.is_empty() || vs == "-" {
        Value::None
    } else if op == Operation::Ip {
        return Err(c.err(vc, "IP rows take no value (write -)"));
    } else {
        let w = op.width();
        let num = |s: &str, col: usize| {
            let v = number(s).ok_or_else(|| c.err(col, format!("value {s:?} is not a number")))?;
            if !fits(v, w) {
                return Err(c.err(
                    col,
                    format!("value {v:#x} does not fit in {} bits", u32::from(w) * 8),
                ));
            }
            Ok(v)
        };
        match vs.split_once('>') {
            Some((o, n)) => {
                if matches!(op, Operation::Read(_)) {
                    return Err(c.err(vc, "R rows take one value, not OLD>NEW"));
                }
                let nc = vc + o.len() + 1 + (n.len() - n.trim_start().len());
                Value::Change(num(o.trim(), vc)?, num(n.trim(), nc)?)
            }
            None => Value::Known(num(vs, vc)?),
        }
    };
    if matches!(op, Operation::Atomic(_)) && value == Value::None {
        return Err(c.err(vc, "A rows need the value written"));
    }
    let (_, ps) = get(Col::Opoint);
    Ok(Row {
        line: c.line,
        time,
        opoint: ps.chars().take(MAX_NAME).collect(),
        origin: gs.to_string(),
        origin_column: gc,
        address,
        operation: op,
        value,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        parse("t.csv", text.as_bytes()).unwrap_err().to_string()
    }

    #[test]
    fn table_ii_parses_with_index_column_and_tabs() {
        let text = "Index\tTime\tOpoint\tOrigin\tAddress\tOperation\tValue\n\
                    1\t19\tCPU0\tCPU0\t0x80000A48\tIP\t-\n\
                    3\t21\tCPU1\tCPU0\t0x70000030\tR32\t0x0\n\
                    5\t37\tCPU1\tCPU0\t0x70000030\tA32\t0x1\n";
        let p = parse("t", text.as_bytes()).unwrap();
        assert_eq!(p.rows.len(), 3);
        assert_eq!(p.rows[0].operation, Operation::Ip);
        assert_eq!(p.rows[1].value, Value::Known(0));
        assert_eq!(p.rows[2].operation, Operation::Atomic(4));
        assert_eq!((p.rows[2].time, p.rows[2].address), (37, 0x7000_0030));
        assert_eq!(p.rows[2].line, 4);
    }

    #[test]
    fn directives_comments_and_changes() {
        let text = "# decoded by hand\n#! clock_hz=200000000\n#! cpus = 2\n\
                    time,origin,address,operation,value\n\
                    1,CPU0,14,THREAD,eth service\n\
                    2,CPU0,0x10,W32,0x1>0x0\n";
        let p = parse("t", text.as_bytes()).unwrap();
        assert_eq!(p.directives.clock_hz, Some(200_000_000));
        assert_eq!(p.directives.cpus, Some(2));
        assert_eq!(p.rows[0].value, Value::Name("eth service".into()));
        assert_eq!(p.rows[1].value, Value::Change(1, 0));
    }

    #[test]
    fn every_bad_line_names_file_line_and_column() {
        let h = "time,opoint,origin,address,operation,value\n";
        assert_eq!(
            err(""),
            "t.csv:1:1: no header line (time, opoint, origin, address, operation, value)"
        );
        assert_eq!(
            err("time,origin,addr,operation,value\n"),
            "t.csv:1:13: unknown column \"addr\" (columns: index, time, opoint, origin, address, operation, value)"
        );
        assert_eq!(
            err(&format!("{h}1,c,CPU0,0x10,R32,0x1\n2,c,CPU0,0x1g,R32,0\n")),
            "t.csv:3:10: address \"0x1g\" is not a number"
        );
        assert_eq!(
            err(&format!("{h}x,c,CPU0,0x10,R32,0\n")),
            "t.csv:2:1: time \"x\" is not a cycle count"
        );
        assert_eq!(
            err(&format!("{h}1,c,CPU0,0x10,R24,0\n")),
            "t.csv:2:15: operation \"R24\" is not IP, R8..R64, W8..W64, A8..A64 or THREAD"
        );
        assert_eq!(
            err(&format!("{h}1,c,CPU0,0x10,W8,0x100\n")),
            "t.csv:2:18: value 0x100 does not fit in 8 bits"
        );
        assert_eq!(
            err(&format!("{h}1,c,CPU0,0x10,R8\n")),
            "t.csv:2:17: expected 6 fields, found 5"
        );
        assert_eq!(
            err(&format!("{h}1,c,,0x10,R8,1\n")),
            "t.csv:2:5: empty origin (the core that issued the operation)"
        );
        assert_eq!(
            err(&format!("{h}1,c,CPU0,0x10,A32,-\n")),
            "t.csv:2:19: A rows need the value written"
        );
        assert_eq!(
            err(&format!("{h}1,c,CPU0,0x10,R32,1>2\n")),
            "t.csv:2:19: R rows take one value, not OLD>NEW"
        );
        assert_eq!(
            err(&format!("{h}1,c,CPU0,0x10,W8,1>0x1ff\n")),
            "t.csv:2:20: value 0x1ff does not fit in 8 bits"
        );
        assert_eq!(
            err(&format!("{h}#! clock=3\n")),
            "t.csv:2:1: directives (#!) must come before the header line"
        );
        assert_eq!(
            err("#! clock=3\n"),
            "t.csv:1:4: unknown directive \"clock\" (known: clock_hz, cpus)"
        );
        assert_eq!(
            parse(
                "t.csv",
                b"time,origin,address,operation,value\n1,\xff,1,R8,1\n"
            )
            .unwrap_err()
            .to_string(),
            "t.csv:2:3: not UTF-8 text"
        );
    }
}
