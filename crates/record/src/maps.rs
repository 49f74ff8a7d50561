//! Parsing copies of `/proc/self/maps` written by the program.

/// One line of a maps file.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MapLine {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// Permissions as the kernel writes them (`r-xp`).
    pub perms: String,
    /// File offset mapped at `start`.
    pub offset: u64,
    /// Path or pseudo-name (`[heap]`), empty for anonymous memory.
    pub path: String,
}

/// Parses one line: `start-end perms offset dev inode [path]`. `None` for
/// anything malformed (the file is written by the program: untrusted).
pub fn parse_line(line: &str) -> Option<MapLine> {
    let mut rest = line.trim_end_matches('\n');
    let mut field = || {
        let t = rest.trim_start_matches(' ');
        let end = t.find(' ').unwrap_or(t.len());
        let (f, r) = t.split_at(end);
        rest = r;
        (!f.is_empty()).then_some(f)
    };
    let range = field()?;
    let perms = field()?;
    let offset = field()?;
    let _dev = field()?;
    let _inode = field()?;
    let (s, e) = range.split_once('-')?;
    let start = u64::from_str_radix(s, 16).ok()?;
    let end = u64::from_str_radix(e, 16).ok()?;
    if end < start || perms.len() != 4 {
        return None;
    }
    Some(MapLine {
        start,
        end,
        perms: perms.to_string(),
        offset: u64::from_str_radix(offset, 16).ok()?,
        path: unescape_path(rest.trim_start_matches(' ')),
    })
}

/// The kernel writes a newline in a mapped file's path as `\012` (the one
/// character its maps files escape; a backslash is not). A path with that
/// sequence is read as a newline when the file does not exist as written
/// but does with the newline: then symbols and build-ids are found in
/// the real file. Any other path is kept as written.
fn unescape_path(p: &str) -> String {
    if !p.contains("\\012") || !p.starts_with('/') {
        return p.to_string();
    }
    let real = p.replace("\\012", "\n");
    if !std::path::Path::new(p).exists() && std::path::Path::new(&real).exists() {
        real
    } else {
        p.to_string()
    }
}

/// Parses the complete lines of `text`; returns them and the number of
/// bytes consumed (a last line without `\n` may still be being written).
pub fn parse_complete(text: &[u8]) -> (Vec<MapLine>, usize) {
    let used = text.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let lines = String::from_utf8_lossy(&text[..used])
        .lines()
        .filter_map(parse_line)
        .collect();
    (lines, used)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_newline_the_kernel_escaped_in_a_path_is_read_back() {
        let d = tempfile::tempdir().unwrap();
        let real = d.path().join("odd\nname.so");
        std::fs::write(&real, b"x").unwrap();
        let shown = real.to_str().unwrap().replace('\n', "\\012");
        let l = parse_line(&format!("1000-2000 r-xp 00000000 00:00 0 {shown}")).unwrap();
        assert_eq!(l.path, real.to_str().unwrap());
        // A path that really holds the four characters stays as it is.
        let lit = d.path().join("lit\\012eral");
        std::fs::write(&lit, b"x").unwrap();
        let l = parse_line(&format!(
            "1000-2000 r-xp 00000000 00:00 0 {}",
            lit.display()
        ))
        .unwrap();
        assert_eq!(l.path, lit.to_str().unwrap());
    }

    #[test]
    fn parses_real_and_rejects_junk() {
        let l = parse_line(
            "7f1c2a400000-7f1c2a428000 r--p 00000000 fe:01 1835   /usr/lib/x86_64-linux-gnu/libc.so.6\n",
        )
        .unwrap();
        assert_eq!(l.start, 0x7f1c2a400000);
        assert_eq!(l.end, 0x7f1c2a428000);
        assert_eq!(l.perms, "r--p");
        assert_eq!(l.path, "/usr/lib/x86_64-linux-gnu/libc.so.6");
        let a = parse_line("7ffd1000-7ffd2000 rw-p 00000000 00:00 0 ").unwrap();
        assert_eq!(a.path, "");
        let s =
            parse_line("1000-2000 r-xp 00001000 00:00 0  /a path/with spaces (deleted)").unwrap();
        assert_eq!(s.path, "/a path/with spaces (deleted)");
        assert_eq!(parse_line("zzzz"), None);
        assert_eq!(parse_line("2000-1000 r-xp 0 0 0"), None);
        assert_eq!(parse_line(""), None);
        let (v, used) = parse_complete(b"1000-2000 r-xp 0 0:0 0 /x\n3000-4000 r-x");
        assert_eq!((v.len(), used), (1, 26));
    }
}
