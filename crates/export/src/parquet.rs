//! Reports of many traces as Parquet tables, for the query engines a fleet
//! already runs (DuckDB, Spark, Trino, BigQuery): `lockscope export
//! --format parquet TRACE... -o DIR`.
//!
//! One file per table in the output directory (`runs`, `labels`, `locks`,
//! `sites`, `threads`; columns in [`TABLES`], documented in
//! docs/fleet.md), one row group per trace. Every figure is a field of the
//! trace's [`Report`] (the model `lockscope report --json` prints), so a
//! query's per-lock total is the report's, and numbers a futex word does
//! not show are null as in the JSON. The schema has a version
//! ([`SCHEMA_VERSION`], in `runs.schema_version` and in each file's
//! key-value metadata) that changes when a column changes meaning or
//! disappears; new columns are added at the end without a change.
//!
//! Memory: a trace's report is built in bounded memory and only its
//! summary rows are held, one row group at a time: a 100M-event trace
//! costs what its report costs. Files are written beside their final
//! name and renamed once every trace is in, so a failed export leaves no
//! half-written table.
//!
//! Written with the `parquet` crate's low-level column writers (no Arrow:
//! five flat tables of strings and integers do not need it, and Arrow
//! would add a large dependency tree), Snappy-compressed.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use lockscope_report::Report;
use parquet::basic::Compression;
use parquet::data_type::{ByteArray, ByteArrayType, DoubleType, Int64Type};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;

use crate::ExportError;

/// Version of the tables' layout (docs/fleet.md).
pub const SCHEMA_VERSION: i64 = 1;

/// A column's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// UTF-8 text.
    Text,
    /// 64-bit signed integer (ns, counts, ids).
    Int,
    /// 64-bit float (ratios).
    Float,
}

/// A column: (name, type, nullable).
pub type Column = (&'static str, Kind, bool);

/// The tables and their columns.
pub const TABLES: &[(&str, &[Column])] = &[
    (
        "runs",
        &[
            ("run_id", Kind::Text, false),
            ("trace", Kind::Text, false),
            ("command", Kind::Text, false),
            ("host", Kind::Text, false),
            ("start_unix_ns", Kind::Int, false),
            ("duration_ns", Kind::Int, false),
            ("events", Kind::Int, false),
            ("lost_events", Kind::Int, false),
            ("lockscope_version", Kind::Text, false),
            ("schema_version", Kind::Int, false),
        ],
    ),
    (
        "labels",
        &[
            ("run_id", Kind::Text, false),
            ("key", Kind::Text, false),
            ("value", Kind::Text, false),
        ],
    ),
    (
        "locks",
        &[
            ("run_id", Kind::Text, false),
            ("lock", Kind::Text, false),
            ("kind", Kind::Text, false),
            ("first_use", Kind::Text, false),
            ("address", Kind::Text, false),
            ("pid", Kind::Int, false),
            ("acquisitions", Kind::Int, true),
            ("contended", Kind::Int, false),
            ("contended_ratio", Kind::Float, true),
            ("trylock_failures", Kind::Int, false),
            ("timeouts", Kind::Int, false),
            ("owner_changes", Kind::Int, true),
            ("wait_ns", Kind::Int, false),
            ("wait_count", Kind::Int, false),
            ("wait_max_ns", Kind::Int, false),
            ("wait_p99_ns", Kind::Int, false),
            ("hold_ns", Kind::Int, true),
            ("hold_max_ns", Kind::Int, true),
        ],
    ),
    (
        "sites",
        &[
            ("run_id", Kind::Text, false),
            ("lock", Kind::Text, false),
            ("pid", Kind::Int, false),
            ("address", Kind::Text, false),
            ("site", Kind::Text, false),
            ("function", Kind::Text, true),
            ("file", Kind::Text, true),
            ("line", Kind::Int, true),
            ("acquisitions", Kind::Int, true),
            ("contended", Kind::Int, false),
            ("wait_ns", Kind::Int, false),
            ("max_wait_ns", Kind::Int, false),
            ("hold_ns", Kind::Int, true),
        ],
    ),
    (
        "threads",
        &[
            ("run_id", Kind::Text, false),
            ("pid", Kind::Int, false),
            ("tid", Kind::Int, false),
            ("name", Kind::Text, false),
            ("lifetime_ns", Kind::Int, false),
            ("lock_ns", Kind::Int, false),
            ("hold_ns", Kind::Int, false),
            ("blocked_ns", Kind::Int, false),
            ("cond_wait_ns", Kind::Int, false),
            ("running_ns", Kind::Int, false),
            ("events", Kind::Int, false),
            ("lost_events", Kind::Int, false),
        ],
    ),
    // The per-event tables (`--events`): each is written only then.
    (
        "waits",
        &[
            ("run_id", Kind::Text, false),
            ("pid", Kind::Int, false),
            ("tid", Kind::Int, false),
            ("lock", Kind::Text, false),
            ("address", Kind::Text, false),
            ("start_ns", Kind::Int, false),
            ("wait_ns", Kind::Int, false),
            ("site", Kind::Text, false),
            ("path_id", Kind::Int, true),
            ("holder_tid", Kind::Int, true),
            ("holder_release_ns", Kind::Int, true),
            ("holder_path_id", Kind::Int, true),
        ],
    ),
    (
        "holds",
        &[
            ("run_id", Kind::Text, false),
            ("pid", Kind::Int, false),
            ("tid", Kind::Int, false),
            ("lock", Kind::Text, false),
            ("address", Kind::Text, false),
            ("start_ns", Kind::Int, false),
            ("hold_ns", Kind::Int, false),
            ("site", Kind::Text, false),
            ("path_id", Kind::Int, true),
        ],
    ),
    (
        "call_paths",
        &[
            ("run_id", Kind::Text, false),
            ("path_id", Kind::Int, false),
            ("frames", Kind::Text, false),
            ("depth", Kind::Int, false),
        ],
    ),
];

/// The tables written only with `--events`.
const EVENT_TABLES: &[&str] = &["waits", "holds", "call_paths"];

/// Rows of a per-event table held before they are written as a row
/// group: bounds the memory of a 100M-event export.
const EVENT_ROWS_PER_GROUP: usize = 1 << 16;

/// One value of a row. Text is a `ByteArray` (reference-counted bytes):
/// a name repeated on millions of event rows is one shared buffer, cloned
/// by a count increment (a `String` per row made allocation most of the
/// export's time).
#[derive(Clone, Debug)]
enum V {
    T(ByteArray),
    I(i64),
    F(f64),
    Null,
}

fn i(v: u64) -> V {
    V::I(i64::try_from(v).unwrap_or(i64::MAX))
}

fn opt_i(v: Option<u64>) -> V {
    v.map_or(V::Null, i)
}

fn t(s: &str) -> V {
    V::T(ByteArray::from(s))
}

/// What identifies a run besides its report: where it came from.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RunInfo {
    /// Stable id of the trace: a digest of its header, size and first
    /// bytes ([`run_id`]).
    pub run_id: String,
    /// The trace's path as given.
    pub trace: String,
    /// When the recording started, ns since the Unix epoch.
    pub start_unix_ns: u64,
    /// The lockscope version that recorded it.
    pub lockscope_version: String,
}

impl RunInfo {
    /// A run's identity.
    pub fn new(
        run_id: String,
        trace: String,
        start_unix_ns: u64,
        lockscope_version: String,
    ) -> RunInfo {
        RunInfo {
            run_id,
            trace,
            start_unix_ns,
            lockscope_version,
        }
    }
}

/// A stable id for a trace file: 16 hex digits of a 64-bit FNV-1a digest
/// of its size and its first 64 KiB (header, first tables and events).
/// Not of the whole file: a 10 GB trace would be read once more for it.
/// Two recordings differ in their header's start time already.
pub fn run_id(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let f = File::open(path)?;
    let len = f.metadata()?.len();
    let mut head = Vec::with_capacity(1 << 16);
    f.take(1 << 16).read_to_end(&mut head)?;
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in len.to_le_bytes().iter().chain(head.iter()) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    Ok(format!("{h:016x}"))
}

/// The Parquet message type of a table.
fn message_type(table: &str, cols: &[Column]) -> String {
    let mut s = format!("message {table} {{\n");
    for (name, kind, nullable) in cols {
        let rep = if *nullable { "OPTIONAL" } else { "REQUIRED" };
        let ty = match kind {
            Kind::Text => "BYTE_ARRAY",
            Kind::Int => "INT64",
            Kind::Float => "DOUBLE",
        };
        let ann = if *kind == Kind::Text { " (UTF8)" } else { "" };
        s.push_str(&format!("  {rep} {ty} {name}{ann};\n"));
    }
    s.push('}');
    s
}

fn pq(e: parquet::errors::ParquetError) -> ExportError {
    ExportError::Io(std::io::Error::other(e.to_string()))
}

/// One table being written: its file (under a temporary name) and the
/// rows of the current trace.
struct TableOut {
    name: &'static str,
    cols: &'static [Column],
    writer: Option<SerializedFileWriter<File>>,
    tmp: PathBuf,
    dest: PathBuf,
    rows: Vec<Vec<V>>,
}

/// The Parquet tables of `lockscope export --format parquet`.
pub struct ParquetExport {
    tables: Vec<TableOut>,
}

impl ParquetExport {
    /// Creates the tables in `dir` (created if missing), the per-event
    /// ones too when `events`. Existing tables there are replaced only by
    /// [`ParquetExport::finish`].
    pub fn create(dir: &Path, events: bool) -> Result<ParquetExport, ExportError> {
        std::fs::create_dir_all(dir).map_err(ExportError::Io)?;
        let props = Arc::new(
            WriterProperties::builder()
                .set_compression(Compression::SNAPPY)
                .set_created_by(format!("lockscope {}", env!("CARGO_PKG_VERSION")))
                .set_key_value_metadata(Some(vec![KeyValue::new(
                    "lockscope.schema_version".to_string(),
                    SCHEMA_VERSION.to_string(),
                )]))
                .build(),
        );
        let mut tables = Vec::new();
        for (name, cols) in TABLES {
            if !events && EVENT_TABLES.contains(name) {
                continue;
            }
            let schema = Arc::new(parse_message_type(&message_type(name, cols)).map_err(pq)?);
            let dest = dir.join(format!("{name}.parquet"));
            let tmp = dir.join(format!(".{name}.parquet.partial"));
            let file = File::create(&tmp).map_err(ExportError::Io)?;
            let writer = SerializedFileWriter::new(file, schema, props.clone()).map_err(pq)?;
            tables.push(TableOut {
                name,
                cols,
                writer: Some(writer),
                tmp,
                dest,
                rows: Vec::new(),
            });
        }
        Ok(ParquetExport { tables })
    }

    fn table(&mut self, name: &str) -> &mut TableOut {
        self.tables
            .iter_mut()
            .find(|t| t.name == name)
            .expect("a table that was created")
    }

    /// Adds one trace: its rows in every table, as one row group each.
    pub fn add(&mut self, run: &RunInfo, r: &Report) -> Result<(), ExportError> {
        let id = || t(&run.run_id);
        let label = |k: &str| r.labels.get(k).cloned().unwrap_or_default();
        self.table("runs").rows.push(vec![
            id(),
            t(&run.trace),
            t(&r.command.join(" ")),
            t(&label("host")),
            i(run.start_unix_ns),
            i(r.duration_ns),
            i(r.events),
            i(r.lost_events),
            t(&run.lockscope_version),
            V::I(SCHEMA_VERSION),
        ]);
        for (k, v) in &r.labels {
            self.table("labels").rows.push(vec![id(), t(k), t(v)]);
        }
        for l in &r.locks {
            // As in the JSON: what a futex word does not show is null.
            let seen = !l.futex_only();
            let s = |v: u64| opt_i(seen.then_some(v));
            let name = lockscope_report::fleet::lock_identity(l);
            self.table("locks").rows.push(vec![
                id(),
                t(&name),
                t(l.kind),
                t(&l.first_use),
                t(&l.address),
                i(u64::from(l.pid)),
                s(l.acquisitions),
                i(l.contended),
                if seen {
                    V::F(l.contended_ratio)
                } else {
                    V::Null
                },
                i(l.trylock_failures),
                i(l.timeouts),
                s(l.owner_changes),
                i(l.wait_ns.total),
                i(l.wait_ns.count),
                i(l.wait_ns.max),
                i(l.wait_ns.p99),
                s(l.hold_ns.total),
                s(l.hold_ns.max),
            ]);
            for x in &l.sites {
                let text = |o: &Option<String>| o.as_deref().map_or(V::Null, t);
                self.table("sites").rows.push(vec![
                    id(),
                    t(&name),
                    i(u64::from(l.pid)),
                    t(&l.address),
                    t(&x.name),
                    text(&x.function),
                    text(&x.file),
                    x.line.map_or(V::Null, |n| i(u64::from(n))),
                    s(x.acquisitions),
                    i(x.contended),
                    i(x.wait_ns),
                    i(x.max_wait_ns),
                    s(x.hold_ns),
                ]);
            }
        }
        for th in &r.threads {
            self.table("threads").rows.push(vec![
                id(),
                i(u64::from(th.pid)),
                i(u64::from(th.tid)),
                t(&th.name),
                i(th.lifetime_ns),
                i(th.lock_ns),
                i(th.hold_ns),
                i(th.blocked_ns),
                i(th.cond_wait_ns),
                i(th.running_ns),
                i(th.events),
                i(th.lost_events),
            ]);
        }
        for tb in &mut self.tables {
            tb.flush_rows()?;
        }
        Ok(())
    }

    /// Adds the per-event rows of one trace (created with `events`):
    /// every lock wait with the holder whose release let it in, every
    /// critical section, and the call paths they name. Streamed from the
    /// synchronization layer; written every 65,536 rows.
    pub fn add_events(
        &mut self,
        run: &RunInfo,
        trace: &Path,
        meta: &lockscope_trace::input::Meta,
        symbolize: bool,
    ) -> Result<(), ExportError> {
        use crate::timeline::{self, Item, SpanKind};
        use std::collections::{BTreeSet, HashMap};
        let threads: HashMap<u32, (u32, u32, u32)> = timeline::threads(meta)
            .into_iter()
            .map(|t| (t.id, (t.pid, t.tid, t.process)))
            .collect();
        let mut names = crate::names::Names::new(meta, symbolize);
        let mut last_hold: HashMap<(u32, lockscope_trace::sync::ObjId), u32> = HashMap::new();
        let mut paths: BTreeSet<(u32, u32)> = BTreeSet::new();
        // Names formatted once per lock and per site, not per row (a
        // site's name is a symbol lookup and a format).
        let mut obj_names: HashMap<lockscope_trace::sync::ObjId, (ByteArray, ByteArray)> =
            HashMap::new();
        let mut site_names: HashMap<(u32, u64, u32), ByteArray> = HashMap::new();
        let run_id = ByteArray::from(run.run_id.as_str());
        // A wait waits for the hand-off that follows it (if any).
        let mut pending: Option<Vec<V>> = None;
        let mut pending_key: Option<(u32, lockscope_trace::sync::ObjId)> = None;
        let mut err = None;
        let path_v = |stack: u32| {
            if stack == 0 {
                V::Null
            } else {
                i(u64::from(stack))
            }
        };
        let emit = |this: &mut ParquetExport, table: &str, row: Vec<V>| {
            let t = this.table(table);
            t.rows.push(row);
            if t.rows.len() >= EVENT_ROWS_PER_GROUP {
                t.flush_rows()
            } else {
                Ok(())
            }
        };
        timeline::scan(trace, meta, |item| {
            if err.is_some() {
                return;
            }
            let mut out: Vec<(&str, Vec<V>)> = Vec::new();
            let handoff = match item {
                Item::HandOff {
                    lock,
                    from,
                    from_ns,
                    to,
                    ..
                } if pending_key == Some((to, lock)) => Some((from, from_ns, lock)),
                _ => None,
            };
            if let Some(mut row) = pending.take() {
                if let Some((from, from_ns, lock)) = handoff {
                    let holder = threads.get(&from).map_or(0, |t| t.1);
                    let hp = last_hold.get(&(from, lock)).copied().unwrap_or(0);
                    if hp != 0 {
                        paths.insert((threads.get(&from).map_or(0, |t| t.2), hp));
                    }
                    row[9] = i(u64::from(holder));
                    row[10] = i(from_ns);
                    row[11] = path_v(hp);
                }
                pending_key = None;
                out.push(("waits", row));
            }
            if let Item::Span {
                thread,
                kind,
                obj: Some(obj),
                start_ns,
                end_ns,
                site,
                stack,
            } = item
            {
                if matches!(kind, SpanKind::Wait | SpanKind::Hold) {
                    let (pid, tid, process) = threads.get(&thread).copied().unwrap_or_default();
                    if stack != 0 {
                        paths.insert((process, stack));
                    }
                    let mut row = vec![
                        V::T(run_id.clone()),
                        i(u64::from(pid)),
                        i(u64::from(tid)),
                        V::T(
                            obj_names
                                .entry(obj)
                                .or_insert_with(|| {
                                    (
                                        ByteArray::from(names.object(obj).as_str()),
                                        ByteArray::from(format!("{:#x}", obj.addr).as_str()),
                                    )
                                })
                                .0
                                .clone(),
                        ),
                        V::T(obj_names[&obj].1.clone()),
                        i(start_ns),
                        i(end_ns.saturating_sub(start_ns)),
                        V::T(
                            site_names
                                .entry((process, site, stack))
                                .or_insert_with(|| {
                                    ByteArray::from(names.site(process, site, stack).as_str())
                                })
                                .clone(),
                        ),
                        path_v(stack),
                    ];
                    if kind == SpanKind::Hold {
                        last_hold.insert((thread, obj), stack);
                        out.push(("holds", row));
                    } else {
                        row.extend([V::Null, V::Null, V::Null]);
                        pending = Some(row);
                        pending_key = Some((thread, obj));
                    }
                }
            }
            for (table, row) in out {
                if let Err(e) = emit(self, table, row) {
                    err = Some(e);
                    return;
                }
            }
        })?;
        if let Some(e) = err {
            return Err(e);
        }
        if let Some(row) = pending {
            emit(self, "waits", row)?;
        }
        for (process, stack) in paths {
            let frames = names.path(process, stack);
            self.table("call_paths").rows.push(vec![
                t(&run.run_id),
                i(u64::from(stack)),
                t(&frames.join("; ")),
                i(frames.len() as u64),
            ]);
            if self.table("call_paths").rows.len() >= EVENT_ROWS_PER_GROUP {
                self.table("call_paths").flush_rows()?;
            }
        }
        for name in EVENT_TABLES {
            self.table(name).flush_rows()?;
        }
        Ok(())
    }

    /// Closes every table and puts it in place; returns their paths.
    pub fn finish(self) -> Result<Vec<PathBuf>, ExportError> {
        let mut done = Vec::new();
        for mut tb in self.tables {
            if let Some(w) = tb.writer.take() {
                w.close().map_err(pq)?;
            }
            std::fs::rename(&tb.tmp, &tb.dest).map_err(ExportError::Io)?;
            done.push(tb.dest.clone());
        }
        Ok(done)
    }
}

impl TableOut {
    /// Writes the rows held as one row group (none: nothing written).
    fn flush_rows(&mut self) -> Result<(), ExportError> {
        if self.rows.is_empty() {
            return Ok(());
        }
        let rows = std::mem::take(&mut self.rows);
        let Some(writer) = self.writer.as_mut() else {
            return Ok(());
        };
        let mut rg = writer.next_row_group().map_err(pq)?;
        let mut c = 0;
        while let Some(mut col) = rg.next_column().map_err(pq)? {
            let (_, kind, nullable) = self.cols[c];
            let defs: Vec<i16> = rows
                .iter()
                .map(|r| i16::from(!matches!(r[c], V::Null)))
                .collect();
            let defs = nullable.then_some(&defs[..]);
            match kind {
                Kind::Text => {
                    write_column::<ByteArrayType>(&mut col, &rows, c, defs, |v| match v {
                        V::T(s) => Some(s.clone()),
                        _ => None,
                    })?
                }
                Kind::Int => write_column::<Int64Type>(&mut col, &rows, c, defs, |v| match v {
                    V::I(x) => Some(*x),
                    _ => None,
                })?,
                Kind::Float => write_column::<DoubleType>(&mut col, &rows, c, defs, |v| match v {
                    V::F(x) => Some(*x),
                    _ => None,
                })?,
            }
            col.close().map_err(pq)?;
            c += 1;
        }
        rg.close().map_err(pq)?;
        Ok(())
    }
}

/// Writes column `c` of `rows`: the values `get` finds (nulls have
/// none), with the definition levels `defs` of a nullable column.
fn write_column<T: parquet::data_type::DataType>(
    col: &mut parquet::file::writer::SerializedColumnWriter<'_>,
    rows: &[Vec<V>],
    c: usize,
    defs: Option<&[i16]>,
    get: impl Fn(&V) -> Option<T::T>,
) -> Result<(), ExportError> {
    let v: Vec<T::T> = rows.iter().filter_map(|r| get(&r[c])).collect();
    col.typed::<T>().write_batch(&v, defs, None).map_err(pq)?;
    Ok(())
}

impl Drop for TableOut {
    fn drop(&mut self) {
        // Uncommitted (an error, a panic): no half-written table is left.
        // After `finish` the temporary no longer exists.
        let _ = std::fs::remove_file(&self.tmp);
    }
}
