//! Text that fits a terminal: names elided in the middle but never where
//! two rows differ, prose wrapped at a width, control characters shown
//! escaped. Every text printer (the report, the detailed-mode analyses,
//! the critical path, the fleet tables) fits its names with these, so a
//! name is cut the same way wherever it is printed.

use std::fmt::Write as _;

/// Elides the middle of `s` to at most `w` characters (`head...tail`):
/// the start of a name says what it is, the end its file and line.
pub fn elide(s: &str, w: usize) -> String {
    let n = s.chars().count();
    if n <= w {
        return s.to_string();
    }
    if w < 5 {
        return s.chars().take(w).collect();
    }
    let tail = (w - 3) / 2;
    let head = w - 3 - tail;
    let mut out: String = s.chars().take(head).collect();
    out.push_str("...");
    out.extend(s.chars().skip(n - tail));
    out
}

/// Narrowest a function name inside a site name is elided to
/// (`abc...xyz`): shorter says nothing.
const MIN_FUNCTION: usize = 9;

/// One piece of a site name for [`elide_name`]: a function name (split at
/// its `::` qualifiers), a location in parentheses (split at the `/` of
/// its file's directories), or text kept as it is (` in `, ` < `, a
/// `[no user frame]` mark).
struct Piece {
    /// Components of the path; a single one for fixed text.
    comps: Vec<String>,
    /// What joins the components (`::` or `/`).
    sep: &'static str,
    /// A location: rendered within parentheses, never cut in the middle.
    loc: bool,
    /// Fixed text: never shortened.
    fixed: bool,
    /// Leading components replaced by `...`.
    dropped: usize,
    /// Length the function name is cut to in its middle, if cut.
    cut: Option<usize>,
}

impl Piece {
    fn text(s: &str) -> Piece {
        Piece {
            comps: vec![s.to_string()],
            sep: "",
            loc: false,
            fixed: true,
            dropped: 0,
            cut: None,
        }
    }
    fn path(s: &str, sep: &'static str, loc: bool) -> Piece {
        Piece {
            comps: split_top(s, sep),
            sep,
            loc,
            fixed: false,
            dropped: 0,
            cut: None,
        }
    }
    fn render_dropped(&self, dropped: usize) -> String {
        let mut s = String::new();
        if dropped > 0 {
            s.push_str("...");
            s.push_str(self.sep);
        }
        s.push_str(&self.comps[dropped..].join(self.sep));
        s
    }
    fn render(&self) -> String {
        // Cut in the middle, a name loses its `...::` mark: the cut's own
        // `...` says that something is left out.
        let mut s = match self.cut {
            Some(c) => elide(&self.comps[self.dropped..].join(self.sep), c),
            None => self.render_dropped(self.dropped),
        };
        if self.loc {
            s = format!("({s})");
        }
        s
    }
    /// The fewest more leading components whose dropping shortens the
    /// piece (`a::f` is shorter than `...::f`), if any.
    fn next_drop(&self) -> Option<usize> {
        if self.fixed || self.cut.is_some() {
            return None;
        }
        let now = self.render_dropped(self.dropped).chars().count();
        (self.dropped + 1..self.comps.len()).find(|&d| self.render_dropped(d).chars().count() < now)
    }
}

/// Splits `s` at `sep` outside brackets (`Pool<a::b>::run` has two
/// components, not three).
fn split_top(s: &str, sep: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'<' | b'(' | b'[' | b'{' => depth += 1,
            b'>' | b')' | b']' | b'}' => depth -= 1,
            _ => {}
        }
        if depth == 0 && s[i..].starts_with(sep) && i > start {
            out.push(s[start..i].to_string());
            i += sep.len();
            start = i;
            continue;
        }
        i += 1;
    }
    out.push(s[start..].to_string());
    out
}

/// True for the inside of a site name's parentheses that is a location:
/// `file:line`, `module+0xoffset`, `GPU kernel`.
fn is_location(inner: &str) -> bool {
    let line = inner.rsplit_once(':').is_some_and(|(f, l)| {
        !f.is_empty() && !l.is_empty() && l.bytes().all(|c| c.is_ascii_digit())
    });
    line || inner.contains("+0x") || inner == "GPU kernel"
}

/// Cuts a site name (`function (file:line)`, with ` in caller (file:line)`
/// or ` < caller (file:line)` after it) to `w` characters without losing
/// what tells two sites apart: first the qualifiers of function names and
/// the directories of files (`...::pop`), then the middle of the longest
/// function names (down to `MIN_FUNCTION` characters); every `(file:line)` stays
/// whole. The result is longer than `w` when that is not enough (the
/// table then widens the column). A name without a location (a lock's
/// label) loses its qualifiers, then its middle, as [`elide`] does.
///
/// Cutting the middle of the whole string, the former rule, kept its head
/// and tail and lost the line between them: two sites of `queue_pop` both
/// printed as `queue_pop (prod...prodcons.c:41)`.
pub fn elide_name(s: &str, w: usize) -> String {
    if s.chars().count() <= w {
        return s.to_string();
    }
    let mut pieces = parse_name(s);
    if !pieces.iter().any(|p| p.loc) {
        let mut p = Piece::path(s, "::", false);
        while p.render().chars().count() > w {
            match p.next_drop() {
                Some(d) => p.dropped = d,
                None => break,
            }
        }
        return elide(&p.render(), w);
    }
    let len =
        |pieces: &[Piece]| -> usize { pieces.iter().map(|p| p.render().chars().count()).sum() };
    // Qualifiers and directories first, the longest piece first.
    while len(&pieces) > w {
        let best = (0..pieces.len())
            .filter_map(|i| Some((i, pieces[i].next_drop()?)))
            .max_by_key(|&(i, _)| pieces[i].render().chars().count());
        match best {
            Some((i, d)) => pieces[i].dropped = d,
            None => break,
        }
    }
    // Then the middle of the longest function name, one character at a
    // time, so that the function names share the cut.
    while len(&pieces) > w {
        let best = (0..pieces.len())
            .filter(|&i| !pieces[i].fixed && !pieces[i].loc)
            .map(|i| (i, pieces[i].render().chars().count()))
            .filter(|&(_, n)| n > MIN_FUNCTION)
            .max_by_key(|&(i, n)| (n, std::cmp::Reverse(i)));
        match best {
            Some((i, n)) => pieces[i].cut = Some(n - 1),
            None => break,
        }
    }
    if len(&pieces) <= w {
        return pieces.iter().map(Piece::render).collect();
    }
    // Still too long for the column (a table must fit its terminal, or
    // its rows are word-wrapped into a heap of words): the middle of what
    // follows the first `function (file:line)`, which stays whole while
    // it fits, as does a mark after the last location (`[no user
    // frame]`: two sites may differ only by it) while there is room for
    // it. The table widens the
    // column where this makes two names print the same.
    let first_loc = pieces.iter().position(|p| p.loc).unwrap_or(0);
    let mark = usize::from(pieces.len() > first_loc + 1 && pieces.last().is_some_and(|p| p.fixed));
    let cat = |ps: &[Piece]| -> String { ps.iter().map(Piece::render).collect() };
    let head = cat(&pieces[..=first_loc]);
    let mid = cat(&pieces[first_loc + 1..pieces.len() - mark]);
    let tail = cat(&pieces[pieces.len() - mark..]);
    let (h, t) = (head.chars().count(), tail.chars().count());
    if h + t + 5 <= w {
        head + &elide(&mid, w - h - t) + &tail
    } else if h + 5 <= w {
        // No room for the mark: the line before it tells more sites
        // apart than the mark does.
        head + &elide(&mid, w - h)
    } else {
        elide(&(head + &mid + &tail), w)
    }
}

/// A site name's pieces: function names, locations, and the text between
/// them (separators, marks) kept whole.
fn parse_name(s: &str) -> Vec<Piece> {
    // Top-level parenthesized groups that are locations.
    let mut locs: Vec<(usize, usize)> = Vec::new();
    let mut depth = 0i32;
    let mut open = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => {
                if depth == 0 {
                    open = i;
                }
                depth += 1;
            }
            ')' => {
                depth -= 1;
                if depth == 0 && is_location(&s[open + 1..i]) {
                    locs.push((open, i + 1));
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    let mut at = 0;
    for &(a, b) in &locs {
        // Before a location: [separator] function [space].
        let text = &s[at..a];
        let trimmed = text.trim_end();
        let mut lead = (text.len() - text.trim_start().len()).min(trimmed.len());
        if at > 0 {
            for sep in ["in ", "< "] {
                if trimmed[lead..].starts_with(sep) {
                    lead += sep.len();
                }
            }
        }
        if lead > 0 {
            out.push(Piece::text(&text[..lead]));
        }
        if lead < trimmed.len() {
            out.push(Piece::path(&trimmed[lead..], "::", false));
        }
        if trimmed.len() < text.len() {
            out.push(Piece::text(&text[trimmed.len()..]));
        }
        out.push(Piece::path(&s[a + 1..b - 1], "/", true));
        at = b;
    }
    if at < s.len() {
        out.push(Piece::text(&s[at..]));
    }
    out
}

/// Word-wraps every line longer than `width` (for text rendered
/// elsewhere and appended to the report).
pub fn fit_lines(text: &str, width: usize) -> String {
    wrap_long_lines(text, width)
}

/// Word-wraps every line longer than `width` (prose: headers, notes,
/// advice), continuing with the line's indentation plus 4; a word longer
/// than a line is cut.
fn wrap_long_lines(text: &str, width: usize) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        if line.chars().count() <= width {
            out.push_str(line);
            out.push('\n');
            continue;
        }
        let lead = line.len() - line.trim_start().len();
        let cont = " ".repeat((lead + 4).min(width / 2));
        let mut cur = line[..lead].to_string();
        let mut empty = true;
        for word in line.split(' ').filter(|w| !w.is_empty()) {
            let mut word = word.to_string();
            loop {
                let have = cur.chars().count();
                let need = word.chars().count() + usize::from(!empty);
                if have + need <= width {
                    if !empty {
                        cur.push(' ');
                    }
                    cur.push_str(&word);
                    empty = false;
                    break;
                }
                if empty {
                    // Longer than a whole line: cut it.
                    let room = width.saturating_sub(have).max(1);
                    let head: String = word.chars().take(room).collect();
                    cur.push_str(&head);
                    word = word.chars().skip(room).collect();
                }
                out.push_str(cur.trim_end());
                out.push('\n');
                cur.clone_from(&cont);
                empty = true;
                if word.is_empty() {
                    break;
                }
            }
        }
        if !empty {
            out.push_str(cur.trim_end());
            out.push('\n');
        }
    }
    out
}

/// `s` as a terminal shows it safely on one line: control characters
/// (a newline or tab in a thread name, an escape sequence in a path) are
/// written as `\n`, `\t`, `\r`, `\e` or `\xNN`, and a backslash stays
/// as it is. Text output only: JSON and CSV carry names as they are.
pub fn term(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut o = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => o.push_str("\\n"),
            '\t' => o.push_str("\\t"),
            '\r' => o.push_str("\\r"),
            '\x1b' => o.push_str("\\e"),
            c if c.is_control() => {
                let _ = write!(o, "\\x{:02x}", c as u32);
            }
            c => o.push(c),
        }
    }
    std::borrow::Cow::Owned(o)
}

/// The tail of a detailed-mode analysis' text: its recommendations, if
/// any, then its notes (shared by `barriers` and `deadwrites`).
pub fn advice_and_notes(
    out: &mut dyn std::io::Write,
    advice: &[String],
    notes: &[String],
) -> std::io::Result<()> {
    if !advice.is_empty() {
        writeln!(out, "\nrecommendations")?;
        for a in advice {
            writeln!(out, "  - {a}")?;
        }
    }
    for n in notes {
        writeln!(out, "note: {n}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_in_names_are_shown_escaped() {
        assert!(matches!(term("plain name"), std::borrow::Cow::Borrowed(_)));
        assert_eq!(term("a\nb\tc\x1b[31m\x7f"), "a\\nb\\tc\\e[31m\\x7f");
    }

    #[test]
    fn the_qualifiers_of_a_function_go_before_its_name_or_line() {
        let a = "app::server::network::queue::Queue<T>::pop (queue.rs:41)";
        assert_eq!(elide_name(a, 34), "...::Queue<T>::pop (queue.rs:41)");
        // Narrower: every qualifier, then the middle of the function
        // name, never its location.
        assert_eq!(elide_name(a, 25), "...::pop (queue.rs:41)");
        let long = "handle_incoming_request_batch (server.c:120)";
        assert_eq!(elide_name(long, 30), "handle..._batch (server.c:120)");
        // A file's directories go first too.
        assert_eq!(
            elide_name("worker (src/net/deep/dir/server.c:120)", 30),
            "worker (.../dir/server.c:120)"
        );
        // Names that fit, and names without a location, as before.
        assert_eq!(
            elide_name("worker (server.c:120)", 30),
            "worker (server.c:120)"
        );
        assert_eq!(
            elide_name("(no holder: hand-off / wake-up latency)", 20).len(),
            20
        );
    }
}
