//! `lockscope cc` / `lockscope c++`: compiler wrappers for detailed mode.
//!
//! They compile with `-fsanitize=thread` (so that the compiler calls the
//! ThreadSanitizer ABI for every access, atomic and function entry/exit)
//! and link `liblockscope_tsan.a` instead of the sanitizer's runtime. Usable
//! as `CC`/`CXX` for make, CMake and autotools: anything that is not a
//! compile or a link (`--version`, `-v`, `-dumpmachine`, `-print-*`) goes to
//! the compiler unchanged.
//!
//! Why a compile+link command is split in two: with `-fsanitize=thread` on
//! the link line gcc links its own libtsan (whose interceptors would then
//! run), and gcc has no `-fno-sanitize-link-runtime` like clang. So each
//! source is compiled to a temporary object with the sanitizer flag, and
//! the objects are linked without it. The alternative, always passing
//! clang's flag, would not work with gcc, the default `cc` here.
//!
//! The compiler is `$LOCKSCOPE_CC` (default `cc`) or `$LOCKSCOPE_CXX`
//! (default `c++`).

use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::process::Command;

use anyhow::Context;

/// Compile and link C/C++ for detailed mode (use as CC / CXX).
///
/// Compiles with -fsanitize=thread and links lockscope's own runtime instead
/// of the sanitizer's: `lockscope cc -O2 -g -pthread prog.c -o prog`, or
/// `make CC="lockscope cc" CXX="lockscope c++"`. Every argument goes to the
/// compiler ($LOCKSCOPE_CC, default cc; $LOCKSCOPE_CXX, default c++), so
/// `lockscope cc --help` is the compiler's help.
#[derive(clap::Args)]
#[command(disable_help_flag = true, disable_version_flag = true)]
pub struct Args {
    /// Compiler arguments, as for `cc` (`$LOCKSCOPE_CC`, default `cc`) or
    /// `c++` (`$LOCKSCOPE_CXX`, default `c++`).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    pub args: Vec<OsString>,
}

/// Which driver the wrapper stands for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Lang {
    /// `lockscope cc`.
    C,
    /// `lockscope c++`.
    Cxx,
}

// The functions the runtime wraps at link time to see release points, its
// marker symbol and file name: one list, shared with the runtime.
use lockscope_tsan_abi::{RUNTIME_MARKER, STATICLIB, WRAPPED};

/// System libraries the Rust staticlib needs (`rustc --print
/// native-static-libs`).
const RUNTIME_LIBS: &[&str] = &["-lgcc_s", "-lpthread", "-lm", "-ldl", "-lrt"];

/// Options that take their value as the next argument.
const TAKES_VALUE: &[&str] = &[
    "-o",
    "-I",
    "-D",
    "-U",
    "-include",
    "-imacros",
    "-isystem",
    "-idirafter",
    "-iquote",
    "-iprefix",
    "-iwithprefix",
    "-iwithprefixbefore",
    "-isysroot",
    "--sysroot",
    "-x",
    "-MF",
    "-MT",
    "-MQ",
    "-L",
    "-l",
    "-Xlinker",
    "-Xassembler",
    "-Xpreprocessor",
    "-Xclang",
    "-T",
    "-u",
    "-z",
    "-e",
    "--param",
    "-aux-info",
    "-target",
    "--target",
    "-arch",
    "-dumpbase",
    "-dumpdir",
];

const SOURCE_EXT: &[&str] = &[
    "c", "i", "cc", "cp", "cxx", "cpp", "CPP", "c++", "C", "ii", "m", "mi", "mm", "M", "mii",
];

/// One classified command-line argument.
#[derive(Clone, Debug, PartialEq)]
enum Arg {
    /// A source file to compile (with the `-x` language in force, if any).
    Source(OsString, Option<OsString>),
    /// `-o FILE`.
    Output(OsString),
    /// A linker input or linker-only option (objects, archives, -l, -L,
    /// -Wl,...): dropped from compile steps.
    LinkOnly(Vec<OsString>),
    /// Anything else (kept for both steps, in order).
    Other(Vec<OsString>),
}

/// What the command line asks the driver to do.
#[derive(Debug, PartialEq)]
struct Parsed {
    args: Vec<Arg>,
    /// -c, -S, -E, -M, -MM or -fsyntax-only: no link step.
    no_link: bool,
    /// -shared: a shared library (the runtime belongs in the executable).
    shared: bool,
    /// -r / -Wl,-r style relocatable link, or a query (-v, --version...).
    passthrough: bool,
}

fn is_source(a: &OsStr, lang: &Option<OsString>) -> bool {
    if lang.as_deref().is_some_and(|l| l != "none") {
        return true;
    }
    let p = Path::new(a);
    p.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| SOURCE_EXT.contains(&e))
}

fn parse(argv: &[OsString]) -> Parsed {
    let mut out = Vec::new();
    let (mut no_link, mut shared, mut passthrough) = (false, false, false);
    let mut lang: Option<OsString> = None;
    let mut it = argv.iter().peekable();
    let mut any_input = false;
    while let Some(a) = it.next() {
        let s = a.to_string_lossy();
        if s == "-" || !s.starts_with('-') {
            any_input = true;
            if s != "-" && is_source(a, &lang) || s == "-" && lang.is_some() {
                out.push(Arg::Source(a.clone(), lang.clone()));
            } else {
                out.push(Arg::LinkOnly(vec![a.clone()]));
            }
            continue;
        }
        match s.as_ref() {
            "-c" | "-S" | "-E" | "-M" | "-MM" | "-fsyntax-only" => no_link = true,
            "-shared" => shared = true,
            "-r" | "-v" | "--version" | "-dumpversion" | "-dumpmachine" | "-dumpspecs"
            | "--help" | "-###" => passthrough = true,
            _ if s.starts_with("-print-") || s.starts_with("--print") => passthrough = true,
            _ => {}
        }
        if s == "-o" {
            if let Some(v) = it.next() {
                out.push(Arg::Output(v.clone()));
            }
            continue;
        }
        if s == "-x" {
            let v = it.next().cloned();
            lang = v.clone().filter(|l| l != "none");
            let mut group = vec![a.clone()];
            group.extend(v);
            out.push(Arg::Other(group));
            continue;
        }
        if let Some(l) = s.strip_prefix("-x").filter(|l| !l.is_empty()) {
            lang = (l != "none").then(|| OsString::from(l));
            out.push(Arg::Other(vec![a.clone()]));
            continue;
        }
        let link_only = s.starts_with("-l")
            || s.starts_with("-L")
            || s.starts_with("-Wl,")
            || s == "-Xlinker"
            || s == "-static"
            || s == "-rdynamic"
            || s == "-pie"
            || s == "-no-pie"
            || s == "-nostdlib"
            || s == "-nodefaultlibs"
            || s == "-nostartfiles"
            || s == "-shared"
            || s == "-u"
            || s == "-T"
            || s == "-z";
        let mut group = vec![a.clone()];
        if TAKES_VALUE.contains(&s.as_ref()) {
            if let Some(v) = it.next() {
                group.push(v.clone());
            }
        }
        out.push(if link_only {
            Arg::LinkOnly(group)
        } else {
            Arg::Other(group)
        });
    }
    if !any_input && !passthrough {
        // No input at all (e.g. `cc -v` variants we did not list): let the
        // compiler answer.
        passthrough = true;
    }
    Parsed {
        args: out,
        no_link,
        shared,
        passthrough,
    }
}

fn compiler(lang: Lang) -> OsString {
    let (var, default) = match lang {
        Lang::C => ("LOCKSCOPE_CC", "cc"),
        Lang::Cxx => ("LOCKSCOPE_CXX", "c++"),
    };
    std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| default.into())
}

/// Splits `$LOCKSCOPE_CC` ("ccache gcc", "clang-16 -m64") into a program
/// and leading arguments.
fn command_for(cc: &OsStr) -> Command {
    let s = cc.to_string_lossy();
    let mut words = s.split_whitespace();
    let mut cmd = Command::new(words.next().unwrap_or("cc"));
    cmd.args(words);
    cmd
}

fn run_cmd(mut cmd: Command) -> anyhow::Result<i32> {
    let prog = format!("{cmd:?}");
    if std::env::var_os("LOCKSCOPE_CC_VERBOSE").is_some() {
        eprintln!("lockscope cc: {prog}");
    }
    let st = cmd
        .status()
        .with_context(|| format!("cannot run the compiler: {prog}"))?;
    Ok(exit_code(st))
}

fn exit_code(st: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0))
}

/// Arguments that link the runtime into an executable.
fn runtime_link_args(lib: &Path) -> Vec<OsString> {
    let mut v: Vec<OsString> = Vec::new();
    let mut wl = String::from("-Wl");
    for f in WRAPPED {
        wl.push_str(",--wrap=");
        wl.push_str(f);
    }
    // The marker the preload library looks for (so that a preloaded copy
    // stands down), kept and exported even though nothing references it.
    wl.push_str(",--undefined=");
    wl.push_str(RUNTIME_MARKER);
    wl.push_str(",--export-dynamic-symbol=");
    wl.push_str(RUNTIME_MARKER);
    v.push(wl.into());
    v.push(lib.as_os_str().to_owned());
    v.extend(RUNTIME_LIBS.iter().map(OsString::from));
    v
}

fn is_lang_option(g: &[OsString]) -> bool {
    g.first()
        .is_some_and(|x| x.to_string_lossy().starts_with("-x"))
}

/// Runs `lockscope cc` or `lockscope c++`; returns the compiler's exit
/// code.
pub fn run_lang(args: Args, lang: Lang) -> anyhow::Result<i32> {
    let cc = compiler(lang);
    let p = parse(&args.args);
    if p.passthrough {
        let mut cmd = command_for(&cc);
        cmd.args(&args.args);
        return run_cmd(cmd);
    }
    let flat = |a: &Arg, out: &mut Vec<OsString>| match a {
        Arg::Source(s, _) => out.push(s.clone()),
        Arg::Output(o) => {
            out.push("-o".into());
            out.push(o.clone());
        }
        Arg::LinkOnly(g) | Arg::Other(g) => out.extend(g.iter().cloned()),
    };
    if p.no_link {
        let mut cmd = command_for(&cc);
        cmd.arg("-fsanitize=thread");
        let mut v = Vec::new();
        for a in &p.args {
            flat(a, &mut v);
        }
        cmd.args(v);
        return run_cmd(cmd);
    }
    let lib = if p.shared {
        None
    } else {
        Some(super::util::find_library(STATICLIB, "LOCKSCOPE_TSAN_LIB")?)
    };
    // Compile each source to a temporary object.
    // The objects go into a private directory of their own (created with
    // mode 0700 under $TMPDIR and removed, with them, when this function
    // returns): predictable names in a shared /tmp could be taken over by
    // another user's symlink.
    let temps = tempfile::Builder::new()
        .prefix("lockscope-cc-")
        .tempdir()
        .context("creating a temporary directory for the objects")?;
    let mut link: Vec<OsString> = Vec::new();
    // Options for the compile steps: everything but sources, the output,
    // linker inputs and `-x` (repeated per source below).
    let common: Vec<OsString> = p
        .args
        .iter()
        .filter_map(|a| match a {
            Arg::Other(g) if !is_lang_option(g) => Some(g.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    for (i, a) in p.args.iter().enumerate() {
        match a {
            Arg::Source(src, src_lang) => {
                let obj = temps.path().join(format!("{i}.o"));
                let mut cmd = command_for(&cc);
                cmd.arg("-fsanitize=thread");
                // Options before the source apply as written; the `-x` in
                // force for this file is repeated right before it.
                cmd.args(&common);
                if let Some(l) = src_lang {
                    cmd.arg("-x").arg(l);
                }
                cmd.arg("-c").arg(src).arg("-o").arg(&obj);
                let code = run_cmd(cmd)?;
                if code != 0 {
                    return Ok(code);
                }
                link.push(obj.into());
            }
            // Language selection is for compiling; objects follow.
            Arg::Other(g) if is_lang_option(g) => {}
            other => flat(other, &mut link),
        }
    }
    let mut cmd = command_for(&cc);
    cmd.args(&link);
    if let Some(lib) = &lib {
        cmd.args(runtime_link_args(lib));
    }
    run_cmd(cmd)
}

/// Runs `lockscope cc`.
pub fn run(args: Args) -> anyhow::Result<i32> {
    run_lang(args, Lang::C)
}

/// Runs `lockscope c++`.
pub fn run_cxx(args: Args) -> anyhow::Result<i32> {
    run_lang(args, Lang::Cxx)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn compile_only_is_not_split() {
        let p = parse(&os(&[
            "-O2", "-c", "a.c", "-o", "a.o", "-DX=1", "-I", "inc",
        ]));
        assert!(p.no_link && !p.passthrough);
        assert_eq!(p.args[2], Arg::Source("a.c".into(), None));
        assert_eq!(p.args[3], Arg::Output("a.o".into()));
        assert_eq!(p.args[5], Arg::Other(os(&["-I", "inc"])));
    }

    #[test]
    fn link_inputs_and_options_are_link_only() {
        let p = parse(&os(&["a.o", "b.c", "-lm", "-L/x", "-Wl,-O1", "-o", "prog"]));
        assert!(!p.no_link && !p.shared && !p.passthrough);
        assert_eq!(p.args[0], Arg::LinkOnly(os(&["a.o"])));
        assert_eq!(p.args[1], Arg::Source("b.c".into(), None));
        assert_eq!(p.args[2], Arg::LinkOnly(os(&["-lm"])));
        assert_eq!(p.args[4], Arg::LinkOnly(os(&["-Wl,-O1"])));
    }

    #[test]
    fn queries_pass_through_and_x_marks_sources() {
        assert!(parse(&os(&["--version"])).passthrough);
        assert!(parse(&os(&["-v"])).passthrough);
        assert!(parse(&os(&["-print-prog-name=ld"])).passthrough);
        assert!(parse(&os(&[])).passthrough);
        let p = parse(&os(&["-x", "c", "conftest", "-x", "none", "lib.a"]));
        assert_eq!(p.args[1], Arg::Source("conftest".into(), Some("c".into())));
        assert_eq!(p.args[3], Arg::LinkOnly(os(&["lib.a"])));
    }
}
