//! [`LocalFiles`]: one file per sample, at the path the catalog gives.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;

use super::{ReadMode, Served, Source, SourceStats};
use crate::catalog::{Catalog, SampleId};
use crate::error::Cause;

/// The per-sample byte limit of every source (files, objects, tar members) unless set
/// with its `with_max_bytes`: 64 MiB, far above any sane training image and far
/// below what would hurt if a stray video or archive hides behind an image name.
pub const DEFAULT_MAX_BYTES: u64 = 64 << 20;

/// Reads each sample from its own file, at the path the catalog gives.
#[derive(Debug)]
pub struct LocalFiles {
    catalog: Arc<Catalog>,
    mode: ReadMode,
    max_bytes: u64,
    served: Served,
    /// The extensions of the files of the same stem read with each sample, as a record
    /// ([`LocalFiles::with_sidecars`]); empty: the sample alone.
    sidecars: Vec<String>,
}

impl LocalFiles {
    /// A source for the samples of `catalog`, reading in `mode`, with the
    /// [default byte limit](DEFAULT_MAX_BYTES).
    pub fn new(catalog: Arc<Catalog>, mode: ReadMode) -> LocalFiles {
        LocalFiles {
            catalog,
            mode,
            max_bytes: DEFAULT_MAX_BYTES,
            served: Served::default(),
            sidecars: Vec::new(),
        }
    }

    /// Reads each sample as a record ([`crate::storage::record`]'s frame): the sample's
    /// file under its modality's name (`image`, `audio`), then each file of the same
    /// stem and one of `extensions` (`a.jpg`'s `a.txt`, `a.json`) that exists, under its
    /// extension. Each file is bounded by the byte limit.
    pub fn with_sidecars(self, extensions: Vec<String>) -> LocalFiles {
        LocalFiles {
            sidecars: extensions,
            ..self
        }
    }

    /// Sample `id` and the sidecars that exist, framed into `out`.
    fn read_record(&self, id: SampleId, out: &mut Vec<u8>) -> Result<(), Cause> {
        let path = self.catalog.path(id);
        let mut sample = Vec::new();
        self.read_file(&path, &mut sample)?;
        let mut found: Vec<(&str, Vec<u8>)> = Vec::new();
        for ext in &self.sidecars {
            let sidecar = path.with_extension(ext);
            if sidecar == path {
                continue;
            }
            let mut bytes = Vec::new();
            match self.read_file(&sidecar, &mut bytes) {
                Ok(()) => found.push((ext, bytes)),
                // Absent: the field that wants it is the sample's `missing-field`.
                Err(Cause::Missing) => {}
                // An empty caption is an empty member, not a damaged sample.
                Err(Cause::Empty) => found.push((ext, Vec::new())),
                Err(cause) => return Err(cause),
            }
        }
        let mut members: Vec<(&str, &[u8])> = vec![(self.catalog.modality().name(), &sample)];
        members.extend(found.iter().map(|(ext, bytes)| (*ext, bytes.as_slice())));
        super::record::write_frame(&members, out);
        Ok(())
    }

    /// Refuses samples larger than `limit` bytes with [`Cause::TooLarge`], before
    /// reading them, instead of the default limit of [`DEFAULT_MAX_BYTES`].
    pub fn with_max_bytes(self, limit: u64) -> LocalFiles {
        LocalFiles {
            max_bytes: limit,
            ..self
        }
    }

    fn read_file(&self, path: &Path, out: &mut Vec<u8>) -> Result<(), Cause> {
        read_regular_file(path, self.max_bytes, self.mode, out)
    }
}

/// Appends the bytes of the regular file at `path` to `out`: refused when it is not a
/// regular file, empty, or larger than `max_bytes` (before reading it, and if it grew),
/// its pages dropped from the page cache around the read with [`ReadMode::Cold`].
pub(crate) fn read_regular_file(
    path: &Path,
    max_bytes: u64,
    mode: ReadMode,
    out: &mut Vec<u8>,
) -> Result<(), Cause> {
    let file = OpenOptions::new()
        .read(true)
        // A FIFO put where an image was would block `open` until a writer appears,
        // hanging a loader thread; with O_NONBLOCK it opens at once and is refused
        // below. O_NONBLOCK does nothing to reads of regular files.
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| Cause::from_io(&e))?;
    let meta = file.metadata().map_err(|e| Cause::from_io(&e))?;
    if meta.is_dir() {
        return Err(Cause::Io(
            "it is a directory, not an image file (re-scan the dataset if it changed)".to_string(),
        ));
    }
    if !meta.is_file() {
        return Err(Cause::Io(
            "it is not a regular file (a FIFO, socket or device?)".to_string(),
        ));
    }
    let len = meta.len();
    if len == 0 {
        return Err(Cause::Empty);
    }
    if len > max_bytes {
        return Err(Cause::TooLarge {
            bytes: len,
            limit: max_bytes,
            field: None,
        });
    }

    if mode == ReadMode::Cold {
        drop_cached(&file).map_err(|e| {
            Cause::Io(format!(
                "cannot drop cached pages for a cold read ({e}); use ReadMode::Cached \
                 on this system"
            ))
        })?;
    }
    // Only a hint: the file may have changed size since the fstat, so read to the
    // end, but never more than one byte past the limit, which is enough to tell that
    // it grew too large.
    out.reserve(len as usize);
    let read = (&file).take(max_bytes.saturating_add(1)).read_to_end(out);
    if mode == ReadMode::Cold {
        // The first call on this file succeeded, so this one fails only in ways that
        // cost cache hygiene, not the bytes already read.
        let _ = drop_cached(&file);
    }
    let read = read.map_err(|e| Cause::from_io(&e))? as u64;
    if read > max_bytes {
        let now = file.metadata().map_or(read, |m| m.len().max(read));
        return Err(Cause::TooLarge {
            bytes: now,
            limit: max_bytes,
            field: None,
        });
    }
    if read == 0 {
        return Err(Cause::Empty);
    }
    Ok(())
}

impl Source for LocalFiles {
    fn read(&self, id: SampleId, out: &mut Vec<u8>) -> Result<(), Cause> {
        out.clear();
        let read = match self.sidecars.is_empty() {
            true => self.read_file(&self.catalog.path(id), out),
            false => self.read_record(id, out),
        };
        self.served.settle(read, out)
    }

    fn location(&self, id: SampleId) -> String {
        self.catalog.path(id).display().to_string()
    }

    fn stats(&self) -> SourceStats {
        self.served.stats()
    }
}

/// Asks the kernel to drop `file`'s pages from the page cache (clean pages only; dirty
/// ones stay until written back, which is harmless here since samples are only read).
#[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
pub(super) fn drop_cached(file: &File) -> io::Result<()> {
    use std::os::fd::AsRawFd;

    // SAFETY: posix_fadvise takes only integers and touches no memory of ours. The
    // descriptor is valid for the whole call because `file` is borrowed, so the advice
    // cannot land on a descriptor that was closed and reused.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    // posix_fadvise returns the error number instead of setting errno.
    match rc {
        0 => Ok(()),
        errno => Err(io::Error::from_raw_os_error(errno)),
    }
}

/// Elsewhere there is no portable way to drop a file's cached pages, so cold reads
/// fail with a message naming the alternative, rather than silently reading warm.
#[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
pub(super) fn drop_cached(_file: &File) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "posix_fadvise is not available on this platform",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// A flat dataset whose files hold the given bytes, and a source over it.
    fn source(files: &[(&str, &[u8])], mode: ReadMode) -> (tempfile::TempDir, LocalFiles) {
        let dir = tempfile::tempdir().unwrap();
        for (name, bytes) in files {
            fs::write(dir.path().join(name), bytes).unwrap();
        }
        let (catalog, _) = Catalog::scan(dir.path(), crate::sample::Modality::Image).unwrap();
        (dir, LocalFiles::new(Arc::new(catalog), mode))
    }

    fn id_of(source: &LocalFiles, name: &str) -> SampleId {
        (0..source.catalog.len() as u64)
            .find(|&id| source.catalog.relative_path(id) == name)
            .unwrap()
    }

    fn read(source: &LocalFiles, name: &str) -> Result<Vec<u8>, Cause> {
        let mut out = b"stale bytes from an earlier sample".to_vec();
        let result = source.read(id_of(source, name), &mut out);
        result.map(|()| out)
    }

    #[test]
    fn reads_exact_bytes_into_a_reused_buffer() {
        let big: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let (_dir, src) = source(
            &[("a.jpg", b"\xff\xd8abc"), ("b.png", &big)],
            ReadMode::Cached,
        );
        let mut out = Vec::with_capacity(1 << 20);
        let capacity = out.capacity();
        src.read(id_of(&src, "b.png"), &mut out).unwrap();
        assert_eq!(out, big);
        src.read(id_of(&src, "a.jpg"), &mut out).unwrap();
        assert_eq!(out, b"\xff\xd8abc");
        assert_eq!(out.capacity(), capacity);
    }

    #[test]
    fn cold_reads_return_the_same_bytes() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 253) as u8).collect();
        let (_dir, cold) = source(&[("a.jpg", &data)], ReadMode::Cold);
        let cached = LocalFiles::new(cold.catalog.clone(), ReadMode::Cached);
        assert_eq!(read(&cold, "a.jpg").unwrap(), data);
        assert_eq!(read(&cold, "a.jpg").unwrap(), data);
        assert_eq!(read(&cached, "a.jpg").unwrap(), data);
    }

    #[test]
    fn a_deleted_file_is_missing() {
        let (dir, src) = source(&[("a.jpg", b"x")], ReadMode::Cached);
        fs::remove_file(dir.path().join("a.jpg")).unwrap();
        assert_eq!(read(&src, "a.jpg"), Err(Cause::Missing));
    }

    #[test]
    fn an_empty_file_is_empty() {
        let (_dir, src) = source(&[("a.jpg", b"")], ReadMode::Cached);
        assert_eq!(read(&src, "a.jpg"), Err(Cause::Empty));
    }

    #[test]
    fn a_file_over_the_limit_is_too_large() {
        let (_dir, src) = source(&[("a.jpg", b"12345"), ("b.jpg", b"1234")], ReadMode::Cached);
        let src = src.with_max_bytes(4);
        assert_eq!(
            read(&src, "a.jpg"),
            Err(Cause::TooLarge {
                bytes: 5,
                limit: 4,
                field: None
            })
        );
        assert_eq!(read(&src, "b.jpg").unwrap(), b"1234");
        let mut out = b"junk".to_vec();
        assert!(src.read(id_of(&src, "a.jpg"), &mut out).is_err());
        assert!(out.is_empty(), "a failed read must not leave bytes behind");
    }

    #[test]
    fn a_directory_in_place_of_a_file_is_an_io_error() {
        let (dir, src) = source(&[("a.jpg", b"x")], ReadMode::Cached);
        let path = dir.path().join("a.jpg");
        fs::remove_file(&path).unwrap();
        fs::create_dir(&path).unwrap();
        match read(&src, "a.jpg") {
            Err(Cause::Io(msg)) => assert!(msg.contains("directory"), "{msg}"),
            other => panic!("expected an I/O cause, got {other:?}"),
        }
    }

    #[test]
    fn a_fifo_in_place_of_a_file_is_refused_without_blocking() {
        let (dir, src) = source(&[("a.jpg", b"x")], ReadMode::Cached);
        let path = dir.path().join("a.jpg");
        fs::remove_file(&path).unwrap();
        let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path; mkfifo touches nothing else.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        assert!(matches!(read(&src, "a.jpg"), Err(Cause::Io(msg)) if msg.contains("regular")));
    }

    #[test]
    fn stats_count_successful_reads_only() {
        let (dir, src) = source(
            &[("a.jpg", b"abc"), ("b.jpg", b"defgh"), ("c.jpg", b"")],
            ReadMode::Cached,
        );
        assert_eq!(src.stats(), SourceStats::default());
        read(&src, "a.jpg").unwrap();
        read(&src, "b.jpg").unwrap();
        read(&src, "a.jpg").unwrap();
        read(&src, "c.jpg").unwrap_err();
        fs::remove_file(dir.path().join("b.jpg")).unwrap();
        read(&src, "b.jpg").unwrap_err();
        assert_eq!(
            src.stats(),
            SourceStats {
                bytes: 11,
                requests: 3
            }
        );
    }

    #[test]
    fn location_is_the_path_and_the_trait_is_object_safe() {
        let (dir, src) = source(&[("a.jpg", b"x")], ReadMode::Cached);
        let src: Box<dyn Source> = Box::new(src);
        let expected = fs::canonicalize(dir.path()).unwrap().join("a.jpg");
        assert_eq!(src.location(0), expected.display().to_string());
    }
}
