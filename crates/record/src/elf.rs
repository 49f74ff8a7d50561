//! GNU build-id of an ELF file, read from its `PT_NOTE` segments.
//!
//! Written by hand rather than with the `object` crate: only the file
//! header, the program headers and the notes are needed (a few hundred
//! bytes), and every length in them is checked against the file before
//! use. The files are whatever the program mapped: untrusted.

use std::fs::File;
use std::io::{Cursor, Read, Seek, SeekFrom};
use std::path::Path;

const PT_NOTE: u32 = 4;
const NT_GNU_BUILD_ID: u32 = 3;
/// Notes larger than this are not build-id notes worth reading.
const MAX_NOTE_SEGMENT: u64 = 64 * 1024;
const MAX_PHNUM: u64 = 4096;

fn read_at<F: Read + Seek>(f: &mut F, off: u64, len: usize) -> Option<Vec<u8>> {
    f.seek(SeekFrom::Start(off)).ok()?;
    let mut buf = vec![0u8; len];
    f.read_exact(&mut buf).ok()?;
    Some(buf)
}

fn u16_at(b: &[u8], i: usize) -> Option<u64> {
    Some(u64::from(u16::from_le_bytes(
        b.get(i..i + 2)?.try_into().ok()?,
    )))
}
fn u32_at(b: &[u8], i: usize) -> Option<u64> {
    Some(u64::from(u32::from_le_bytes(
        b.get(i..i + 4)?.try_into().ok()?,
    )))
}
fn u64_at(b: &[u8], i: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(i..i + 8)?.try_into().ok()?))
}

/// The GNU build-id of the ELF file at `path`; `None` when the file is not
/// a little-endian ELF file, has no build-id note, or cannot be read.
/// Never panics, whatever the file holds.
pub fn build_id(path: &Path) -> Option<Vec<u8>> {
    // Only regular files: opening a FIFO or a device that the program
    // happened to map could block or have side effects.
    if !std::fs::metadata(path).ok()?.is_file() {
        return None;
    }
    let mut f = File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    build_id_from(&mut f, len)
}

/// [`build_id`] of an ELF image held in memory (the body of the
/// `elf_build_id` fuzz target, whose seeds the stable tests replay).
pub fn build_id_of_bytes(data: &[u8]) -> Option<Vec<u8>> {
    build_id_from(&mut Cursor::new(data), data.len() as u64)
}

/// The build-id of the `len`-byte ELF image `f`; every offset and size in
/// it is checked against `len` before it is read.
fn build_id_from<F: Read + Seek>(f: &mut F, len: u64) -> Option<Vec<u8>> {
    let eh = read_at(f, 0, 64.min(len as usize))?;
    if eh.len() < 52 || eh[..4] != *b"\x7fELF" || eh[5] != 1 {
        return None;
    }
    let is64 = match eh[4] {
        1 => false,
        2 => true,
        _ => return None,
    };
    let (phoff, phentsize, phnum) = if is64 {
        (u64_at(&eh, 32)?, u16_at(&eh, 54)?, u16_at(&eh, 56)?)
    } else {
        (u32_at(&eh, 28)?, u16_at(&eh, 42)?, u16_at(&eh, 44)?)
    };
    let min_ent = if is64 { 56 } else { 32 };
    if phnum == 0 || phnum > MAX_PHNUM || phentsize < min_ent {
        return None;
    }
    let table = phentsize.checked_mul(phnum)?;
    if phoff.checked_add(table)? > len {
        return None;
    }
    let ph = read_at(f, phoff, table as usize)?;
    for i in 0..phnum as usize {
        let e = i * phentsize as usize;
        if u32_at(&ph, e)? != PT_NOTE as u64 {
            continue;
        }
        let (off, size, align) = if is64 {
            (
                u64_at(&ph, e + 8)?,
                u64_at(&ph, e + 32)?,
                u64_at(&ph, e + 48)?,
            )
        } else {
            (
                u32_at(&ph, e + 4)?,
                u32_at(&ph, e + 16)?,
                u32_at(&ph, e + 28)?,
            )
        };
        if size > MAX_NOTE_SEGMENT || off.checked_add(size)? > len {
            continue;
        }
        let notes = read_at(f, off, size as usize)?;
        if let Some(id) = find_build_id(&notes, if align == 8 { 8 } else { 4 }) {
            return Some(id);
        }
    }
    None
}

/// Walks a note segment (namesz, descsz, type, name, desc; padded to
/// `align`).
fn find_build_id(notes: &[u8], align: usize) -> Option<Vec<u8>> {
    let pad = |n: usize| n.checked_add(align - 1).map(|v| v & !(align - 1));
    let mut i = 0usize;
    while i + 12 <= notes.len() {
        let namesz = u32_at(notes, i)? as usize;
        let descsz = u32_at(notes, i + 4)? as usize;
        let ty = u32_at(notes, i + 8)? as u32;
        let name_at = i + 12;
        let desc_at = name_at.checked_add(pad(namesz)?)?;
        let next = desc_at.checked_add(pad(descsz)?)?;
        let name = notes.get(name_at..name_at.checked_add(namesz)?)?;
        let desc = notes.get(desc_at..desc_at.checked_add(descsz)?)?;
        if ty == NT_GNU_BUILD_ID && name == b"GNU\0" && !desc.is_empty() {
            return Some(desc.to_vec());
        }
        i = next;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_executable_has_a_build_id_or_none_without_panic() {
        // Rust test binaries are linked with a build-id by default on Linux.
        let exe = std::env::current_exe().unwrap();
        let id = build_id(&exe);
        if let Some(id) = &id {
            assert!(id.len() >= 8, "{id:?}");
        }
        // libc always has one on Debian.
        for p in ["/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib64/libc.so.6"] {
            if Path::new(p).exists() {
                assert!(build_id(Path::new(p)).is_some_and(|v| v.len() == 20));
            }
        }
    }

    #[test]
    fn the_seed_images_give_their_build_id_or_none() {
        let seeds = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/elf_build_id");
        let id: Vec<u8> = (0x10..0x24).collect();
        for (file, want) in [
            ("elf64_build_id.bin", Some(&id)),
            ("elf32_build_id.bin", Some(&id)),
            ("elf64_other_note_then_build_id.bin", Some(&id)),
            ("elf64_truncated_note.bin", None),
            ("elf64_huge_namesz.bin", None),
            ("elf64_phnum_past_end.bin", None),
            ("big_endian.bin", None),
            ("not_elf.bin", None),
            ("empty.bin", None),
        ] {
            let bytes = std::fs::read(seeds.join(file)).unwrap();
            assert_eq!(build_id_of_bytes(&bytes).as_ref(), want, "{file}");
            // The file reader and the in-memory one agree.
            assert_eq!(build_id(&seeds.join(file)).as_ref(), want, "{file}");
        }
        let exe = std::env::current_exe().unwrap();
        assert_eq!(
            build_id_of_bytes(&std::fs::read(&exe).unwrap()),
            build_id(&exe)
        );
    }

    #[test]
    fn garbage_and_truncations_never_panic() {
        let exe = std::env::current_exe().unwrap();
        let bytes = std::fs::read(&exe).unwrap();
        let dir = std::env::temp_dir().join(format!("lself-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("f");
        let mut seed = 0x1234_5678_u64;
        for round in 0..200 {
            let mut b = bytes[..bytes.len().min(8192)].to_vec();
            if b.is_empty() {
                continue;
            }
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let cut = (seed >> 33) as usize % (b.len() + 1);
            if round % 2 == 0 {
                b.truncate(cut);
            } else {
                for k in 0..8 {
                    let at = ((seed >> (k * 4)) as usize)
                        .wrapping_mul(31)
                        .wrapping_add(k)
                        % b.len();
                    b[at] ^= (seed >> k) as u8;
                }
            }
            std::fs::write(&p, &b).unwrap();
            let _ = build_id(&p);
        }
        assert_eq!(find_build_id(&[0xff; 40], 4), None);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
